"""scripts/adversary.py and the record of an adversary run (proof/adversary.py).

The long run is made by hand (``python scripts/adversary.py --long --record``,
``--postgres`` for PostgreSQL) and its record committed as
``evidence/adversary-<engine>.json``: a ``proof.records.Record`` whose result
holds the examples and steps run, each rule's count, the events reached, and
what was found. Here: a short run's record holds exactly that, a found break
is kept with its steps, and the script refuses what it cannot do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proof import records
from proof.adversary import AdversaryResult, Budget, record_name, run, save
from proof.adversary_db import SqliteTarget

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "adversary.py"


def script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=200)


def test_a_short_run_is_recorded_with_its_counts(tmp_path: Path) -> None:
    result = run(SqliteTarget(tmp_path), Budget(examples=4, steps=8), frozenset())
    assert result.ok and result.examples >= 4 and result.steps > 0, result
    assert sum(result.rules.values()) == result.steps
    record = save(result, folder=tmp_path)
    stored = records.Record.from_dict(json.loads((tmp_path / "adversary-sqlite.json").read_text()))
    assert stored == record and stored.name == record_name("sqlite") == "adversary-sqlite"
    assert stored.params == {"budget": {"examples": 4, "steps": 8}, "families": []}
    assert stored.result["rules"] == result.rules and stored.result["events"] == result.events
    assert stored.result["found"] is None and stored.by == "scripts/adversary.py --long --record"


def test_a_broken_clause_is_recorded_with_its_steps(tmp_path: Path) -> None:
    found = {"clause": "failed statement", "message": "PromiseBroken: [failed statement] ...",
             "steps": "state.send_claim_complete(...)"}
    result = AdversaryResult("postgresql", ["savepoints"], {"examples": 1, "steps": 1}, 3, 7,
                             {"send_claim_complete": 7}, {}, 1.5, found)
    assert not result.ok
    save(result, folder=tmp_path)
    stored = json.loads((tmp_path / "adversary-postgresql.json").read_text())
    assert stored["result"]["found"] == found and stored["params"]["families"] == ["savepoints"]


@pytest.mark.timeout(200)
def test_the_script_prints_the_run_as_json() -> None:
    done = script("--families", "", "--examples", "3", "--steps", "6", "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout)
    assert printed["engine"] == "sqlite" and printed["families"] == [] and printed["found"] is None
    assert printed["budget"] == {"examples": 3, "steps": 6} and printed["steps"] > 0


@pytest.mark.parametrize("args, says", [
    (["--record"], "add --long"),
    (["--long", "--record", "--families", "scopes"], "every attack family"),
    (["--families", "scopes,nope"], "unknown ['nope']"),
    (["--examples", "0"], "--examples must be 1 or more"),
])
def test_the_script_refuses_what_it_cannot_do(args: list[str], says: str) -> None:
    done = script(*args)
    assert done.returncode == 2 and says in done.stderr, done.stderr
