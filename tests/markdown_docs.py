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
    """What this run ran: the pages whose blocks it collected, not every page of the site."""
    if not config.option.markdowndocs:
        return
    ran = {"passed": 0, "failed": 0}
    pages_run: set[str] = set()
    snippets = {"passed": 0, "failed": 0}
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            if report.when != "call":
                continue
            if "CodeFence#" in report.nodeid:
                ran[outcome] += 1
                pages_run.add(report.nodeid.split("::", 1)[0])
            elif "test_snippet_runs_alone_and_prints_what_is_recorded" in report.nodeid:
                snippets[outcome] += 1
    if not pages_run and not any(snippets.values()):
        return  # this run ran no documentation
    pages = sorted(ROOT / name for name in pages_run)
    fences = [options for page in pages if page.is_file() for options in python_fences(page)]
    skipped = sum(1 for options in fences if "notest" in options)
    terminalreporter.write_sep("-", "documentation examples")
    terminalreporter.write_line(
        f"markdown Python blocks: {ran['passed']} ran and passed, {ran['failed']} failed, "
        f"{skipped} deliberately not run (notest fragments), on {len(pages_run)} "
        + ("page" if len(pages_run) == 1 else "pages")
    )
    terminalreporter.write_line(f"snippet programs run as a subprocess: {snippets['passed']} passed, "
                                f"{snippets['failed']} failed")
