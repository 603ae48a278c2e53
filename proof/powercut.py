"""Power cuts under real processes, on the filesystem that loses what was not synced (``powerfs``).

Two experiments, each a series of cuts on one disk (mount, check what the
last cut left, work, cut at a random moment, round after round):

* ``raw_sqlite(synchronous=...)``: one writer process inserts a row a
  transaction in WAL mode and prints each id once COMMIT returned; after each
  cut, every printed id must still be there. At ``FULL`` none may be lost; at
  ``NORMAL`` and ``OFF`` SQLite itself says commits may be lost: the controls
  that show the filesystem can lose them.
* ``queue_cuts()``: producers (``queue-core enqueue``), workers
  (``queue-core work``) and an observer (a reader printing the event ids it
  sees done) on one queue file. Half the cuts land while producers run (at
  a chosen change of the filesystem: ``arm``), half while only workers do (at
  a random moment; every fourth round once they finished). After each cut: ``integrity_check`` and
  ``foreign_key_check`` clean and every invariant of a queue mid-run
  (``invariants.check_invariants(finished=False)``); every enqueue that
  exited 0 is stored; every completion the observer saw is still done with
  exactly one effect; the done counts the workers printed (a worker prints
  its summary after its last COMMIT returned) never exceed the done rows.
  At the end a final drain: every stored event done once, and the money is
  the sum of the stored payloads (every acknowledged one among them).
  ``normal=True`` runs every process through ``powercut_programs
  queue-normal`` (``synchronous = NORMAL``): the queue's negative control.

"Saw committed" means: under ``synchronous = FULL`` a WAL commit becomes
visible to other connections only after the WAL was synced, so what the
observer read was durable; under ``NORMAL`` it need not be, and the control
shows the difference. Only the clock is modelled (``--now``).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from queue_core import ledger
from queue_core.clock import ModelClock
from queue_core.store import Store
from queue_core.worker import WorkSummary
from proof.invariants import FileState, Payload, check_invariants, finish_queue, read_file
from proof.matrix import BOOK, PEN, START, batch_text, work_folder
from proof.powerfs import PowerFS, users_of
from proof.powerfs_image import Mode

__all__ = ["QUICK", "CutRun", "queue_cuts", "raw_sqlite"]

PROGRAMS: Final = (sys.executable, "-m", "proof.powercut_programs")
QUEUE_CORE: Final = (sys.executable, "-m", "queue_core")
ROUND_STEP_SECONDS: Final = 10  # model time between cuts: longer than any lease
LEASE_SECONDS: Final = 2
# How long processes may run before the cut: a random moment in this window
# after the first of them opened the database. A producer is done within a few
# tens of milliseconds of opening it, so a cut during enqueue must come soon;
# the workers of a round have a few hundred milliseconds of work.
CUT_WINDOW_SECONDS: Final = (0.05, 0.6)  # raw SQLite's writer never stops
WORK_WINDOW_SECONDS: Final = (0.02, 0.4)
# A cut during enqueue comes at a chosen change of the filesystem instead (the
# N-th write, truncate, create or sync from the producers' start): two
# producers make some 50 to 90 changes, so a cut at one of the first 60 lands
# inside their work, whatever the machine's speed.
ENQUEUE_CHANGES: Final = 60
WORKERS_DONE_SECONDS: Final = 120.0  # a round's backlog takes a second or two
START_SECONDS: Final = 20.0  # far more than a process needs to open the file
QUICK: Final[Mapping[str, int]] = {"cuts": 20, "events_per_cut": 24, "producers": 2, "workers": 2}


@dataclass
class CutRun:
    """What one series of cuts did and found (``to_dict()`` for JSON)."""

    subject: str  # "sqlite FULL", "queue FULL", "queue NORMAL", ...
    mode: str
    seed: int
    cuts: int = 0
    acknowledged: int = 0  # commits (raw) or enqueues and observed completions (queue)
    lost: int = 0  # acknowledged, and gone after a cut
    cuts_with_losses: int = 0
    doubles: int = 0
    corruptions: int = 0  # cuts after which the file was unreadable or not intact
    violations: list[str] = field(default_factory=list)
    torn_units: int = 0  # unsynced 512-byte units the cuts found (torn mode)
    seconds: float = 0.0
    details: dict[str, int] = field(default_factory=dict)

    @property
    def lost_per_cut(self) -> float:
        return self.lost / self.cuts if self.cuts else 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubles or self.corruptions or self.violations)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lost_per_cut": round(self.lost_per_cut, 3), "ok": self.ok}

    def note(self, violation: str) -> None:
        if len(self.violations) < 20:  # the first ones say enough
            self.violations.append(violation)


def _wait_open(process: subprocess.Popen[str], path: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    target = str(path)
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if any(os.readlink(f"/proc/{process.pid}/fd/{fd}") == target
                   for fd in os.listdir(f"/proc/{process.pid}/fd")):
                return
        except OSError:
            pass
        time.sleep(0.002)


def _wait_frozen(fs: PowerFS, producers: list[subprocess.Popen[str]]) -> None:
    """Wait until the armed cut came, or every producer is done (then the cut comes now)."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline and not fs.ask("stats")["frozen"]:
        if all(p.poll() is not None for p in producers):
            return
        time.sleep(0.002)


def _wait_exit(workers: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + WORKERS_DONE_SECONDS
    while time.monotonic() < deadline and any(p.poll() is None for p in workers):
        time.sleep(0.005)


def _start(processes: list[subprocess.Popen[str]], *command: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parent.parent)
    processes.append(process)
    return process


@contextmanager
def _powered(fs: PowerFS) -> Iterator[list[subprocess.Popen[str]]]:
    """The run's processes; whatever happens, none outlives the run and the disk is unmounted."""
    processes: list[subprocess.Popen[str]] = []
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
        fs.unmount()


# ========================================================= raw SQLite controls


def raw_sqlite(
    workdir: str | Path | None = None, *, synchronous: str = "FULL", mode: Mode = "drop",
    cuts: int = 20, seed: int = 0,
) -> CutRun:
    """``cuts`` power cuts under one raw SQLite writer at ``synchronous``; what was lost."""
    began = time.monotonic()
    run = CutRun(f"sqlite {synchronous}", mode, seed)
    rng = random.Random(seed)
    with work_folder(workdir, "queue-core-powercut-") as root:
        fs = PowerFS(root / "fs")
        with _powered(fs) as processes:
            acknowledged: set[int] = set()
            counted_lost: set[int] = set()
            for cut in range(cuts + 1):
                mnt = fs.mount()
                db = mnt / "raw.sqlite3"
                present = _raw_rows(db, run) if db.exists() else set()
                if present is None:  # corrupt: counted; a fresh file carries on
                    fs.unmount()
                    _wipe(fs.disk, "raw.sqlite3")
                    acknowledged.clear()
                    counted_lost.clear()
                    mnt = fs.mount()
                    present = set()
                lost = acknowledged - present - counted_lost
                run.lost += len(lost)
                run.cuts_with_losses += bool(lost)
                counted_lost |= lost
                if cut == cuts:
                    fs.unmount()
                    break
                first = str((cut + 1) * 1_000_000)  # each cut's rows have ids of their own
                writer = _start(processes, *PROGRAMS, "writer", str(db), synchronous, first)
                _wait_open(writer, db)
                time.sleep(rng.uniform(*CUT_WINDOW_SECONDS))
                torn = fs.cut(mode, rng.randrange(2**32), [writer])
                run.torn_units += int(torn.get("units_unsynced", 0))
                out, _ = writer.communicate()
                done = {int(line) for line in out.split()}
                run.acknowledged += len(done)
                acknowledged |= done
                run.cuts += 1
    run.seconds = round(time.monotonic() - began, 1)
    return run


def _raw_rows(db: Path, run: CutRun) -> set[int] | None:
    """The ids stored in the raw file, or None (counted as a corruption) if it is not intact."""
    try:
        conn = sqlite3.connect(db, timeout=30)
        try:
            if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity_check failed")
            table = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'rows'").fetchone()
            return {r[0] for r in conn.execute("SELECT id FROM rows")} if table else set()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        run.corruptions += 1
        run.note(f"cut {run.cuts}: {exc}")
        return None


def _wipe(folder: Path, name: str) -> None:
    for path in folder.glob(f"{name}*"):
        path.unlink()


# ================================================================= the queue


@dataclass
class _Ledger:
    """What the processes acknowledged, over all cuts of a queue run."""

    sent: dict[str, Payload] = field(default_factory=dict)
    enqueued: set[str] = field(default_factory=set)  # by a producer that exited 0
    observed_done: set[str] = field(default_factory=set)
    printed_done: int = 0  # the sum of the summaries workers printed
    producers_cut: int = 0  # producers the cut killed before they answered
    workers_cut: int = 0
    counted_lost: set[str] = field(default_factory=set)


def queue_cuts(
    workdir: str | Path | None = None, *, mode: Mode = "drop", cuts: int = QUICK["cuts"],
    events_per_cut: int = QUICK["events_per_cut"], producers: int = QUICK["producers"],
    workers: int = QUICK["workers"], seed: int = 0, normal: bool = False,
    lying_fsync: bool = False, progress: Callable[[str], None] | None = None,
) -> CutRun:
    """``cuts`` power cuts under real ``queue-core`` processes on one queue file; what was lost."""
    if cuts * events_per_cut > 9_999:
        raise ValueError("at most 9,999 events fit in one queue (E0001..E9999)")
    began = time.monotonic()
    subject = "queue NORMAL" if normal else "queue FULL"
    run = CutRun(subject + (" (lying fsync)" if lying_fsync else ""), mode, seed)
    rng = random.Random(seed)
    book = _Ledger()
    command = (*PROGRAMS, "queue-normal") if normal else QUEUE_CORE
    with work_folder(workdir, "queue-core-powercut-") as root:
        fs = PowerFS(root / "fs", lying_fsync=lying_fsync)
        with _powered(fs) as processes:
            mnt = fs.mount()
            db = mnt / "queue.sqlite3"
            with Store(db, clock=ModelClock(START)) as store:
                ledger.install(store)
            fs.sync()
            for cut in range(cuts):
                now = START + cut * ROUND_STEP_SECONDS
                if cut:
                    mnt = fs.mount()
                    if not _check_after_cut(db, book, run, cut):
                        fs.unmount()
                        break
                during_enqueue = cut % 2 == 0
                events = {
                    f"E{n:04d}": {"category": rng.choice((BOOK, PEN)),
                                  "amount_cents": rng.randrange(1, 10_000)}
                    for n in range(cut * events_per_cut + 1, (cut + 1) * events_per_cut + 1)
                }
                book.sent |= events
                ids = list(events)
                shares = [ids[i::producers] for i in range(producers)]
                batches = []
                for i, share in enumerate(shares):
                    batch = root / f"batch-{cut}-{i}.jsonl"
                    batch.write_text(batch_text({e: events[e] for e in share}), encoding="utf-8")
                    batches.append(batch)
                if during_enqueue:
                    fs.ask(f"arm {rng.randint(1, ENQUEUE_CHANGES)}")
                started: list[subprocess.Popen[str]] = []
                observer = _start(processes, *PROGRAMS, "observe", str(db))
                started.append(observer)
                making = [_start(processes, *command, "--db", str(db), "--now", str(now),
                                 "enqueue", str(b))
                          for b in batches]
                started += making
                if not during_enqueue:  # the producers finish first: the cut lands in the work
                    for p in making:
                        p.wait(timeout=START_SECONDS)
                working = [_start(processes, *command, "--db", str(db), "--now", str(now), "work",
                                  "--lease-seconds", str(LEASE_SECONDS)) for _ in range(workers)]
                started += working
                if not during_enqueue:
                    _wait_open(working[0], db)
                if during_enqueue:
                    _wait_frozen(fs, making)
                elif cut % 4 == 3:  # now and then the workers finish: their summaries count
                    _wait_exit(working)
                else:
                    time.sleep(rng.uniform(*WORK_WINDOW_SECONDS))
                torn = fs.cut(mode, rng.randrange(2**32), started)
                run.torn_units += int(torn.get("units_unsynced", 0))
                _collect(making, shares, working, observer, book, run)
                run.cuts += 1
                if progress:
                    progress(f"{subject} {mode}: cut {run.cuts}/{cuts}, lost {run.lost}")
            else:
                mnt = fs.mount()
                if _check_after_cut(db, book, run, cuts):
                    _final_drain(db, book, run, START + cuts * ROUND_STEP_SECONDS)
                fs.unmount()
    run.acknowledged = len(book.enqueued | book.observed_done)
    run.details = {"enqueued": len(book.enqueued), "observed_done": len(book.observed_done),
                   "printed_done": book.printed_done, "sent": len(book.sent),
                   "producers_cut": book.producers_cut, "workers_cut": book.workers_cut}
    run.seconds = round(time.monotonic() - began, 1)
    return run


def _collect(
    making: list[subprocess.Popen[str]], shares: list[list[str]],
    working: list[subprocess.Popen[str]], observer: subprocess.Popen[str],
    book: _Ledger, run: CutRun,
) -> None:
    """What the cut processes acknowledged before they died."""
    for p, share in zip(making, shares):
        p.communicate()
        if p.returncode == 0:
            book.enqueued |= set(share)
        else:
            book.producers_cut += 1
    for p in working:
        out, err = p.communicate()
        book.workers_cut += p.returncode != 0
        if p.returncode == 0:
            try:
                book.printed_done += WorkSummary(**json.loads(out)).done
            except (ValueError, TypeError):
                run.note(f"a worker exited 0 without its summary: {out!r} {err[-200:]!r}")
    out, _ = observer.communicate()
    book.observed_done |= set(out.split())


def _check_after_cut(db: Path, book: _Ledger, run: CutRun, cut: int) -> bool:
    """Everything acknowledged before cut ``cut`` survived it, and the file is whole; False: unreadable."""
    try:
        state = read_file(db)
    except sqlite3.DatabaseError as exc:
        run.corruptions += 1
        run.note(f"after cut {cut}: the file cannot be read: {exc}")
        return False
    violations = check_invariants(state, finished=False)
    if state.integrity != ("ok",) or state.foreign_key_errors:
        run.corruptions += 1
    for v in violations:
        run.note(f"after cut {cut}: {v}")
    lost = _lost(state, book) - book.counted_lost
    run.lost += len(lost)
    run.cuts_with_losses += bool(lost)
    book.counted_lost |= lost
    for event_id in sorted(lost)[:3]:
        run.note(f"after cut {cut}: {event_id} was acknowledged and is gone")
    done_rows = sum(1 for m in state.messages if m.state == "done")
    if book.printed_done > done_rows:
        run.note(f"after cut {cut}: workers printed {book.printed_done} done, {done_rows} done rows")
    stored = {m.event_id: m for m in state.messages}
    for event_id in stored.keys() - book.sent.keys():
        run.note(f"after cut {cut}: {event_id} is stored but was never sent")
    return True


def _lost(state: FileState, book: _Ledger) -> set[str]:
    """Acknowledged events the file no longer has: enqueued and not stored, seen done and not done once."""
    messages = {m.event_id: m for m in state.messages}
    effects: dict[str, int] = {}
    for event_id, _, _ in state.effects:
        effects[event_id] = effects.get(event_id, 0) + 1
    lost = {e for e in book.enqueued if e not in messages}
    lost |= {e for e in book.observed_done
             if e not in messages or messages[e].state != "done" or effects.get(e, 0) != 1}
    return lost


def _final_drain(db: Path, book: _Ledger, run: CutRun, now: int) -> None:
    """A fresh worker finishes the queue: every stored event done once, the money exact."""
    finish_queue(db, now, lease_seconds=LEASE_SECONDS)
    state = read_file(db)
    stored = {m.event_id for m in state.messages}
    expected = sum(int(book.sent[e]["amount_cents"]) for e in stored if e in book.sent)
    for v in check_invariants(state, expected_total=expected):
        run.note(f"after the final drain: {v}")
    effects: dict[str, int] = {}
    for event_id, _, _ in state.effects:
        effects[event_id] = effects.get(event_id, 0) + 1
    run.doubles += sum(n - 1 for n in effects.values() if n > 1)
    lost = (book.enqueued - stored) - book.counted_lost
    run.lost += len(lost)
    if users_of(db.parent):
        run.note("a process still used the mount after the final drain")
