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


def test_readme_opens_with_what_it_is_then_install_then_a_first_program() -> None:
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:3] == ["Install", "A first program", "Two commands"]
    intro = README.split("\n## ", 1)[0]
    assert "message queue on SQLite" in intro


def test_readme_states_the_versions_the_code_needs() -> None:
    import tomllib

    from queue_core.engines.sqlite import MIN_SQLITE

    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    major, minor, _ = MIN_SQLITE
    assert f"SQLite {major}.{minor} or\nnewer" in install or f"SQLite {major}.{minor} or newer" in install
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert requires.startswith(">=") and f"Python {requires[2:]} or newer" in install


def test_readme_python_block_runs_twice_in_the_same_folder(tmp_path: Path) -> None:
    section = README.split("## A first program", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", README, re.S)
    assert code in section
    (shown,) = re.findall(r"It prints:\n\n```text\n(.*?)```", section, re.S)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    outputs = []
    try:
        for _ in ("first run", "second run, same folder, same file"):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, "README.md", "exec"), {})
            outputs.append(out.getvalue())
    finally:
        os.chdir(cwd)
    assert outputs == [shown, shown]  # the same both times, and what README says it prints
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("example.sqlite3-")) == [
        "example.sqlite3"]


def test_readme_module_table_matches_the_package() -> None:
    section = README.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for row in re.findall(r"^\| (.+?) \|", section, re.M):
        folder = ""
        for token in re.findall(r"`([^`]+)`", row):
            if "/" in token:
                folder = token.rsplit("/", 1)[0] + "/" if not token.endswith("/") else ""
                named.add(token)
            elif folder:
                named.add(folder + token)  # `sqlite_queries.sql` after `queue_core/engines/queries.py`: the same folder
    for path in named:
        assert (ROOT / path).exists(), f"README names {path}, which does not exist"
    package = ROOT / "queue_core"
    files = {f"queue_core/{p.name}" for p in package.iterdir()
             if p.suffix in (".py", ".sql") and p.name not in ("__init__.py", "__main__.py")}
    files |= {f"queue_core/{p.name}/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert files <= named, f"not in README's table: {sorted(files - named)}"
