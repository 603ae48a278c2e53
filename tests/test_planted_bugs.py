"""The planted bugs of scripts/plant_bugs.py keep applying, and one is caught on behaviour.

The script plants each bug in a throwaway worktree and runs the documentation
tests against it. A list whose texts no longer occur in the code would prove
nothing, so every mutation must still apply to today's code, and change it.
One mutant is run end to end: a page's executed block must fail on it with an
assertion that names the behaviour, not only a recorded output.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def plant_bugs():
    spec = importlib.util.spec_from_file_location("plant_bugs", ROOT / "scripts" / "plant_bugs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["plant_bugs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_mutation_still_applies_to_todays_code() -> None:
    plant = plant_bugs()
    assert plant.check(ROOT) == [], "a planted bug no longer applies: update scripts/plant_bugs.py"
    assert len({m.name for m in plant.MUTATIONS}) == len(plant.MUTATIONS), "two mutations share a name"


def test_a_mutation_whose_text_is_gone_fails_loudly() -> None:
    plant = plant_bugs()
    gone = plant.Mutation("gone", "queue_core/rules.py", (("no such text", "x"),), "nothing")
    with pytest.raises(plant.MutationRotted, match="no longer holds"):
        plant.mutated((ROOT / gone.path).read_text(encoding="utf-8"), gone)


@pytest.mark.timeout(300)
def test_a_delay_ignored_is_caught_by_a_page_on_behaviour(tmp_path: Path) -> None:
    """The mutant runs on a copy of queue_core: this repository's own is never changed."""
    plant = plant_bugs()
    mutation = next(m for m in plant.MUTATIONS if m.name == "delay_ignored")
    copy = tmp_path / "tree"
    (copy / "snippets").mkdir(parents=True)
    subprocess.run(["cp", "-r", str(ROOT / "queue_core"), str(copy / "queue_core")], check=True)
    target = copy / mutation.path
    target.write_text(plant.mutated(target.read_text(encoding="utf-8"), mutation), encoding="utf-8")
    program = ROOT / "snippets" / "program_send.py"
    env = {**os.environ, "PYTHONPATH": str(copy)}
    imported = subprocess.run([sys.executable, "-c", "import queue_core; print(queue_core.__file__)"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == str(copy / "queue_core" / "__init__.py"), "the mutant is not what runs"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / program.name).write_text(program.read_text(encoding="utf-8"), encoding="utf-8")
    ran = subprocess.run([sys.executable, program.name], cwd=tmp_path / "run", env=env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode != 0, "program_send.py passed with the delay ignored"
    assert "AssertionError: E0002 was claimed before its delay ended" in ran.stderr, ran.stderr
