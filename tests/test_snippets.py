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

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = sorted((ROOT / "snippets").glob("*.py"))
EXPECTED = ROOT / "tests" / "snippets_expected"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.stem for s in SNIPPETS])
def test_snippet_runs_alone_and_prints_what_is_recorded(snippet: Path, tmp_path: Path) -> None:
    shutil.copy(snippet, tmp_path / snippet.name)
    env = dict(os.environ)
    if "from proof" in snippet.read_text(encoding="utf-8"):
        # the repository's proof machinery is not installed with queue_core: such a
        # program runs in a clone, with the clone's root on the path (its docstring says how)
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
