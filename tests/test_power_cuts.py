"""The queue under power cuts: real producers, workers and an observer, cut during enqueue and during work.

Twenty cuts on a disk that keeps only what was synced (drop), twenty on one
that keeps a seeded mixture of every unsynced 512-byte unit, size and name
(torn). After every cut: the file whole, every invariant of a queue mid-run,
every acknowledged enqueue stored, every completion the observer saw still
done with exactly one effect, the workers' printed done counts within the
done rows; at the end a final drain with the money exact (proof/powercut.py).
The negative controls that show these cuts can lose work are in
tests/test_powerfs.py; the long table is scripts/powercut.py --long.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proof import records
from proof.powercut import QUICK, queue_cuts, raw_sqlite

from .fuse_support import require_fuse

RECORDS = Path(__file__).resolve().parent.parent / "test-artifacts" / "evidence"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["drop", "torn"])
def test_the_queue_loses_nothing_acknowledged_under_power_cuts(tmp_path: Path, mode: str) -> None:
    require_fuse()
    run = queue_cuts(tmp_path, mode="drop" if mode == "drop" else "torn", seed=24)
    records.save_record(f"power-cuts-{mode}", QUICK, run, by="tests/test_power_cuts.py",
                        seconds=run.seconds, folder=RECORDS)
    assert run.cuts == QUICK["cuts"] == 20
    assert run.ok, run.to_dict()
    assert (run.lost, run.doubles, run.corruptions, run.violations) == (0, 0, 0, [])
    details = run.details
    # the cuts landed where they matter: producers and workers were killed by them,
    # and there was acknowledged work to lose
    assert details["producers_cut"] > 0 and details["workers_cut"] > 0, details
    assert details["enqueued"] > 0 and details["observed_done"] > 0, details
    assert details["printed_done"] > 0, details
    if mode == "torn":
        assert run.torn_units > 0  # unsynced units existed at the cuts, and were torn


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["drop", "torn"])
def test_raw_sqlite_at_full_loses_no_commit(tmp_path: Path, mode: str) -> None:
    require_fuse()
    run = raw_sqlite(tmp_path, synchronous="FULL", mode="drop" if mode == "drop" else "torn",
                     cuts=5, seed=7)
    assert run.acknowledged > 0 and run.ok, run.to_dict()
