"""The queue under I/O errors: a sync or a write fails, then the power is cut.

One run (``fault_run``) on a fresh ``powerfs`` disk: a queue with a first
batch stored and synced; then ONE process, alone, does one phase with a
fault armed at a counted operation of the filesystem:

* ``enqueue``: a producer stores a second batch;
* ``work``: a worker claims and completes until nothing is ready.

The process is ``queue-core`` (``via="cli"``) or a program of the Python API
(``via="api"``: ``proof/ioerr_programs.py``; ``ignore=True`` runs its careless
variant that swallows ``StorageError``, the negative control). When it has
exited, the power is cut (``drop``: the disk keeps only what was synced, and
what a failed fsync dropped is not on it) and the disk remounted. Then:

* what the process acknowledged is there: an enqueue that exited 0 (CLI) or
  printed ``enqueued`` (API) is stored; each event id the API worker printed
  is done with exactly one effect; a CLI worker's printed done count is
  within the done rows;
* the file is whole and every invariant of a queue mid-run holds
  (``invariants.check_invariants``);
* a fresh worker finishes the queue, the money exact.

The process's answer is kept (exit status, stderr) for the caller to judge
what it said about the fault. Only the clock is modelled (``--now``).

``then="work"`` lets the disk recover (the fault is cleared) and a second
worker (API) work before the cut, on the same mount: after a failed fsync the
page cache still holds what the disk dropped, so that worker may see (and
build on) a commit that failed. ``then="restart and work"`` remounts cleanly
first (a restart of the machine: the cache is gone) and then works.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from queue_core import ledger
from queue_core.clock import ModelClock
from queue_core.store import Store
from queue_core.worker import WorkSummary
from proof.invariants import check_invariants, finish_queue, read_file
from proof.matrix import BOOK, PEN, START, batch_text
from proof.powerfs import PowerFS
from proof.powerfs_daemon import FaultKind

__all__ = ["Fault", "FaultRun", "fault_run"]

Phase = Literal["enqueue", "work"]
Via = Literal["cli", "api"]
Then = Literal["cut", "work", "restart and work"]
EVENTS_PER_BATCH: Final = 6
LEASE_SECONDS: Final = 30  # one run is one model instant: no lease runs out
PROCESS_SECONDS: Final = 120.0  # far more than a process here needs
ROOT: Final = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Fault:
    """The ``at``-th ``kind`` (fsync, or WAL write) fails with ``error`` (``always``: all later too)."""

    kind: FaultKind
    at: int
    error: str = "EIO"
    always: bool = False

    @property
    def label(self) -> str:
        """E.g. ``fsync EIO at 4, once``."""
        return f"{self.kind} {self.error} at {self.at}, {'always' if self.always else 'once'}"

    @property
    def suffix(self) -> str:
        # writes are counted on the WAL only: the -shm index is written back
        # through mmap whenever the kernel likes, which would move the count
        return "-wal" if self.kind == "write" else ""


@dataclass
class FaultRun:
    """What one run did and found (``to_dict()`` for JSON)."""

    fault: str
    phase: str
    via: str
    ignore: bool
    then: str = "cut"
    failed_operations: int = 0  # operations the fault made fail
    exit_status: int | None = None
    stderr: str = ""
    acknowledged_enqueue: bool = False
    acknowledged_done: list[str] = field(default_factory=list)
    printed_done: int = 0  # a CLI worker's summary, when it printed one
    stored_after: int = 0  # messages on the disk after the cut
    done_after: int = 0
    lost: list[str] = field(default_factory=list)  # acknowledged, and gone after the cut
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing acknowledged was lost and every invariant held."""
        return not (self.lost or self.violations)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _events(first: int, seed: int) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed + first)
    return {f"E{n:04d}": {"category": rng.choice((BOOK, PEN)),
                          "amount_cents": rng.randrange(1, 10_000)}
            for n in range(first, first + EVENTS_PER_BATCH)}


def _command(phase: Phase, via: Via, db: Path, batch: Path, *, ignore: bool) -> list[str]:
    now = str(START)
    if via == "cli":
        rest = ["enqueue", str(batch)] if phase == "enqueue" else [
            "work", "--lease-seconds", str(LEASE_SECONDS)]
        return [sys.executable, "-m", "queue_core", "--db", str(db), "--now", now, *rest]
    program = [sys.executable, "-m", "proof.ioerr_programs", phase,
               *(["--ignore"] if ignore else [])]
    last = str(batch) if phase == "enqueue" else str(LEASE_SECONDS)
    return [*program, str(db), now, last]


def fault_run(
    workdir: Path, fault: Fault, phase: Phase, via: Via, *, ignore: bool = False,
    then: Then = "cut", seed: int = 0,
) -> FaultRun:
    """One process does ``phase`` with ``fault`` armed; the power is cut; what survived."""
    run = FaultRun(fault.label, phase, via, ignore, then)
    first, second = _events(1, seed), _events(1 + EVENTS_PER_BATCH, seed)
    workdir.mkdir(parents=True, exist_ok=True)
    batch = workdir / "second.jsonl"
    batch.write_text(batch_text(second), encoding="utf-8")
    fs = PowerFS(workdir / "fs")
    try:
        db = fs.mount() / "queue.sqlite3"
        with Store(db, clock=ModelClock(START)) as store:
            ledger.install(store)
            store.enqueue(batch_text(first))
        fs.sync()
        fs.fail(fault.kind, fault.at, fault.error, always=fault.always, suffix=fault.suffix)
        done = subprocess.run(_command(phase, via, db, batch, ignore=ignore), capture_output=True,
                              text=True, timeout=PROCESS_SECONDS, cwd=ROOT, check=False)
        run.exit_status, run.stderr = done.returncode, done.stderr
        run.failed_operations = int(fs.ask("stats")["failed"])
        _acknowledged(run, phase, via, done.stdout)
        if then != "cut":
            fs.fail_off()
            if then == "restart and work":
                fs.unmount()
                db = fs.mount() / "queue.sqlite3"
            later = subprocess.run(_command("work", "api", db, batch, ignore=False),
                                   capture_output=True, text=True, timeout=PROCESS_SECONDS,
                                   cwd=ROOT, check=False)
            if later.returncode != 0:
                run.violations.append(f"the worker after the fault failed: {later.stderr[-300:]}")
            run.acknowledged_done += later.stdout.split()
        fs.cut("drop", seed)
        db = fs.mount() / "queue.sqlite3"
        _check(run, db, {**first, **second})
    finally:
        fs.unmount()
    return run


def _acknowledged(run: FaultRun, phase: Phase, via: Via, out: str) -> None:
    """What the process said it did: an enqueue, event ids done, or a done count."""
    if phase == "enqueue":
        run.acknowledged_enqueue = run.exit_status == 0 and (via == "cli" or "enqueued" in out)
    elif via == "api":
        run.acknowledged_done = out.split()
    elif run.exit_status == 0:
        try:
            run.printed_done = WorkSummary(**json.loads(out)).done
        except (ValueError, TypeError):
            run.violations.append(f"the worker exited 0 without its summary: {out!r}")


def _check(run: FaultRun, db: Path, sent: dict[str, dict[str, Any]]) -> None:
    """After the cut: the acknowledged work is there, the file whole, the queue finishes."""
    try:
        state = read_file(db)
    except sqlite3.DatabaseError as exc:
        run.violations.append(f"the file cannot be read after the cut: {exc}")
        return
    run.violations += check_invariants(state, finished=False)
    messages = {m.event_id: m for m in state.messages}
    effects: dict[str, int] = {}
    for event_id, _, _ in state.effects:
        effects[event_id] = effects.get(event_id, 0) + 1
    run.stored_after = len(messages)
    run.done_after = sum(1 for m in messages.values() if m.state == "done")
    acknowledged = {e for e in sent if int(e[1:]) <= EVENTS_PER_BATCH}  # the synced first batch
    if run.acknowledged_enqueue:
        acknowledged |= set(sent)
    run.lost = sorted(e for e in acknowledged if e not in messages)
    run.lost += sorted(e for e in run.acknowledged_done
                       if e not in messages or messages[e].state != "done" or effects.get(e) != 1)
    if run.printed_done > run.done_after:
        run.violations.append(f"the worker printed {run.printed_done} done, "
                              f"{run.done_after} done rows after the cut")
    for event_id in messages.keys() - sent.keys():
        run.violations.append(f"{event_id} is stored but was never sent")
    finish_queue(db, START + 1, lease_seconds=2)
    state = read_file(db)
    expected = sum(int(sent[e]["amount_cents"]) for e in {m.event_id for m in state.messages})
    run.violations += [f"after the final drain: {v}" for v in
                       check_invariants(state, expected_total=expected)]
