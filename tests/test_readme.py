"""README's examples are executed: its console session and its Python block."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
from pathlib import Path

from .console import run, sessions

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_console_session_prints_what_it_shows(tmp_path: Path) -> None:
    shutil.copy(ROOT / "snippets" / "demo.jsonl", tmp_path / "batch.jsonl")
    blocks = sessions(README)
    assert len(blocks) == 1 and len(blocks[0]) >= 8
    for command in blocks[0]:
        output, status = run(command, tmp_path)
        assert (output, status) == (command.expected, command.expected_status), command.line


def test_readme_python_block_runs(tmp_path: Path) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", README, re.S)
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    assert out.getvalue() == "done 10000\n"
