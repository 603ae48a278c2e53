"""What a page shows a block printing is what it prints: every ``result="text"`` block, compared.

markdown-exec runs each ``python exec="on" ... result="text"`` block at build
time and puts its output under it, but never compares that output with
anything: a planted bug that changed what a block prints (a claim order, a
refused completion that went through) would still build. Here every such block
runs as markdown-exec runs it (its own globals, ``print`` captured) and its
output is compared with the recording in ``tests/pages_expected/<page>.txt``.

When a change is meant to change what a page shows, record again and read the
diff before committing it::

    QUEUE_CORE_RECORD_PAGES=1 .venv/bin/python -m pytest tests/test_page_outputs.py

Blocks that only generate Markdown (proof tables, the map of the code: plain
``exec="on"``) are the page's own text, not a behaviour, and are not recorded.
A snippet included into a block is compared here too (``tests/test_snippets.py``
also runs it as a program).
"""

from __future__ import annotations

import io
import os
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from .markdown_docs import DOCS, SiteMarkdownIt

EXPECTED = Path(__file__).resolve().parent / "pages_expected"
RECORD = os.environ.get("QUEUE_CORE_RECORD_PAGES") == "1"
# Output that differs from run to run for reasons the page states: temporary folders.
NORMALIZE = [(re.compile(r"/tmp/[^\s'\")]+"), "<tmp>")]


def text_blocks(page: Path) -> list[str]:
    """The code of every block of ``page`` whose output the reader sees as text."""
    blocks = []
    for token in SiteMarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
        if token.type == "fence" and token.info.startswith("python") and 'exec="on"' in token.info \
                and 'result="text"' in token.info:
            blocks.append(token.content)
    return blocks


def run_block(code: str, name: str) -> str:
    """Run ``code`` as markdown-exec does: fresh globals, ``print`` into a buffer."""
    buffer = io.StringIO()

    def buffered(*texts: Any, end: str = "\n", **_: Any) -> None:
        buffer.write(" ".join(str(text) for text in texts) + end)

    exec(compile(code, name, "exec"), {"__name__": "_code_block", "print": partial(buffered)})  # noqa: S102
    out = buffer.getvalue()
    for pattern, replacement in NORMALIZE:
        out = pattern.sub(replacement, out)
    return out


def recording(outputs: list[str]) -> str:
    return "".join(f"=== block {n}\n{out}" + ("" if out.endswith("\n") or not out else "\n")
                   for n, out in enumerate(outputs, start=1))


PAGES = sorted(p for p in DOCS.rglob("*.md") if text_blocks(p))


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_every_text_block_prints_what_the_page_recorded(page: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a block that writes a file in its folder writes it here
    name = page.relative_to(DOCS).as_posix()
    outputs = [run_block(code, f"<{name} block {n}>") for n, code in enumerate(text_blocks(page), start=1)]
    expected = EXPECTED / (name.removesuffix(".md").replace("/", "__") + ".txt")
    if RECORD:
        expected.write_text(recording(outputs), encoding="utf-8")
    assert expected.is_file(), f"no recording for {name}: run with QUEUE_CORE_RECORD_PAGES=1 and read it"
    assert recording(outputs) == expected.read_text(encoding="utf-8")


def test_every_recording_belongs_to_a_page() -> None:
    names = {p.relative_to(DOCS).as_posix().removesuffix(".md").replace("/", "__") + ".txt" for p in PAGES}
    assert sorted(p.name for p in EXPECTED.glob("*.txt")) == sorted(names)
