"""Shell sessions shown on the site are executed: each prints what the page says."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .console import run, sessions

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md"))
BLOCKS = [
    (page, index, block)
    for page in PAGES
    for index, block in enumerate(sessions(page.read_text(encoding="utf-8")), start=1)
]


@pytest.mark.parametrize("page, index, block", BLOCKS,
                         ids=[f"{p.relative_to(ROOT / 'docs')}#{i}" for p, i, _ in BLOCKS])
def test_console_session_prints_what_the_page_shows(page: Path, index: int, block, tmp_path: Path) -> None:
    # Every session starts in an empty folder holding the batches of snippets/
    # (*.jsonl), and the reference demo's five lines once more as batch.jsonl.
    for batch_file in (ROOT / "snippets").glob("*.jsonl"):
        shutil.copy(batch_file, tmp_path / batch_file.name)
    shutil.copy(ROOT / "snippets" / "demo.jsonl", tmp_path / "batch.jsonl")
    assert block, f"{page}: console block {index} has no command"
    for command in block:
        output, status = run(command, tmp_path)
        assert (output, status) == (command.expected, command.expected_status), \
            f"{page.name} session {index}: {command.line}"
