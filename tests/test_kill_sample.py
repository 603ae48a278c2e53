"""The random-kill run's sample of its kills (proof/kill_sample.py), without a run.

The sample is bounded and keeps every kill alike, which a biased sampler
fails (negative control); what a worker was doing is seen from outside, by
the lock it holds. tests/test_chaos.py checks the sample of a real run.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from proof.kill_sample import KillEvent, KillSample, holds_flock


def test_the_kill_sample_is_bounded_and_keeps_every_kill_alike() -> None:
    sample = KillSample(seed=7, size=10)
    offered = [KillEvent(float(i), 1, "worker", 0, i, 1010, True, "between") for i in range(1000)]
    for e in offered:
        sample.offer(e)
    assert sample.seen == 1000 and len(sample.events()) == 10
    assert [e["t"] for e in sample.events()] == sorted(e["t"] for e in sample.events())
    sample.forget(sample.kept[0])
    assert (sample.seen, len(sample.kept)) == (999, 9)

    def halves(make_sample: Any) -> tuple[int, int]:
        """How often an early kill and a late one were kept, over many runs of 100 kills."""
        early = late = 0
        for seed in range(400):
            s = make_sample(seed)
            for i in range(100):
                s.offer(KillEvent(float(i), 1, "worker", 0, i, 1010, True, "between"))
            early += sum(e.process < 50 for e in s.kept)
            late += sum(e.process >= 50 for e in s.kept)
        return early, late

    early, late = halves(lambda seed: KillSample(seed, size=10))
    assert abs(early - late) < 0.1 * (early + late), (early, late)

    class FirstOnes(KillSample):  # a biased sampler: keeps the first kills only
        def offer(self, event: KillEvent) -> None:
            self.seen += 1
            if len(self.kept) < self.size:
                self.kept.append(event)

    early, late = halves(lambda seed: FirstOnes(seed, size=10))
    assert not abs(early - late) < 0.1 * (early + late)  # the check above would catch it


def test_holding_the_writers_turn_is_seen_from_outside(tmp_path: Path) -> None:
    lock = tmp_path / "queue.sqlite3-lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        assert not holds_flock(os.getpid(), lock)
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert holds_flock(os.getpid(), lock)
        assert not holds_flock(os.getpid() + 1_000_000, lock)  # another process's view
    finally:
        os.close(fd)
    assert not holds_flock(os.getpid(), tmp_path / "absent")
