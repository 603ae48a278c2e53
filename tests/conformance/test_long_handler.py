"""The worker loop's heartbeat: a ``LongHandler``'s long step runs outside the transaction, its lease kept.

Runs on both engines (tests/conformance/conftest.py): a real SQLite file,
and a real PostgreSQL database. In-process tests model the clock; the
heartbeat's thread and its connection are real. The process tests use the
real clock and real OS processes, killed by SIGKILL or stopped by SIGSTOP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from queue_core import (
    Handler,
    LeaseLost,
    LongHandler,
    Message,
    ModelClock,
    PermanentFailure,
    StorageError,
    Store,
    TemporaryFailure,
    Tx,
    WorkSummary,
    ledger,
    work,
)

from queue_core.values import Lease
from queue_core.testing.faults import FaultPlan

from ..support import DEMO_LINES, line, money, until

T = TypeVar("T")


def in_another_thread(body: Callable[[], T], timeout: float = 5) -> T:
    """Run ``body`` in a thread of its own and return its result; fail if it had to wait for us."""
    results: list[T] = []
    thread = threading.Thread(target=lambda: results.append(body()))
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the other worker waited: the long step held a lock or the writer's turn"
    return results[0]


def heartbeat_stopped(event_id: str) -> None:
    """Wait until the heartbeat of ``event_id`` has stopped (its thread ends when an extension is refused).

    Until then a beat may be inside its transaction, holding the message's row:
    on PostgreSQL another worker's claim (``FOR UPDATE SKIP LOCKED``) rightly
    skips a row held at that moment, and would find nothing to claim.
    """
    until(lambda: all(t.name != f"heartbeat {event_id}" for t in threading.enumerate()),
          what=f"the heartbeat of {event_id} did not stop")


def write_effect(tx: Tx, message: Message, result: object) -> None:
    Handler()(tx, message)


def test_a_long_step_keeps_its_lease_and_holds_no_lock(store: Store, clock: ModelClock) -> None:
    store.enqueue(DEMO_LINES)
    seen: list[tuple[str, int, int]] = []
    others: list[object] = []

    def prepare(message: Message) -> str:
        seen.append((message.event_id, message.generation, message.payload_object["amount_cents"]))
        for _ in range(4):  # 4 x 6 s of model time: far past the 10 s lease
            clock.advance(6)
            until(lambda: store.message("E0001").lease_until == clock.now() + 10)  # a beat since
            # Another worker, on its own thread: it must not wait for this one, and gets E0001 never.
            taken = in_another_thread(lambda: store.claim(10))
            others.append(None if taken is None else taken.event_id)
        return "scored"

    written: list[tuple[str, str]] = []

    def write(tx: Tx, message: Message, result: str) -> None:
        written.append((message.event_id, result))
        Handler()(tx, message)

    summary = work(store, LongHandler(prepare, write), lease_seconds=10, heartbeat_every=0.01, max_messages=1)
    assert summary == WorkSummary(claimed=1, done=1)
    assert seen == [("E0001", 1, 10000)]  # the payload as stored
    assert written == [("E0001", "scored")]
    assert len(others) == 4 and "E0001" not in others and None not in others  # the others got other messages
    m = store.message("E0001")
    assert (m.state, m.attempts, m.generation, m.expired_leases) == ("done", 1, 1, 0)
    assert ledger.effects(store) == [("E0001", "book", 10000)]


def test_a_long_step_that_lost_its_lease_writes_nothing(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    written: list[str] = []

    def prepare(message: Message) -> str:
        clock.advance(11)  # a stall: the lease (and any extension) ended
        heartbeat_stopped(message.event_id)  # its next beat was refused: the loss is known
        taken = in_another_thread(lambda: store.claim(10))
        assert taken is not None and (taken.event_id, taken.generation) == ("E0001", 2)
        store.complete(taken, Handler())  # the new owner's effect
        return "late"

    summary = work(store, LongHandler(prepare, lambda tx, m, r: written.append(r)),
                   lease_seconds=10, heartbeat_every=0.01)
    assert summary == WorkSummary(claimed=1, lease_lost=1)
    assert written == []  # the stale result was dropped before any transaction
    m = store.message("E0001")
    assert (m.state, m.generation, m.expired_leases) == ("done", 2, 1)
    assert money(store) == (1, 100)


@pytest.mark.parametrize(("raised", "state", "code", "detail"), [
    (PermanentFailure("unsupported_category", "no such shelf"), "dead", "unsupported_category", "no such shelf"),
    (TemporaryFailure("scorer_unavailable", "try later"), "ready", "scorer_unavailable", "try later"),
    (ValueError("bad score"), "ready", "handler_error", "ValueError: bad score"),
])
def test_a_refusal_in_the_long_step_is_recorded_and_nothing_is_written(
    store: Store, clock: ModelClock, raised: Exception, state: str, code: str, detail: str,
) -> None:
    store.enqueue(line("E0001"))
    written: list[str] = []

    def prepare(message: Message) -> str:
        clock.advance(3)
        raise raised

    summary = work(store, LongHandler(prepare, lambda tx, m, r: written.append(r)), lease_seconds=10)
    expected = WorkSummary(claimed=1, dead=1) if state == "dead" else WorkSummary(claimed=1, retried=1)
    assert summary == expected and written == []
    m = store.message("E0001")
    assert (m.state, m.last_error, m.last_detail, m.attempts) == (state, code, detail, 1)
    if state == "ready":
        assert m.available_at > clock.now()  # after a backoff
    assert ledger.effects(store) == []


def test_a_refusal_in_the_short_step_rolls_its_writes_back(store: Store) -> None:
    store.enqueue(line("E0001"))

    def write(tx: Tx, message: Message, result: int) -> None:
        Handler()(tx, message)  # the effect, then a refusal: the effect is undone
        raise PermanentFailure("over_limit", f"score {result}")

    summary = work(store, LongHandler(lambda message: 97, write), lease_seconds=10)
    assert summary == WorkSummary(claimed=1, dead=1)
    m = store.message("E0001")
    assert (m.state, m.last_error, m.last_detail) == ("dead", "over_limit", "score 97")
    assert ledger.effects(store) == []


def test_a_refusal_after_the_lease_was_lost_is_not_recorded(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))

    def prepare(message: Message) -> str:
        clock.advance(11)
        heartbeat_stopped(message.event_id)
        taken = in_another_thread(lambda: store.claim(10))
        assert taken is not None
        raise PermanentFailure("too_late", "the new owner decides")

    summary = work(store, LongHandler(prepare, write_effect), lease_seconds=10, heartbeat_every=0.01)
    assert summary == WorkSummary(claimed=1, lease_lost=1)
    m = store.message("E0001")
    assert (m.state, m.generation, m.last_error) == ("leased", 2, None)  # the new owner's lease, untouched


def test_each_message_gets_its_own_lease_and_progress_is_reported(store: Store) -> None:
    store.enqueue(DEMO_LINES)
    reports: list[WorkSummary] = []
    summary = work(store, LongHandler(lambda message: message.event_id, write_effect), progress=reports.append)
    assert summary == WorkSummary(claimed=4, done=3, dead=1)  # the demo's toy is an unsupported category
    assert [r.claimed for r in reports] == [1, 2, 3, 4] and reports[-1] == summary
    assert [m.generation for m in store.messages()] == [1, 1, 1, 1]


@pytest.mark.parametrize(("options", "message"), [
    ({"batch": 2}, "LongHandler takes one message at a time: batch must be 1"),
    ({"heartbeat_every": 10}, "heartbeat_every must be a number of seconds above 0 and below lease_seconds"),
    ({"heartbeat_every": 0}, "heartbeat_every must be a number"),
    ({"heartbeat_every": True}, "heartbeat_every must be a number"),
    ({"lease_seconds": 0}, "lease_seconds"),
])
def test_bad_options_of_a_long_handler_are_refused_before_a_claim(
    store: Store, options: dict[str, object], message: str,
) -> None:
    store.enqueue(line("E0001"))
    given = {"lease_seconds": 10, **options}
    with pytest.raises(ValueError, match=message):
        work(store, LongHandler(lambda m: None, write_effect), **given)  # type: ignore[arg-type]
    assert store.message("E0001").state == "ready"


def test_a_heartbeat_needs_a_long_handler(store: Store) -> None:
    store.enqueue(line("E0001"))
    with pytest.raises(ValueError, match="heartbeat_every needs a LongHandler"):
        work(store, Handler(), heartbeat_every=5)
    with pytest.raises(TypeError, match="LongHandler.write must be callable"):
        LongHandler(lambda m: None, "write")  # type: ignore[arg-type]
    assert store.message("E0001").state == "ready"


# ------------------------------------------------------------- real processes

CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from queue_core import Handler, LongHandler, Store, work

    target, started, go = sys.argv[1:4]

    def prepare(message):
        Path(started).write_text(str(message.generation))
        while not Path(go).exists():  # the long work: until the test says go
            time.sleep(0.02)
        return "result"

    def write(tx, message, result):
        Handler()(tx, message)

    with Store(target) as store:
        summary = work(store, LongHandler(prepare, write), lease_seconds=2, heartbeat_every=0.2, max_messages=1)
    print(json.dumps(summary.to_dict()))
""")


def real_clock_store(store: Store) -> Store:
    """The fixture's queue again, on the system clock (the server's on PostgreSQL): one clock for all processes."""
    return Store(store.target)


def claim_once_it_ends(queue: Store, timeout: float = 10) -> Lease:
    """Claim E0001 as soon as the stopped or killed worker's lease has ended."""
    deadline = time.monotonic() + timeout
    while (lease := queue.claim(2)) is None:
        assert time.monotonic() < deadline, "the lease never ended"
        time.sleep(0.05)
    assert (lease.event_id, lease.generation) == ("E0001", 2)
    return lease


def start_child(target: str, folder: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    started, go = folder / "started", folder / "go"
    child = subprocess.Popen([sys.executable, "-c", CHILD, target, str(started), str(go)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until(lambda: started.exists() or child.poll() is not None, timeout=30)
    assert started.exists(), child.communicate()
    return child, started, go


def test_by_default_two_failed_beats_in_a_row_still_leave_the_third_in_time(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path,
) -> None:
    # The default interval is a quarter of the lease: with beats 1 and 2 failing
    # (a storage error each, at once), beat 3 runs three quarters into the lease
    # and extends it; the long step outlives the first lease and its effect is written.
    # The real clock (PostgreSQL: the server's); only the two storage errors are planted.
    failures = {"left": 2}
    reached: list[float] = []

    def fail_twice() -> None:
        reached.append(time.monotonic())
        if failures["left"]:
            failures["left"] -= 1
            raise StorageError("a planted storage error: this beat fails at once")

    target = request.getfixturevalue("postgres_url") if engine == "postgresql" else tmp_path / "q.sqlite3"
    with Store(target, probe=FaultPlan().arm("extend.after_read", fail_twice)) as store:
        ledger.install(store)
        store.enqueue(line("E0001"))
        claimed_at: list[float] = []

        def prepare(message: Message) -> str:
            claimed_at.append(time.monotonic())
            time.sleep(4.3)  # past the first 4-second lease, which ends at most 5 s after the claim
            return "scored"

        summary = work(store, LongHandler(prepare, write_effect), lease_seconds=4)
        assert summary == WorkSummary(claimed=1, done=1), summary
        assert failures["left"] == 0 and len(reached) >= 3  # two failed beats, then at least one that counted
        assert money(store) == (1, 100)
    assert reached[2] - claimed_at[0] < 4  # the third beat came before the first lease could end


def test_a_long_step_outlives_its_first_lease_in_another_process(store: Store, tmp_path: Path) -> None:
    store.enqueue(line("E0001"))
    with real_clock_store(store) as queue:
        child, _, go = start_child(str(store.target), tmp_path)
        try:
            first_deadline = queue.message("E0001").lease_until
            assert first_deadline is not None
            until(lambda: queue.read(lambda tx: tx.now()) > first_deadline + 1)  # past the first lease
            assert queue.claim(2) is None  # still leased: the heartbeat extended it
            go.touch()
            out, err = child.communicate(timeout=30)
        finally:
            child.kill()
        assert child.returncode == 0, err
        assert json.loads(out) == {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
        m = queue.message("E0001")
        assert (m.state, m.attempts, m.generation) == ("done", 1, 1)
        assert ledger.effects(queue) == [("E0001", "book", 100)]


def test_a_killed_worker_s_heartbeat_dies_with_it_and_the_message_is_taken_over(
    store: Store, tmp_path: Path,
) -> None:
    store.enqueue(line("E0001"))
    with real_clock_store(store) as queue:
        child, _, _ = start_child(str(store.target), tmp_path)
        first_deadline = queue.message("E0001").lease_until
        assert first_deadline is not None
        until(lambda: (queue.message("E0001").lease_until or 0) > first_deadline)  # it has beaten
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        taken = claim_once_it_ends(queue)
        assert queue.complete(taken, Handler()).outcome.value == "done"
        m = queue.message("E0001")
        assert (m.state, m.generation, m.expired_leases) == ("done", 2, 1)
        assert ledger.effects(queue) == [("E0001", "book", 100)]


def test_a_stopped_worker_loses_its_lease_and_its_result_is_not_written(store: Store, tmp_path: Path) -> None:
    store.enqueue(line("E0001"))
    with real_clock_store(store) as queue:
        child, _, go = start_child(str(store.target), tmp_path)
        try:
            os.kill(child.pid, signal.SIGSTOP)  # its heartbeat's thread stops with it
            taken = claim_once_it_ends(queue)
            assert queue.complete(taken, Handler()).outcome.value == "done"
            go.touch()
            os.kill(child.pid, signal.SIGCONT)
            out, err = child.communicate(timeout=30)
        finally:
            child.kill()
        assert child.returncode == 0, err
        assert json.loads(out) == {"claimed": 1, "done": 0, "retried": 0, "dead": 0, "lease_lost": 1}
        m = queue.message("E0001")
        assert (m.state, m.generation) == ("done", 2)
        assert ledger.effects(queue) == [("E0001", "book", 100)]  # the new owner's; the stopped worker's was dropped
