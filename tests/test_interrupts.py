"""The queue's own interruptions and a COMMIT in flight (queue_core/interrupts.py), in one process.

A "COMMIT" here is a block of Python inside ``interrupts.committing()`` that
notes when it was sent and when it returned; what the engines do with a real
one is tested on both of them in tests/conformance/test_commit_in_flight.py,
and on PostgreSQL with a synchronous standby in tests/test_sync_standby_commit.py.
Each promise has its negative control here: the raw asynchronous exception
(what ``worker_threads`` raised before) does land inside a COMMIT, and a
thread blocked outside a COMMIT is given up on.
"""

from __future__ import annotations

import _thread
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType

import pytest

from queue_core import interrupts, worker_threads

from .support import until


@dataclass
class Loop:
    """A thread that commits again and again, and notes where each interruption landed."""

    stop: threading.Event = field(default_factory=threading.Event)
    sent: int = 0  # COMMITs sent
    returned: int = 0  # COMMITs that returned
    caught: int = 0  # interruptions that reached the thread
    inside: int = 0  # of them, while a COMMIT was sent and had not returned
    sent_when_caught: int = 0
    ident: int = 0
    started: threading.Event = field(default_factory=threading.Event)

    def commit(self) -> None:
        self.sent += 1
        total = 0
        for n in range(2000):  # Python code while the COMMIT is in flight
            total += n
        self.returned += 1

    def run(self) -> None:
        self.ident = threading.get_ident()
        self.started.set()
        while not self.stop.is_set():
            try:
                with interrupts.recording():  # as the worker's loop
                    while not self.stop.is_set():
                        with interrupts.committing():
                            self.commit()
                        interrupts.recorded()
            except KeyboardInterrupt:
                if self.sent != self.returned:
                    self.inside += 1
                    self.returned = self.sent  # counted once
                self.sent_when_caught = self.sent
                self.caught += 1  # last: the next one is sent once it committed again
        interrupts.forget(self.ident)


def interrupted_loop(interrupt: Callable[[int], object], times: int) -> Loop:
    """``interrupt(ident)`` sent ``times`` times, at random moments, to a committing thread."""
    loop = Loop()
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    loop.started.wait(10)
    rng = random.Random(44)
    try:
        for _ in range(times):
            before = loop.caught
            interrupt(loop.ident)
            until(lambda: loop.caught > before, 10, "the interruption never reached the thread")
            until(lambda: loop.sent > loop.sent_when_caught, 10, "the thread did not go on")
            time.sleep(rng.uniform(0, 0.002))
    finally:
        loop.stop.set()
        thread.join(10)
    return loop


@pytest.mark.timeout(120)
def test_an_interruption_of_a_thread_never_lands_inside_its_commit() -> None:
    # Between "is it committing?" and "it enters COMMIT" an asynchronous exception
    # may land after any bytecode; raised on entry, it stops the COMMIT from being
    # sent, and raised while it is in flight, it waits until the COMMIT returned.
    loop = interrupted_loop(interrupts.interrupt_thread, 200)
    assert loop.caught == 200 and loop.sent > 200  # each one reached the thread
    assert loop.inside == 0, f"{loop.inside} of {loop.caught} landed inside a COMMIT"


@pytest.mark.timeout(120)
def test_negative_control_the_raw_asynchronous_exception_lands_inside_commits() -> None:
    # What worker_threads raised before: PyThreadState_SetAsyncExc with no guard.
    loop = interrupted_loop(lambda ident: interrupts._set_async_exc(ident, KeyboardInterrupt), 200)
    assert loop.caught == 200
    assert loop.inside > 0, "the control did not catch a single interrupted COMMIT"


@pytest.mark.timeout(60)
def test_recording_keeps_the_interruption_until_the_commit_is_written_down() -> None:
    in_flight, go = threading.Event(), threading.Event()
    steps: list[str] = []

    def worker(recording: bool) -> None:
        with interrupts.recording() if recording else _nothing():
            try:
                with interrupts.committing():
                    in_flight.set()
                    go.wait(10)  # the COMMIT, held
                steps.append("committed")
                steps.append("counted")
                interrupts.recorded()
                steps.append("went on")
            except KeyboardInterrupt:
                steps.append("interrupted")
        interrupts.forget(threading.get_ident())

    for recording, expected in ((True, ["committed", "counted", "interrupted"]),
                                (False, ["interrupted"])):  # the control: raised as it returned
        in_flight.clear()
        go.clear()
        steps.clear()
        thread = threading.Thread(target=worker, args=(recording,), daemon=True)
        thread.start()
        assert in_flight.wait(10)
        assert thread.ident is not None and interrupts.holding(thread.ident)
        assert interrupts.interrupt_thread(thread.ident) is False  # it waits for the COMMIT
        go.set()
        thread.join(10)
        assert steps == expected, recording


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def held_back_ctrl_c() -> Iterator[list[int]]:
    """SIGINT handled as the worker's second Ctrl-C is (cli.service): held back inside a COMMIT."""
    said: list[int] = []

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if interrupts.hold_back():
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with interrupts.saying(lambda: said.append(1)):
            yield said
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.timeout(60)
def test_a_signal_in_the_committing_thread_is_raised_when_the_commit_returned(
        held_back_ctrl_c: list[int]) -> None:
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.committing():
            signal.raise_signal(signal.SIGINT)
            steps.append("sent")
            signal.raise_signal(signal.SIGINT)  # Ctrl-C again
            steps.append("returned")
    assert steps == ["sent", "returned"] and held_back_ctrl_c == [1, 1]
    with pytest.raises(KeyboardInterrupt):  # outside a COMMIT: at once
        signal.raise_signal(signal.SIGINT)
        steps.append("never")
    assert steps == ["sent", "returned"] and held_back_ctrl_c == [1, 1]
    assert not interrupts._STATES  # nothing kept for a thread that is not committing


def main_thread_joins() -> bool:
    """Whether the main thread waits in ``Thread.join`` (a Ctrl-C before that is not the case here)."""
    frame: FrameType | None = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if frame.f_code is threading.Thread.join.__code__:
            return True
        frame = frame.f_back
    return False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("in_commit", [True, False])
def test_the_calling_thread_waits_for_a_thread_s_commit_past_the_give_back_time(
        monkeypatch: pytest.MonkeyPatch, held_back_ctrl_c: list[int], in_commit: bool) -> None:
    # A thread blocked in a call is given GIVE_BACK_SECONDS; a thread whose COMMIT
    # is in flight is waited for however long it takes, Ctrl-C again or not.
    monkeypatch.setattr(worker_threads, "GIVE_BACK_SECONDS", 0.5)
    in_flight, go = threading.Event(), threading.Event()
    steps: list[str] = []

    def body(index: int) -> None:
        with interrupts.committing() if in_commit else _nothing():
            in_flight.set()
            go.wait(30)  # the COMMIT, held (or, the control, any call outside Python)
            steps.append("returned")

    def ctrl_c_twice_then_let_it_return() -> None:
        in_flight.wait(10)
        until(main_thread_joins, 10, "the calling thread never waited for its threads")
        _thread.interrupt_main()
        time.sleep(1.0 if in_commit else 3.0)  # twice GIVE_BACK_SECONDS, or far more
        if in_commit:  # (the control's run ended already)
            _thread.interrupt_main()  # Ctrl-C again, while the calling thread waits
            time.sleep(1.0)
        steps.append("released")
        go.set()

    helper = threading.Thread(target=ctrl_c_twice_then_let_it_return)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker_threads.Threads(1, body, threading.Event()).run()
        steps.append("run ended")
    finally:
        helper.join()
    if in_commit:
        assert steps == ["released", "returned", "run ended"]
        assert held_back_ctrl_c  # said
    else:  # the control: given up on after GIVE_BACK_SECONDS, still blocked
        assert steps[0] == "run ended" and not held_back_ctrl_c


@pytest.mark.timeout(60)
def test_a_thread_waiting_for_a_commit_elsewhere_holds_its_own_ctrl_c_back(
        held_back_ctrl_c: list[int]) -> None:
    # The calling thread of a worker waits for its threads' COMMITs: a Ctrl-C
    # there must not land on whatever line it runs (a loop's jump back sits
    # outside any try), so the signal handler holds it back instead, while a
    # thread commits; once none does, it is raised at once.
    elsewhere = [True]
    steps: list[str] = []
    with interrupts.waiting_for(lambda: elsewhere[0]):
        signal.raise_signal(signal.SIGINT)
        steps.append("held back")
        elsewhere[0] = False
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            steps.append("never")
    assert steps == ["held back"] and held_back_ctrl_c == [1]
    assert not interrupts._STATES  # nothing kept once the wait ended
