"""Which blocks of a page run in the reader's browser, and which need a machine.

The build (``overrides/hooks.py``) gives a block **Run** when its page shows
its source and records its output, and nothing in its source needs what a
browser lacks. ``docs/run-here.md`` prints the count per page from here, and
the browser test (``tests/test_run_here.py``) runs every block that has Run.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What a browser cannot do, as a block's source shows it.
NEEDS_A_MACHINE = [
    (
        re.compile(
            r"\b(subprocess|multiprocessing|os\.fork|os\._exit|sys\.executable|signal)\b"
            # the demo's third message is completed by a child process that dies
            # (app.crash_child); testing's fault plans are for such processes too
            r"|queue_core\.(testing|(app\.)?demo|app\.crash_child)\b"
        ),
        "it starts other processes",
    ),
    # work(..., concurrency=N) runs its loop in N threads
    (
        re.compile(r"\b(threading|concurrent\.futures|heartbeat)\b|\bconcurrency\s*="),
        "it starts threads",
    ),
    (
        re.compile(r"\b(psycopg|postgres(ql)?://)|QUEUE_CORE_PG"),
        "it needs a PostgreSQL server",
    ),
    # the proof machinery (proof/) is the repository's, not the package's
    (re.compile(r"\bdocs_support\b|\b(from|import)\s+proof\b"), "it reads this repository"),
]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
INCLUDE = re.compile(r'^[ \t]*--8<--[ \t]+"(?P<path>snippets/[^"]+\.py)"[ \t]*$')
SECTION_MARK = re.compile(
    r"^[ \t]*#[ \t]*-+8<-+[ \t]*\[(?P<end>start|end):(?P<name>[a-z_]+)\][ \t]*$"
)


def needs_a_machine(source: str) -> str | None:
    """Why a block cannot run in the reader's browser, or ``None`` when it can."""
    for pattern, why in NEEDS_A_MACHINE:
        if pattern.search(source):
            return why
    return None


def shown_and_run(info: str) -> bool:
    """A Python block whose source the page shows and whose output the build records."""
    return info.startswith("python") and all(
        option in info for option in ("exec=", "source=", "result=")
    )


def program(path: Path) -> str:
    """A snippet as the page runs it: its section marks left out."""
    lines = path.read_text("utf-8").split("\n")
    return "\n".join(line for line in lines if not SECTION_MARK.match(line))


def blocks(page: Path) -> list[tuple[str, str | None]]:
    """Each shown-and-run block of a page: (its source, why it needs a machine)."""
    found: list[tuple[str, str | None]] = []
    lines = page.read_text("utf-8").split("\n")
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != opened["fence"]:
            end += 1
        if shown_and_run(opened["info"].strip()):
            body = lines[index + 1 : end]
            included = [INCLUDE.match(line) for line in body]
            source = "\n".join(
                program(ROOT / match["path"]) if match else line
                for match, line in zip(included, body)
            )
            found.append((source, needs_a_machine(source)))
        index = end + 1
    return found
