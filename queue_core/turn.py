"""Writers take turns: a fair lock across processes, beside the database file.

SQLite lets one writer in at a time and makes the others wait in a busy
handler that sleeps and polls. Under contention the writer that just
committed usually takes the lock again before a sleeping one wakes up, so
some workers starve (shares like 83/23/118/58/48/0/70/0 were measured). Here
a writer first waits for its *turn*: an OS lock (``flock``) on
``<database>-lock``, on which the kernel queues waiting processes and wakes
one as soon as the turn is released. Then it runs its transaction as before.

Inside one process, threads (and several ``Store`` objects on one file)
share one turn through a re-entrant lock that can time out, so a thread
that waits for a turn its own process holds gets ``database_busy`` instead
of waiting forever. Where the lock file cannot be created (a read-only
folder) there are no turns, and SQLite's own busy wait applies.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import StorageError


@dataclass
class _Turn:
    lock: threading.RLock = field(default_factory=threading.RLock)
    depth: int = 0  # how deeply the owning thread holds the turn
    fd: int = -1  # the lock file while the turn is held; -1 when no lock file can be made


_turns: dict[str, _Turn] = {}
_registry = threading.Lock()


def _forget_after_fork() -> None:
    # A child forked while a turn was held must not keep it: the lock belongs
    # to the open file, which parent and child would both hold. Closing the
    # child's copy leaves the parent's turn as it is.
    for turn in _turns.values():
        if turn.fd >= 0:
            os.close(turn.fd)
    _turns.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


@contextmanager
def writer_turn(database: Path, *, wait_seconds: float) -> Iterator[None]:
    """Hold this process's turn to write to ``database`` (re-entrant within a thread).

    The lock file is opened when the turn is taken and closed when it is
    given back (a few microseconds beside a commit's fsync), so nothing stays
    open between transactions.
    """
    name = os.path.abspath(database)
    with _registry:
        turn = _turns.setdefault(name, _Turn())
    if not turn.lock.acquire(timeout=wait_seconds):
        raise StorageError(f"{database}: another thread of this process holds the write turn "
                           f"(waited {wait_seconds:g} s)", code="database_busy")
    try:
        turn.depth += 1
        if turn.depth == 1:
            turn.fd = _lock(name)
        try:
            yield
        finally:
            turn.depth -= 1
            if turn.depth == 0 and turn.fd >= 0:
                os.close(turn.fd)  # gives the turn back (flock belongs to the open file)
                turn.fd = -1
    finally:
        turn.lock.release()


def _lock(name: str) -> int:
    try:
        fd = os.open(f"{name}-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return -1  # e.g. a read-only folder: no turns
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # queued in the kernel behind other processes
    except BaseException:
        os.close(fd)
        raise
    return fd
