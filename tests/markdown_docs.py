"""pytest-markdown-docs, adapted to how this site is written.

* Fences inside content tabs and admonitions are indented; the plugin's
  CommonMark parser would see indented code and skip them silently. Here each
  indented fence is un-indented before parsing, so it runs like any other.
* ``--8<-- "snippets/x.py"`` (a pymdownx.snippets include) inside a fence is
  replaced by the file, so the test runs exactly what the page shows.
* At the end, the run reports how many Python blocks ran and how many were
  deliberately not run (``{.python notest}``, for fragments).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INCLUDE = re.compile(r'^(?P<indent>[ \t]*)--8<--[ \t]+"(?P<path>[^"]+)"[ \t]*$')
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
PYTHON_LANGS = ("python", "py", "python3")


def expand_includes(text: str) -> str:
    out = []
    for line in text.split("\n"):
        match = INCLUDE.match(line)
        if match is None:
            out.append(line)
            continue
        included = (ROOT / match["path"]).read_text(encoding="utf-8").rstrip("\n")
        out.extend(match["indent"] + part if part else part for part in included.split("\n"))
    return "\n".join(out)


def dedent_fences(text: str) -> str:
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        match = FENCE_OPEN.match(lines[index])
        if match is None:
            index += 1
            continue
        indent, fence = match["indent"], match["fence"]
        end = index + 1
        closing = re.compile(rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if indent:
            for k in range(index, min(end + 1, len(lines))):
                if lines[k].startswith(indent):
                    lines[k] = lines[k][len(indent):]
        index = end + 1
    return "\n".join(lines)


def prepare(text: str) -> str:
    return dedent_fences(expand_includes(text))


class SiteMarkdownIt(MarkdownIt):
    """CommonMark, after includes are expanded and fences un-indented."""

    def parse(self, src: str, env=None):  # type: ignore[override]
        return super().parse(prepare(src), env)


@pytest.hookimpl(tryfirst=True)
def pytest_markdown_docs_markdown_it() -> MarkdownIt:
    return SiteMarkdownIt(config="commonmark")


def python_fences(path: Path) -> list[set[str]]:
    """The option sets of every Python fence on a page (superfences syntax)."""
    found = []
    for token in SiteMarkdownIt("commonmark").parse(path.read_text(encoding="utf-8")):
        if token.type != "fence":
            continue
        info = token.info.strip()
        if info.startswith("{"):
            parts = info.strip("{}").split()
            lang = next((p[1:] for p in parts if p.startswith(".")), "")
            options = {p for p in parts if not p.startswith(".")}
        else:
            parts = info.split()
            lang, options = (parts[0] if parts else ""), set(parts[1:])
        if lang in PYTHON_LANGS:
            found.append(options)
    return found


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    if not config.option.markdowndocs:
        return
    ran = {"passed": 0, "failed": 0}
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            if report.when == "call" and "CodeFence#" in report.nodeid:
                ran[outcome] += 1
    pages = sorted(DOCS.rglob("*.md"))
    fences = [options for page in pages for options in python_fences(page)]
    skipped = sum(1 for options in fences if "notest" in options)
    snippets = sorted((ROOT / "snippets").glob("*.py"))
    terminalreporter.write_sep("-", "documentation examples")
    terminalreporter.write_line(
        f"markdown Python blocks: {ran['passed']} ran and passed, {ran['failed']} failed, "
        f"{skipped} deliberately not run (notest fragments), on {len(pages)} pages"
    )
    terminalreporter.write_line(f"snippet programs in snippets/: {len(snippets)} (each run as a subprocess)")
