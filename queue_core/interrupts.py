"""The queue's own interruptions wait for a COMMIT in flight, or never reach it.

queue_core raises ``KeyboardInterrupt`` asynchronously in two places: the
worker's signal handler on a second Ctrl-C (``cli_work``), in the main
thread, and ``worker_threads.Threads`` in each of its threads
(``PyThreadState_SetAsyncExc``). Landing inside a COMMIT, such an exception
makes psycopg cancel the query, and a COMMIT that waits for a synchronous
standby then returns success with a warning, committed on the primary alone
(``docs/failover.md``). On SQLite it lands just after the COMMIT, before the
worker wrote down what it committed.

So a thread marks where it commits (``committing()``: around the COMMIT, or
a statement that commits by itself). An interruption asked for while a
thread is inside (``hold_back`` from a signal handler, for the thread it
runs in; ``interrupt_thread`` for another thread) waits, and is raised in
that thread when the COMMIT returned. A thread that writes down what its
commits did (the worker loop, inside ``recording()``) keeps it waiting a
little longer, until it calls ``recorded()``. An interruption raised in a
thread before it enters ``committing()`` is raised on entry instead, so the
COMMIT is never sent.

The queue's other stops raise nothing: SIGTERM and a first Ctrl-C set the
worker's ``stop`` event, and a heartbeat's thread reads its own event between
two beats, so the COMMIT in flight is finished as any other. Nothing here
ends a COMMIT that does not return (a synchronous standby that is down): a
process that must stop then is killed (SIGKILL), and the worker never said
it committed.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(slots=True)
class _State:
    """One thread's part: each field is changed under ``_LOCK``."""

    committing: int = 0  # depth inside committing()
    recording: int = 0  # depth inside recording()
    # a COMMIT returned inside recording(); recorded() not called yet
    held: bool = False
    deferred: bool = False  # an interruption waits for the COMMIT
    # raised in the thread asynchronously, maybe not delivered yet
    requested: bool = False
    # this thread waits for other threads; while this says one of them is
    # inside a COMMIT, this thread's own interruption is held back too
    waiting: Callable[[], bool] | None = None

    @property
    def holding(self) -> bool:
        return self.committing > 0 or self.held

    @property
    def idle(self) -> bool:
        return not (
            self.holding or self.recording or self.deferred or self.requested
            or self.waiting is not None
        )


# Re-entrant: a signal handler (``hold_back``) runs in the main thread between
# two bytecodes, possibly while that thread holds the lock here.
_LOCK = threading.RLock()
_STATES: dict[int, _State] = {}
_ANNOUNCE: list[Callable[[], None]] = []  # told each time an interruption is held back


def _state(ident: int) -> _State:
    state = _STATES.get(ident)
    if state is None:
        state = _STATES[ident] = _State()
    return state


def _tidy(ident: int, state: _State) -> None:
    if state.idle and _STATES.get(ident) is state:
        del _STATES[ident]


def _due(ident: int, state: _State) -> bool:
    """Whether an interruption waited for this thread; it is then no longer waiting."""
    due, state.deferred = state.deferred, False
    _tidy(ident, state)
    return due


def _announce() -> None:
    for announce in list(_ANNOUNCE):
        announce()


def _set_async_exc(ident: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``ident`` when it next runs Python code (None: cancel that)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), None if exc is None else ctypes.py_object(exc)
    )


class _Committing:
    """``committing()``: one object for every thread, whose part is in ``_STATES``."""

    def __enter__(self) -> None:
        ident = threading.get_ident()
        with _LOCK:
            state = _state(ident)
            if state.requested:
                # asked to stop before this COMMIT: stop here, before it is sent
                _set_async_exc(ident, None)
                state.requested = False
                _tidy(ident, state)
                raise KeyboardInterrupt
            state.committing += 1

    def __exit__(self, *exc_info: object) -> None:
        ident = threading.get_ident()
        with _LOCK:
            state = _STATES[ident]  # kept while it commits
            # held first, then the count: a signal handler never sees this
            # thread outside while what it committed is not written down
            if state.recording and state.committing == 1:
                state.held = True
            state.committing -= 1
            due = not state.holding and _due(ident, state)
        if due:
            raise KeyboardInterrupt


_COMMITTING = _Committing()


def committing() -> _Committing:
    """Around a COMMIT (or a statement that commits by itself) in this thread: ``with committing():``.

    :raises KeyboardInterrupt: on entry, if one was raised in this thread
        asynchronously and not delivered yet (nothing is sent then); at the
        end, if one waited for the COMMIT, unless the thread is inside
        ``recording()`` (it waits until ``recorded()``).
    """
    return _COMMITTING


@contextmanager
def recording() -> Iterator[None]:
    """A block that writes down what its commits did, and says so with ``recorded()``.

    An interruption that waited for one of its COMMITs is raised at the next
    ``recorded()``, or at the end of the block. A ``KeyboardInterrupt`` that
    leaves the block was the thread's interruption: one raised in it and not
    delivered yet is then cancelled.
    """
    ident = threading.get_ident()
    with _LOCK:
        state = _state(ident)
        state.recording += 1
    try:
        yield
    except KeyboardInterrupt:
        with _LOCK:
            if state.requested:  # one reached the thread: none is left to come
                _set_async_exc(ident, None)
                state.requested = False
        raise
    finally:
        with _LOCK:
            state.recording -= 1
            due = False
            if not state.recording:
                state.held = False
                due = not state.holding and _due(ident, state)
        if due:
            raise KeyboardInterrupt


def recorded() -> None:
    """This thread wrote down what its last COMMIT did: an interruption that waited is raised now."""
    ident = threading.get_ident()
    with _LOCK:
        state = _STATES.get(ident)
        if state is None or state.committing:
            return
        state.held = False
        due = _due(ident, state)
    if due:
        raise KeyboardInterrupt


def holding(ident: int) -> bool:
    """Whether thread ``ident`` is inside a COMMIT, or has not written down what it did."""
    with _LOCK:
        state = _STATES.get(ident)
        return state is not None and state.holding


def hold_back() -> bool:
    """For a signal handler: whether to hold back the interruption it would raise now.

    True: this thread is inside a COMMIT, and the interruption is raised in
    it when the COMMIT returned (``committing``, ``recorded``). False: raise
    it now; nothing waits any more.
    """
    ident = threading.get_ident()
    with _LOCK:
        state = _STATES.get(ident)
        if state is None:
            return False
        if not state.holding and not (state.waiting is not None and state.waiting()):
            state.deferred = False  # the exception raised now is that one
            _tidy(ident, state)
            return False
        state.deferred = True
    _announce()
    return True


@contextmanager
def waiting_for(committing_elsewhere: Callable[[], bool]) -> Iterator[None]:
    """While this thread waits for others: hold its interruption back while one of them commits.

    ``committing_elsewhere()`` says whether a thread it waits for is inside
    a COMMIT (or has not written down what it did). A signal handler that
    asks ``hold_back`` then holds the interruption back instead of raising
    it at whatever line the waiting thread runs; at the end of the block it
    is dropped, since the wait itself ends in an interruption. Once no thread
    commits, an interruption is raised at once, as outside the block.
    """
    ident = threading.get_ident()
    with _LOCK:
        _state(ident).waiting = committing_elsewhere
    try:
        yield
    finally:
        with _LOCK:
            state = _state(ident)
            state.waiting = None
            state.deferred = False
            _tidy(ident, state)


def interrupt_thread(ident: int) -> bool:
    """Raise ``KeyboardInterrupt`` in thread ``ident``, or in it after its COMMIT in flight.

    True: raised (delivered when it next runs Python code); False: it waits
    for the thread's COMMIT.
    """
    with _LOCK:
        state = _state(ident)
        if state.holding:
            state.deferred = True
        else:
            # marked first: committing() then knows it may be pending
            state.requested = True
            _set_async_exc(ident, KeyboardInterrupt)
            return True
    _announce()
    return False


def forget(ident: int) -> None:
    """Thread ``ident`` ended: nothing is kept for it (a new thread may get its number)."""
    with _LOCK:
        _STATES.pop(ident, None)


@contextmanager
def saying(announce: Callable[[], None]) -> Iterator[None]:
    """While the block runs, ``announce()`` is called whenever an interruption waits for a COMMIT.

    It may run in a signal handler: it must be short and must not raise.
    """
    _ANNOUNCE.append(announce)
    try:
        yield
    finally:
        _ANNOUNCE.remove(announce)
