"""MkDocs build hooks (mkdocs.yml `hooks:`): repository buttons, and the example programs as downloads.

* No repository, no repository buttons. `repo_url` comes from the environment
  (REPO_URL, set by the Pages workflow). Without it MkDocs would still join
  `edit_uri` onto nothing and give every page a relative, broken "edit" link
  (and warn, which fails the strict build), so the build drops `edit_uri` and
  the pages get neither an edit nor a view button.
* Every program in `snippets/` (and its data files) is published beside the
  pages as `snippets/<name>`, with all of them in one archive,
  `snippets/queue_core-examples.zip`; under every block that includes a
  program, a page gets a link that downloads it. A reader needs no clone,
  save for a program that imports the repository's own code (``proof``, the
  checker): the archive leaves it out, and its link says it runs in a clone.
* A long program shows the lines that matter. When a program marks one
  section `shown` (`# --8<-- [start:shown]` ... `# --8<-- [end:shown]`), its
  page shows those lines with the file's own line numbers, the whole program
  folded below them, then its output. The marks are left out of what is
  published, so the download is the program the page shows. The copy button
  of the lines shown copies the whole program (its title says so): a
  fragment cut out of a program does not run on its own (its indentation
  alone fails it).
* The copy button of a shell session copies its commands only: no `$ `
  prompt and no output, so that what is pasted into a shell runs (a
  here-document's lines are part of its command). Material copies a block's
  `data-copy` attribute when it has one (its clipboard integration copies the
  text of the closest element with `data-copy`, else the code's own text);
  the shortened programs above use the same attribute. A line of its
  output longer than the block (a one-line JSON document, a one-line error)
  wraps in the block, with a hanging indent, instead of scrolling out of sight.
"""

from __future__ import annotations

import html
import io
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from docs_support.code_width import MAX_COLUMNS
from docs_support.run_here import SECTION_MARK, needs_a_machine, program, shown_and_run

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "snippets"
ARCHIVE = "snippets/queue_core-examples.zip"
INCLUDE = re.compile(
    r'^(?P<indent>[ \t]*)--8<--[ \t]+"snippets/(?P<name>[^"]+\.py)"[ \t]*$'
)
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")


SHOWN = "shown"  # the one section of a long program that its page shows
HL_LINES = re.compile(r'\bhl_lines="(?P<spec>[^"]*)"')


def examples() -> list[Path]:
    """What a reader can download: the programs and the batches they read."""
    return sorted(p for p in SNIPPETS.iterdir() if p.suffix in (".py", ".jsonl"))


# A program that imports the repository's own code runs in a clone only.
NEEDS_A_CLONE = re.compile(
    r"^[ \t]*(?:from|import)[ \t]+(?:proof|docs_support|tests)\b", re.M
)


def needs_a_clone(path: Path) -> bool:
    """Whether a program imports what only the repository has, not the package."""
    return path.suffix == ".py" and NEEDS_A_CLONE.search(program(path)) is not None


def in_archive() -> list[Path]:
    """The examples the zip holds: each runs alone with queue_core installed."""
    return [path for path in examples() if not needs_a_clone(path)]


def published(path: Path) -> bytes:
    """A program as the reader gets it: its section marks left out, as the page shows it."""
    return program(path).encode("utf-8")


def shown_lines(path: Path) -> tuple[int, int, int] | None:
    """(first, last, total): the lines of the ``shown`` section, numbered as published."""
    text = path.read_text("utf-8")
    first = last = None
    number = 0
    for line in text.split("\n"):
        mark = SECTION_MARK.match(line)
        if mark is None:
            number += 1
        elif mark["name"] == SHOWN and mark["end"] == "start":
            first = number + 1
        elif mark["name"] == SHOWN:
            last = number
    if first is None or last is None or last < first:
        return None
    return first, last, number - text.endswith("\n")


def zipped(entries: Iterable[tuple[str, bytes]]) -> bytes:
    """A zip of ``(name, content)``, each with a fixed date: the same bytes on every build."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, content)
    return buffer.getvalue()


DOCS = ROOT / "docs"
CHAPTER = re.compile(r"^# (?:(?P<number>\d+)\. )?(?P<title>.+)$", re.M)
# What the batches are, for the README of the zip (a .jsonl has no docstring).
DATA = {
    "demo.jsonl": "the reference demo's five lines; the pages' shell sessions call it"
    " batch.jsonl (cp demo.jsonl batch.jsonl)",
    "envelope_bad_line.jsonl": "a batch whose third line repeats a key",
    "envelope_conflict.jsonl": "a new E0005 with a changed E0001",
}


def chapter_of(name: str) -> tuple[str, str] | None:
    """The page that shows a program or batch: (its path in the site, its title).

    The chapter a reader meets first: the lowest numbered page that names it,
    else the first page (by name) that does.
    """
    found: list[tuple[float, str, str]] = []
    for page in sorted(DOCS.rglob("*.md")):
        if "includes" in page.parts:
            continue
        text = page.read_text("utf-8")
        if not re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", text):
            continue
        head = CHAPTER.search(text)
        if head is None:
            continue
        number = float(head["number"]) if head["number"] else float("inf")
        title = head.group(0)[2:]
        site_path = page.relative_to(DOCS).with_suffix("").as_posix() + "/"
        found.append((number, site_path, title))
    if not found:
        return None
    _, site_path, title = min(found)
    return site_path, title


def summary(path: Path) -> str:
    """The first line of a program's docstring (its own one-line summary)."""
    if path.suffix != ".py":
        return DATA.get(path.name, "")
    text = program(path).lstrip()
    if not text.startswith('"""'):
        return ""
    first = text[3:].split('"""', 1)[0].split("\n\n", 1)[0]  # its first paragraph
    return " ".join(first.split())


def examples_readme() -> str:
    """The zip's README.md: how to run a program, and each one's chapter."""
    lines = [
        "# queue_core examples",
        "",
        "Every program and batch that the documentation site shows, as the site shows",
        "it. Each program runs alone, in an empty folder, once queue_core is",
        "installed (`pip install .` in a clone of its repository): copy it there and",
        "run `python NAME.py`. It prints what its chapter shows under it, and leaves",
        "nothing behind (each makes its database in a temporary folder).",
        "",
        "| file | chapter (its page on the site) | what it shows |",
        "| --- | --- | --- |",
    ]
    for path in in_archive():
        where = chapter_of(path.name)
        chapter = f"{where[1]} (`{where[0]}`)" if where else ""
        lines.append(f"| `{path.name}` | {chapter} | {summary(path)} |")
    return "\n".join(lines) + "\n"


def archive() -> bytes:
    """Every example in one zip, under a folder of its own, with a README mapping each
    one to its chapter."""
    entries = [(f"queue_core-examples/{p.name}", published(p)) for p in in_archive()]
    entries.insert(
        0, ("queue_core-examples/README.md", examples_readme().encode("utf-8"))
    )
    return zipped(entries)


def on_config(config: Any) -> Any:
    if not config.get("repo_url"):
        config["edit_uri"] = None
    return config


RUNTIME = ROOT / "site_runtime" / "node_modules" / "pyodide"
# The runtime's files that a page's Run loads (the rest of the npm package is
# for node and for bundlers).
RUNTIME_FILES = (
    "pyodide.mjs",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide-lock.json",
)
PACKAGE = ROOT / "queue_core"
# the lab's engine (docs/lab.md): lab.js writes these into the browser's Python
LAB_MODULES = ("lab_engine.py", "lab_story.py")


def queue_core_zip() -> bytes:
    """The package as the browser imports it: the package files of this build."""
    return zipped(
        (path.relative_to(PACKAGE.parent).as_posix(), path.read_bytes())
        for path in sorted(PACKAGE.rglob("*"))
        if path.suffix in (".py", ".sql") and "__pycache__" not in path.parts
    )


def on_files(files: Files, config: Any) -> Files:
    missing = [name for name in RUNTIME_FILES if not (RUNTIME / name).is_file()]
    if missing:
        raise PluginError(
            f"the browser runtime is not installed ({RUNTIME} lacks {', '.join(missing)}):"
            " run `make site` (it runs npm ci --prefix site_runtime)"
        )
    for name in RUNTIME_FILES:
        files.append(
            File.generated(
                config, f"assets/pyodide/{name}", abs_src_path=str(RUNTIME / name)
            )
        )
    files.append(
        File.generated(config, "assets/run/queue_core.zip", content=queue_core_zip())
    )
    for name in LAB_MODULES:
        source = ROOT / "docs_support" / name
        files.append(
            File.generated(config, f"assets/lab/{name}", abs_src_path=str(source))
        )
    for path in examples():
        files.append(
            File.generated(config, f"snippets/{path.name}", content=published(path))
        )
    files.append(File.generated(config, ARCHIVE, content=archive()))
    return files


def hl_numbers(spec: str) -> list[int]:
    """``"3 5-7"`` -> ``[3, 5, 6, 7]``."""
    numbers: list[int] = []
    for part in spec.split():
        low, _, high = part.partition("-")
        numbers.extend(range(int(low), int(high or low) + 1))
    return numbers


def excerpt(indent: str, info: str, name: str) -> list[str] | None:
    """A long program's fence as three: the lines that matter, the whole file folded, its output.

    ``None`` when the program has no ``shown`` section: the page shows it whole.
    The lines shown keep the file's own numbers, so that they can be found in
    the whole program and in the download.
    """
    span = shown_lines(SNIPPETS / name)
    if span is None:
        return None
    first, last, total = span
    marked = HL_LINES.search(info)
    inside = (
        [n - first + 1 for n in hl_numbers(marked["spec"]) if first <= n <= last]
        if marked
        else []
    )
    whole_options = f' hl_lines="{marked["spec"]}"' if marked else ""
    shown_options = f' hl_lines="{" ".join(map(str, inside))}"' if inside else ""
    lang = info.split()[0].lstrip("`~")
    return [
        f'{indent}```{lang} title="{name}, lines {first}-{last} of {total}'
        f' (the copy button copies all {total})"'
        f' linenums="{first}"{shown_options}',
        f'{indent}--8<-- "snippets/{name}:{SHOWN}"',
        f"{indent}```",
        "",
        f'{indent}??? example "The whole program: {name}, {total} lines"',
        "",
        f'{indent}    ```{lang} title="snippets/{name}" linenums="1"{whole_options}',
        f'{indent}    --8<-- "snippets/{name}"',
        f"{indent}    ```",
        "",
        f"{indent}It prints:",
        "",
        f'{indent}```{lang} exec="on" result="text"',
        f'{indent}--8<-- "snippets/{name}"',
        f"{indent}```",
    ]


# The subject of each chapter, in the words a reader searches for. Material's search
# gives a page's tags a boost far above its titles (1e6 against 1e3), so a search for
# a subject ("fence", "lease", "dead letter") puts its chapter first, where a shorter
# title that merely mentions the word (the API reference's ``Lease``, the lab's "one
# lease, the fence") would otherwise win. Words are stemmed: "fence" finds "fencing".
# No tag is shown on a page (the tags plugin is off). tests/test_search.py types each
# subject into the built site's search box and checks the ranking.
SUBJECTS: dict[str, tuple[str, ...]] = {
    "problem.md": ("lost or doubled",),
    "envelope.md": ("envelope", "batch", "duplicate"),
    "lease.md": ("lease",),
    "fencing.md": ("fencing", "fence", "generation"),
    "effect-and-ack.md": ("effect", "ACK"),
    "retry.md": ("retry", "backoff"),
    "dead-letters.md": ("dead letter", "redrive"),
    "receipts.md": ("receipt", "idempotency"),
    "crash.md": ("crash",),
    "outbox.md": ("outbox",),
    "limits.md": ("limits",),
    "own-program.md": ("handler", "worker"),
    "concurrency.md": ("concurrency",),
    "performance.md": ("performance",),
    "postgres.md": ("PostgreSQL",),
    "operating.md": ("health", "metrics"),
    "long-work.md": ("heartbeat",),
    "keeping.md": ("retention", "backup"),
    "schedules.md": ("schedule", "priority"),
    "power-cuts.md": ("power cut",),
    "network-cuts.md": ("network cut",),
    "failover.md": ("failover",),
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Run where a block can run in the browser; long programs shortened; download links."""
    subjects = SUBJECTS.get(page.file.src_uri)
    if subjects is not None:
        page.meta.setdefault("tags", list(subjects))
    # from this page's folder to the docs root
    up = "../" * page.file.src_uri.count("/")
    run_here = f"{up}run-here.md"
    lines = markdown.split("\n")
    out: list[str] = []
    # (indent, name) of the program in the open fence
    pending: tuple[str, str] | None = None
    fence: tuple[str, str] | None = None  # (indent, fence) of the open fence
    opened_at = 0  # where the open fence starts in ``out``
    for line in lines:
        out.append(line)
        opened = FENCE.match(line)
        if fence is None:
            if opened is not None:
                fence = (opened["indent"], opened["fence"])
                opened_at = len(out) - 1
            continue
        included = INCLUDE.match(line)
        if included is not None:
            pending = (fence[0], included["name"])
        elif (
            opened is not None
            and line.strip() == fence[1][0] * len(line.strip())
            and len(line.strip()) >= len(fence[1])
            and opened["indent"] == fence[0]
        ):
            indent, info = fence[0], out[opened_at].strip()
            runs = shown_and_run(info.lstrip("`~"))
            if pending is not None:
                source = program(SNIPPETS / pending[1])
            else:
                source = "\n".join(out[opened_at + 1 : -1])
            why = needs_a_machine(source) if runs else None
            if pending is not None and "exec=" in info:
                shorter = excerpt(indent, info, pending[1])
                if shorter is not None:
                    out[opened_at:] = shorter
            if runs and why is None:
                out[opened_at:] = [
                    f'{indent}<div class="qc-run" markdown="1">',
                    "",
                    *out[opened_at:],
                    "",
                    f"{indent}</div>",
                ]
            elif runs:
                out.append("")
                out.append(
                    f"{indent}:material-laptop: Runs on your machine, not in the browser:"
                    f" {why} ([why]({run_here}))."
                )
                out.append(f"{indent}{{: .qc-local }}")
            elif info.lstrip("`~").startswith("console"):
                out.append("")
                out.append(
                    f"{indent}:material-laptop: Runs on your machine, in a shell: the copy"
                    f" button copies the commands ([why not here]({run_here}))."
                )
                out.append(f"{indent}{{: .qc-local }}")
            if pending is not None:
                name = pending[1]
                download = (
                    f"{indent}[:material-download: Download `{name}`]({up}snippets/{name})"
                    f'{{ download="{name}" }}'
                )
                out.append("")
                if needs_a_clone(SNIPPETS / name):
                    out.append(
                        f"{download}: it runs in a clone of the repository only, since it"
                        " imports the repository's own code, so it is not in"
                        f" [the examples zip]({up}{ARCHIVE}){{ download }}"
                    )
                else:
                    out.append(
                        f"{download} · [all examples (zip)]({up}{ARCHIVE}){{ download }}"
                    )
            fence, pending = None, None
    return "\n".join(out)


CODE = re.compile(
    r"<pre>(?P<head><span></span>)?<code>(?P<code>.*?)</code></pre>", re.S
)
LINE_ANCHOR = re.compile(r'<a id="__codelineno-[^"]*"[^>]*></a>')
PROMPT = '<span class="gp">$ </span>'
HEREDOC = re.compile(r"<<-?\s*'?(?P<end>[A-Za-z_]+)'?")


def session_commands(code_html: str) -> str | None:
    """The commands of a rendered shell session (prompts and output left out); None if it is no session."""
    if PROMPT not in code_html:
        return None
    commands: list[str] = []
    heredoc_end: str | None = None
    for line in LINE_ANCHOR.sub("", code_html).split("\n"):
        text = html.unescape(re.sub(r"<[^>]+>", "", line))
        if heredoc_end is not None:
            commands.append(text)
            if text.strip() == heredoc_end:
                heredoc_end = None
        elif line.startswith(PROMPT):
            command = text[2:]
            commands.append(command)
            here = HEREDOC.search(command)
            heredoc_end = here["end"] if here else None
    return "\n".join(commands)


# The code of a shortened program (``excerpt``): its title, then its ``<pre>``.
SHORTENED = re.compile(
    r'(?P<head><span class="filename">(?P<name>[\w.-]+\.py), lines \d+-\d+ of \d+'
    r" \(the copy button copies all \d+\)</span>.*?)<pre>(?=(?:<span></span>)?<code>)",
    re.S,
)


def whole_program(match: re.Match[str]) -> str:
    """The ``<pre>`` of a shortened program, with the whole program as its copy text."""
    path = SNIPPETS / match["name"]
    if not path.is_file() or shown_lines(path) is None:
        raise PluginError(f"a shortened block names {match['name']}, no long program")
    whole = html.escape(published(path).decode("utf-8"), quote=True)
    return f'{match["head"]}<pre data-copy="{whole}">'


TAG = re.compile(r"</?span\b[^>]*>")


def wrap_long_lines(code_html: str) -> str:
    """A block's lines over ``MAX_COLUMNS`` (a session's one-line JSON document or
    error, a package's SQL file shown whole: docs_support/code_width.py) marked to
    wrap in their block, with a hanging indent, instead of making it scroll sideways
    and hiding the line's end."""
    lines = code_html.split("\n")
    for index, line in enumerate(lines):
        text = html.unescape(re.sub(r"<[^>]+>", "", line))
        tags = TAG.findall(line)
        balanced = sum(1 if not t.startswith("</") else -1 for t in tags) == 0
        if len(text) > MAX_COLUMNS and balanced:
            lines[index] = f'<span class="qc-wrap">{line}</span>'
    return "\n".join(lines)


def on_page_content(content: str, page: Any, config: Any, files: Files) -> str:
    content = SHORTENED.sub(whole_program, content)

    def mark(match: re.Match[str]) -> str:
        whole = match.group(0)
        code = match["code"]
        wrapped = whole.replace(code, wrap_long_lines(code), 1)
        commands = session_commands(code)
        if commands is None:
            return wrapped
        return (
            f'<pre data-copy="{html.escape(commands, quote=True)}">'
            + wrapped[len("<pre>") :]
        )

    return CODE.sub(mark, content)
