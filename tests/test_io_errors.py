"""The queue under I/O errors: an fsync or a write fails, then the power is cut.

Each case runs one real process (``queue-core`` or a Python-API program) on
the power-cut filesystem with a fault armed at a counted operation
(``proof/ioerr.py``), then cuts the power (``drop``) and checks the disk:
nothing acknowledged is lost, the file is whole, every invariant holds and
a fresh worker finishes the queue with the money exact. The process must
say what failed (exit 1, ``io_error`` or ``disk_full`` with SQLite's
sentence, no traceback) and report nothing it did not commit.

Negative controls: a careless wrapper that swallows the error and reports
success loses what it reported, and the checker finds it; a disk that fails
a sync and then recovers, worked on without a restart, loses acknowledged
completions (fsyncgate: the page cache kept what the disk dropped), which is
why docs/power-cuts.md says to restart after ``io_error``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from proof.ioerr import EVENTS_PER_BATCH, Fault, FaultRun, fault_run
from proof.matrix import START, batch_text
from proof.powerfs import PowerFS
from queue_core import StorageError, Store, ledger
from queue_core.clock import ModelClock

from .fuse_support import powerfs, require_fuse  # noqa: F401

SENTENCE = {"io_error": "(disk I/O error)", "disk_full": "(database or disk is full)"}

# (fault, phase, via, the code said, events done before the fault)
CASES = [
    (Fault("fsync", 1), "enqueue", "cli", "io_error", 0),
    (Fault("fsync", 1, always=True), "enqueue", "api", "io_error", 0),
    (Fault("write", 1, "ENOSPC"), "enqueue", "cli", "disk_full", 0),
    (Fault("write", 3, "EIO", always=True), "enqueue", "api", "io_error", 0),
    # counted fsyncs of a worker: 1 opens, then claim and completion alternate
    (Fault("fsync", 5), "work", "api", "io_error", 1),  # the completion of E0002
    (Fault("fsync", 3, always=True), "work", "cli", "io_error", 0),  # that of E0001
    (Fault("write", 8, "ENOSPC", always=True), "work", "api", "disk_full", 0),
    (Fault("write", 5, "EIO", always=True), "work", "cli", "io_error", 0),
]


def _said(run: FaultRun, code: str, via: str) -> None:
    """The process exited 1 with one line naming the code and SQLite's sentence."""
    lines = run.stderr.splitlines()
    assert run.exit_status == 1 and len(lines) == 1, run.to_dict()
    prefix = "queue-core: " if via == "cli" else ""
    assert lines[0].startswith(f"{prefix}{code}: "), lines
    assert SENTENCE[code] in lines[0] and "Traceback" not in run.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("fault", "phase", "via", "code", "done_before"), CASES,
                         ids=[f"{c[1]}-{c[2]}-{c[0].label}" for c in CASES])
def test_an_operation_whose_sync_or_write_failed_is_never_reported_as_done(
    tmp_path: Path, fault: Fault, phase: str, via: str, code: str, done_before: int,
) -> None:
    require_fuse()
    run = fault_run(tmp_path, fault, phase, via)  # type: ignore[arg-type]
    assert run.failed_operations >= 1, run.to_dict()  # the fault came, in this process
    _said(run, code, via)
    assert not run.acknowledged_enqueue and run.printed_done == 0
    assert len(run.acknowledged_done) == done_before, run.to_dict()
    assert run.ok, run.to_dict()  # nothing acknowledged lost; invariants; money exact
    # what failed is not on the disk: the second batch, and no completion past the fault
    assert run.stored_after == EVENTS_PER_BATCH and run.done_after == done_before, run.to_dict()


@pytest.mark.timeout(120)
def test_after_a_failed_fsync_and_a_restart_the_queue_carries_on_losing_nothing(
    tmp_path: Path,
) -> None:
    require_fuse()
    run = fault_run(tmp_path, Fault("fsync", 5, always=True), "work", "api",
                    then="restart and work")
    _said(run, "io_error", "api")
    # E0002, whose completion failed, stays leased until its lease runs out (the final drain)
    assert "E0002" not in run.acknowledged_done, run.to_dict()
    assert run.ok, run.to_dict()
    assert run.done_after == len(run.acknowledged_done) == EVENTS_PER_BATCH - 1, run.to_dict()


# ------------------------------------------------------------ negative controls


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("fault", "phase", "lost"), [
    (Fault("fsync", 1), "enqueue", ["E0007", "E0008", "E0009", "E0010", "E0011", "E0012"]),
    (Fault("fsync", 5), "work", ["E0002"]),
], ids=["enqueue", "work"])
def test_a_wrapper_that_swallows_the_error_loses_what_it_reported(
    tmp_path: Path, fault: Fault, phase: str, lost: list[str],
) -> None:
    require_fuse()
    run = fault_run(tmp_path, fault, phase, "api", ignore=True)  # type: ignore[arg-type]
    assert run.failed_operations == 1 and run.exit_status == 0, run.to_dict()
    assert run.lost == lost and not run.ok, run.to_dict()


@pytest.mark.timeout(120)
def test_fsyncgate_a_disk_that_recovers_without_a_restart_loses_acknowledged_work(
    tmp_path: Path,
) -> None:
    # The completion of E0002 fails its fsync (and the close's checkpoint too);
    # the disk recovers; a new worker's connection rebuilds the WAL index from
    # the WAL as the page cache holds it, failed commit included, and builds
    # on it. Its completions are acknowledged, and the cut takes them.
    require_fuse()
    run = fault_run(tmp_path, Fault("fsync", 5, always=True), "work", "api", then="work")
    _said(run, "io_error", "api")
    assert run.lost and not run.ok, run.to_dict()
    assert run.done_after < len(run.acknowledged_done), run.to_dict()


# ------------------------------------------------------------ the Python API


@pytest.mark.timeout(120)
def test_the_store_raises_io_error_and_closes_the_connection(
    powerfs: PowerFS,  # noqa: F811
) -> None:
    db = powerfs.mount() / "queue.sqlite3"
    batch = batch_text({"E0001": {"category": "book", "amount_cents": 100}})
    with Store(db, clock=ModelClock(START)) as store:
        ledger.install(store)
        powerfs.fail("fsync", 1)
        with pytest.raises(StorageError) as raised:
            store.enqueue(batch)
        assert raised.value.code == "io_error"
        cause = raised.value.__cause__
        assert isinstance(cause, sqlite3.OperationalError)
        assert cause.sqlite_errorname == "SQLITE_IOERR_FSYNC"
        assert not _open_in_this_process(db)  # the connection was closed, not reused
        # the next operation gets a connection of its own; the fault came once
        assert store.enqueue(batch).accepted == 1
    assert powerfs.ask("stats")["failed"] == 1


def _open_in_this_process(db: Path) -> list[str]:
    links = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
             if os.path.exists(f"/proc/self/fd/{fd}")]
    return [link for link in links if link.startswith(str(db))]
