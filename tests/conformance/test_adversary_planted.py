"""The adversary finds each hole again when its fix is reverted (issue #44's "Done when").

Each bug of ``proof.adversary_planted.PLANTED`` reverts one fix (receipts
keyed without their scope; a ROLLBACK TO that lifts the doom; a COMMIT that
ignores it; transaction control through ``tx.execute``; a lost lease in the
caller's ``complete_many_tx``; the store's own savepoint names) in a copy of
queue_core; the adversary then runs its quick budget with the bug's attack
families alone, in a process that imports the copy, and must end on a broken
clause the bug can break. The search is random: a run that finds nothing is
made again, at most ``RUNS`` times (the rates measured are in the commit
that added this file). This repository's own queue_core is never changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proof.adversary_planted import PLANTED, check, run_planted

RUNS = 3


@pytest.mark.one_engine
def test_every_planted_bug_still_applies() -> None:
    assert check() == [], "a planted bug no longer applies: update proof/adversary_planted.py"
    assert len({p.name for p in PLANTED}) == len(PLANTED)


@pytest.mark.slow  # a process per run, as the crash and chaos runs (make test runs it; make check does not)
@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", [p.name for p in PLANTED])
def test_the_adversary_finds_a_reverted_fix(engine: str, name: str, tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    planted = next(p for p in PLANTED if p.name == name)
    server = request.getfixturevalue("postgres_cluster").root if engine == "postgresql" else None
    tried = []
    for run in range(RUNS):
        folder = tmp_path / f"run-{run}"
        folder.mkdir()
        result = run_planted(planted, folder, engine=engine, server=server)
        tried.append(f"{result['examples']} examples, {result['steps']} steps, {result['seconds']} s")
        if result["found"] is not None:
            break
    found = result["found"]
    assert found is not None, f"{name} ({planted.breaks}) was not found on {engine}: {tried}"
    assert found["clause"] in planted.clauses, found
