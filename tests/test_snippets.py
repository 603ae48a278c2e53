"""Every program in snippets/ runs as a real subprocess, in an empty folder.

That is how a reader uses them: copy one file into an empty folder with
queue_core installed, run it. Its output must equal the recorded output in
tests/snippets_expected/<name>.txt (the pages generate the same output at
build time, by running the same file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.site_build import HOOKS

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = sorted((ROOT / "snippets").glob("*.py"))
EXPECTED = ROOT / "tests" / "snippets_expected"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.stem for s in SNIPPETS])
def test_snippet_runs_alone_and_prints_what_is_recorded(snippet: Path, tmp_path: Path) -> None:
    shutil.copy(snippet, tmp_path / snippet.name)
    env = dict(os.environ)
    if HOOKS.needs_a_clone(snippet):
        # the repository's proof machinery is not installed with queue_core: such a
        # program runs in a clone, with the clone's root on the path (its docstring and
        # its page say how), and the examples zip leaves it out
        env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run([sys.executable, snippet.name], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    expected = (EXPECTED / f"{snippet.stem}.txt").read_text(encoding="utf-8")
    assert result.stdout == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == [snippet.name], "a snippet leaves nothing behind"


def test_every_snippet_has_a_recording_and_is_used_on_a_page() -> None:
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    recorded = {p.stem for p in EXPECTED.glob("*.txt")}
    for snippet in SNIPPETS:
        assert snippet.stem in recorded, f"no tests/snippets_expected/{snippet.stem}.txt"
        assert f'snippets/{snippet.name}"' in pages, f"{snippet.name} is not included on any page"
    assert recorded <= {s.stem for s in SNIPPETS}, "a recording without its snippet"


def test_a_program_that_imports_the_repository_is_told_apart(tmp_path: Path) -> None:
    """What decides the zip (overrides/hooks.py): an import of the repository's own code, not a mention."""
    program = tmp_path / "p.py"
    for source, needs in [
        ("from proof.invariants import check_invariants\n", True),
        ("import docs_support.proof\n", True),
        ("with x:\n    from tests.support import until\n", True),
        ('"""Checked by the proof package."""\nfrom queue_core import Store\n', False),
        ("from queue_core.app.crash_child import run_crashing\nproofs = 1\n", False),
    ]:
        program.write_text(source, encoding="utf-8")
        assert HOOKS.needs_a_clone(program) is needs, source
    assert [p.name for p in SNIPPETS if HOOKS.needs_a_clone(p)] == ["evidence_check.py"]
    assert {p.name for p in HOOKS.in_archive()} == {p.name for p in HOOKS.examples()} - {"evidence_check.py"}
