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
of waiting forever. The wait for another process's turn ends the same way:
``flock`` itself has no timeout, so when the turn is taken a helper thread
waits in the kernel's queue and the caller waits for it no longer than
``wait_seconds`` (a stopped or stuck process holding the turn is then a busy
database, as a lock held past the timeout always was). Where the lock file
cannot be created (a read-only folder) there are no turns, and SQLite's own
busy wait applies.

Where Python cannot start a thread (``THREADS`` is false: Pyodide, CPython
compiled to WebAssembly, in a browser) there is one process and one thread,
so there is nobody to take turns with: no turns, and nothing waits.

This is the SQLite engine's own: ``import queue_core`` does not load it, and
on a platform without ``fcntl`` (Windows) opening an SQLite queue is refused
with ``no_file_locks`` while PostgreSQL works.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from types import ModuleType

from ..errors import StorageError
from . import THREADS

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows: no flock, so no fair turns (see check_file_locks)
    fcntl = None


def check_file_locks() -> None:
    """Refuse SQLite where the OS has no ``flock`` (``no_file_locks``).

    The writers' turn is what keeps SQLite's writers fair; without it
    the queue would run, but not as the pages promise.
    """
    if fcntl is None:
        raise StorageError(
            f"an SQLite queue needs the fcntl module for its writers' turn, and this Python "
            f"({sys.platform}) has none; use a PostgreSQL URL instead",
            code="no_file_locks",
        )


@dataclass
class _Turn:
    lock: threading.RLock = field(default_factory=threading.RLock)
    depth: int = 0  # how deeply the owning thread holds the turn
    # the lock file while the turn is held; -1 when no lock file can be made
    fd: int = -1


_turns: dict[str, _Turn] = {}
_registry = threading.Lock()
_waiting: set[int] = set()  # lock files that a helper thread is still queued on


def _forget_after_fork() -> None:
    # A child forked while a turn was held (or waited for) must not keep it:
    # the lock belongs to the open file, which parent and child would both
    # hold. Closing the child's copy leaves the parent's turn as it is.
    global _registry
    for turn in _turns.values():
        if turn.fd >= 0:
            os.close(turn.fd)
            # a with-block the child leaves must not close the number again
            turn.fd = -1
    for fd in _waiting:
        os.close(fd)
    _turns.clear()
    _waiting.clear()
    # it may have been held by a thread that the child does not have
    _registry = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


class writer_turn:  # noqa: N801  (used as a function: ``with writer_turn(path):``)
    """Hold this process's turn to write to ``database`` (re-entrant within a thread).

    The lock file is opened when the turn is taken and closed when it is
    given back (a few microseconds beside a commit's fsync), so nothing stays
    open between transactions. A context manager of its own rather than a
    generator: the worker enters it, nested, for every transaction.
    """

    __slots__ = ("_database", "_name", "_wait_seconds", "_turn")

    def __init__(self, database: Path | str, *, wait_seconds: float) -> None:
        self._database = database
        # an absolute str is taken as it is (the SQLite engine computes it once)
        self._name = (
            database
            if isinstance(database, str) and database.startswith("/")
            else os.path.abspath(database)
        )
        self._wait_seconds = wait_seconds
        self._turn: _Turn | None = None

    def __enter__(self) -> None:
        database, wait_seconds = self._database, self._wait_seconds
        deadline = time.monotonic() + wait_seconds
        turn = _turns.get(self._name)
        if turn is None:
            with _registry:
                turn = _turns.setdefault(self._name, _Turn())
        if not turn.lock.acquire(timeout=wait_seconds):
            raise StorageError(
                f"{database}: another thread of this process holds the write "
                f"turn (waited {wait_seconds:g} s)",
                code="database_busy",
            )
        try:
            if turn.depth == 0:
                fd = _lock(self._name, max(0.0, deadline - time.monotonic()))
                if fd == _TAKEN:
                    raise StorageError(
                        f"{database}: another process holds the write turn "
                        f"(waited {wait_seconds:g} s)",
                        code="database_busy",
                    )
                turn.fd = fd
        except BaseException:
            turn.lock.release()
            raise
        turn.depth += 1  # only once the turn is really held
        self._turn = turn

    def __exit__(self, *exc_info: object) -> None:
        turn = self._turn
        if turn is None:
            return
        self._turn = None
        try:
            turn.depth -= 1
            if turn.depth == 0 and turn.fd >= 0:
                # gives the turn back (flock belongs to the open file)
                os.close(turn.fd)
                turn.fd = -1
        finally:
            turn.lock.release()


_TAKEN = -2  # _lock: another process kept the turn for longer than we may wait


def _lock(name: str, wait_seconds: float) -> int:
    """The locked lock file; -1: no turns; ``_TAKEN`` after ``wait_seconds``."""
    if not THREADS or fcntl is None:
        return -1  # one process, one thread: nobody to take turns with (or no flock)
    try:
        fd = os.open(f"{name}-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return -1  # e.g. a read-only folder: no turns
    try:
        # free: the usual case, no waiting
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        pass
    except BaseException:
        os.close(fd)
        raise
    return fd if _wait_in_queue(fd, wait_seconds) else _TAKEN


@dataclass
class _Wait:
    guard: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False
    error: OSError | None = None


def _wait_in_queue(fd: int, wait_seconds: float) -> bool:
    """Queue in the kernel (fairly) for the lock on ``fd``, up to ``wait_seconds``.

    A helper thread makes the blocking ``flock`` call. If the caller gives up
    first, the helper keeps ``fd`` and closes it the moment it gets the lock,
    which hands the turn straight on to the next process in the queue.
    """
    wait = _Wait()
    with _registry:
        _waiting.add(fd)
    threading.Thread(
        target=_queue, args=(fd, wait), name="queue_core writer turn", daemon=True
    ).start()
    interrupted = True
    try:
        wait.done.wait(wait_seconds)
        interrupted = False
    finally:
        with wait.guard:
            got = wait.done.is_set()
            if not got:
                wait.abandoned = True  # fd is the helper's now
        if got:
            with _registry:
                _waiting.discard(fd)
            if interrupted or wait.error is not None:
                # e.g. KeyboardInterrupt just as the turn came: give it back
                os.close(fd)
    if wait.error is not None:
        raise wait.error
    return got


def _queue(fd: int, wait: _Wait) -> None:
    error: OSError | None = None
    try:
        assert fcntl is not None  # _lock made fd only where flock exists
        fcntl.flock(fd, fcntl.LOCK_EX)  # queued in the kernel behind other processes
    except OSError as exc:
        error = exc
    with wait.guard:
        if not wait.abandoned:
            wait.error = error
            wait.done.set()
            return
    with _registry:
        _waiting.discard(fd)
    os.close(fd)  # nobody waits for this turn any more: give it back at once
