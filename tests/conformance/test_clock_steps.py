"""Workers whose clocks are wrong or stepped: real processes under libfaketime, on both engines.

Each test starts a worker process (tests/clock_worker.py) whose ``time.time()``
is moved by Debian's libfaketime (LD_PRELOAD, a timestamp file read on every
call, so a test can step the clock of a running process), beside this
process on the true clock. On SQLite every time is the worker's own; on
PostgreSQL the server's clock decides and a skewed worker changes nothing.
Either way the fence keeps the effect single. Without libfaketime the tests
skip, except with ``QUEUE_CORE_REQUIRE_FAKETIME=1`` (``.ci/run``): then they fail.
The negative controls remove a protection and watch the outcome change.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from queue_core import LeaseLost, ModelClock, Store
from queue_core.values import Lease

from ..clock_worker import EFFECTS, effect
from ..support import line, until

WORKER = Path(__file__).resolve().parent.parent / "clock_worker.py"
ENV_REQUIRE = "QUEUE_CORE_REQUIRE_FAKETIME"
HOUR = 3600
LONG = 120  # a lease no step of these tests outlives by waiting


def faketime_library() -> str:
    """Debian's libfaketime, or a skip (a failure where it is required)."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    if found:
        return found[0]
    if os.environ.get(ENV_REQUIRE) == "1":
        pytest.fail(f"{ENV_REQUIRE}=1 but libfaketime is not installed (Debian: apt-get install faketime)")
    pytest.skip("libfaketime is not installed (Debian: apt-get install faketime)")


@dataclass
class Worker:
    """One worker process on a clock of its own; ``step`` moves that clock while it runs."""

    folder: Path
    child: subprocess.Popen[str] = field(init=False)

    def start(self, target: str, name: str, offset: str, plan: list[dict[str, Any]], **options: Any) -> Worker:
        self.folder.mkdir()
        self.step(offset)
        env = {k: v for k, v in os.environ.items() if k != "FAKETIME"}  # FAKETIME would win over the file
        env.update(LD_PRELOAD=faketime_library(), FAKETIME_TIMESTAMP_FILE=str(self.folder / "clock.rc"),
                   FAKETIME_NO_CACHE="1", FAKETIME_DONT_FAKE_MONOTONIC="1")  # an NTP step leaves monotonic alone
        argv = [sys.executable, str(WORKER), target, str(self.folder), name, json.dumps({"plan": plan, **options})]
        self.child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        return self

    def step(self, offset: str) -> None:
        """Set the worker's clock to the true time plus ``offset`` ("+1h", "-1h", "+0")."""
        (self.folder / "clock.rc").write_text(offset + "\n")

    def reach(self, pause: str) -> None:
        until(lambda: (self.folder / f"{pause}.reached").exists() or self.child.poll() is not None,
              timeout=60, what=f"the worker never reached {pause}")
        assert self.child.poll() is None, self.child.communicate()

    def go(self, pause: str) -> None:
        (self.folder / pause).touch()

    def finish(self) -> list[Any]:
        out, err = self.child.communicate(timeout=60)
        assert self.child.returncode == 0, err
        return list(json.loads(out))


@pytest.fixture
def queue(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[Store]:
    """A queue on the true clock (PostgreSQL: the server's), with a table of effects without a key."""
    faketime_library()
    target: str | Path = request.getfixturevalue("postgres_url") if engine == "postgresql" else tmp_path / "q.sqlite3"
    with Store(target) as store:
        store.write(lambda tx: tx.execute(EFFECTS))
        yield store


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    w = Worker(tmp_path / "worker")
    yield w
    if hasattr(w, "child") and w.child.poll() is None:
        w.child.kill()
        w.child.wait()


def now(queue: Store) -> int:
    """The deciding clock: this host's on SQLite, the server's on PostgreSQL."""
    return queue.read(lambda tx: tx.now())


def effects(queue: Store) -> list[tuple[str, str]]:
    rows = queue.read(lambda tx: tx.execute("SELECT event_id, worker FROM clock_effects").fetchall())
    return sorted((str(r[0]), str(r[1])) for r in rows)


def complete_in_own_transaction(queue: Store, lease: Lease, *, fenced: bool = True) -> str:
    """The correct worker's work: its effect, then the fenced ACK in the same transaction.

    ``fenced=False`` is the negative control: the effect commits without the ACK's fence.
    """
    message = queue.message(lease.event_id)
    try:
        with queue.transaction() as tx:
            effect("correct")(tx, message)
            if fenced:
                queue.complete_tx(tx, lease)
        return "done"
    except LeaseLost:
        return "lease_lost"


def claim_when_free(queue: Store) -> Lease:
    """Claim as soon as a lease has ended by the deciding clock."""
    deadline = time.monotonic() + 30
    while (lease := queue.claim(LONG)) is None:
        assert time.monotonic() < deadline, "the lease never ended"
        time.sleep(0.05)
    return lease


def test_libfaketime_moves_python_s_clock_and_steps_it_in_a_running_process(tmp_path: Path) -> None:
    lib = faketime_library()
    wrapper = subprocess.run(["faketime", "-f", "+1h", sys.executable, "-c", "import time; print(time.time())"],
                             capture_output=True, text=True, timeout=60, check=True)
    assert abs(float(wrapper.stdout) - time.time() - HOUR) < 60
    rc = tmp_path / "clock.rc"
    rc.write_text("+1h\n")
    program = ("import pathlib, sys, time; rc = pathlib.Path(sys.argv[1]); a = time.time(); "
               "rc.write_text('-1h\\n'); print(a, time.time(), time.monotonic())")
    env = dict(os.environ, LD_PRELOAD=lib, FAKETIME_TIMESTAMP_FILE=str(rc), FAKETIME_NO_CACHE="1",
               FAKETIME_DONT_FAKE_MONOTONIC="1")
    env.pop("FAKETIME", None)
    out = subprocess.run([sys.executable, "-c", program, str(rc)], capture_output=True, text=True,
                         timeout=60, check=True, env=env).stdout
    ahead, behind, monotonic = (float(x) for x in out.split())
    assert abs(ahead - time.time() - HOUR) < 60 and abs(behind - time.time() + HOUR) < 60
    assert abs(monotonic - time.monotonic()) < 60  # a step leaves the monotonic clock alone, as NTP's does


def ahead_takes_over(
    queue: Store, worker: Worker, *, fenced: bool = True, client_clock: bool = False,
) -> dict[str, Any]:
    """A correct worker holds E0001; a worker an hour ahead claims twice; the first completes, then it."""
    queue.enqueue(line("E0001") + "\n" + line("E0002"))
    mine = queue.claim(LONG)
    assert mine is not None and mine.event_id == "E0001"
    plan = [{"do": "time"}, {"do": "claim", "lease": LONG}, {"do": "claim", "lease": LONG},
            {"do": "pause", "name": "held"}, {"do": "complete"}]
    worker.start(str(queue.target), "ahead", "+1h", plan, client_clock=client_clock)
    worker.reach("held")
    seen = {"e0002_until_ahead": (queue.message("E0002").lease_until or 0) - now(queue),
            "correct_claims": queue.claim(LONG)}
    seen["mine"] = complete_in_own_transaction(queue, mine, fenced=fenced)  # while it holds E0001
    worker.go("held")
    seen["worker"] = worker.finish()
    seen["effects"] = effects(queue)
    return seen


def test_a_worker_an_hour_ahead(queue: Store, worker: Worker, engine: str) -> None:
    seen = ahead_takes_over(queue, worker)
    faked, first, second, _, outcomes = seen["worker"]
    assert abs(faked - time.time() - HOUR) < 60  # its clock is an hour ahead
    assert seen["correct_claims"] is None  # nothing looks free to a correct worker
    if engine == "sqlite":
        # it took the live lease over, and its own leases end an hour late for everyone else
        assert first[:2] == ["E0001", 2] and second[:2] == ["E0002", 1]
        assert seen["e0002_until_ahead"] > HOUR
        assert outcomes == ["done", "done"] and seen["mine"] == "lease_lost"  # the fence refused the first owner
        assert seen["effects"] == [("E0001", "ahead"), ("E0002", "ahead")]
    else:
        # the server's clock decided: the live lease stayed, its own lease is an ordinary one
        assert first[:2] == ["E0002", 1] and second is None
        assert seen["e0002_until_ahead"] <= LONG + 1
        assert outcomes == ["done"] and seen["mine"] == "done"
        assert seen["effects"] == [("E0001", "correct"), ("E0002", "ahead")]
    m = queue.message("E0001")
    assert (m.state, m.attempts) == ("done", 2 if engine == "sqlite" else 1)  # the work repeated, not the effect


def test_negative_control_without_the_fence_the_takeover_doubles_the_effect(tmp_path: Path, worker: Worker) -> None:
    with Store(tmp_path / "q.sqlite3") as queue:
        queue.write(lambda tx: tx.execute(EFFECTS))
        seen = ahead_takes_over(queue, worker, fenced=False)
    assert seen["mine"] == "done"
    assert seen["effects"] == [("E0001", "ahead"), ("E0001", "correct"), ("E0002", "ahead")]


def test_negative_control_with_the_client_s_clock_postgresql_is_skewed_too(
    request: pytest.FixtureRequest, worker: Worker,
) -> None:
    faketime_library()
    with Store(request.getfixturevalue("postgres_url")) as queue:
        queue.write(lambda tx: tx.execute(EFFECTS))
        seen = ahead_takes_over(queue, worker, client_clock=True)
    first = seen["worker"][1]
    assert first[:2] == ["E0001", 2] and seen["e0002_until_ahead"] > HOUR  # as on SQLite
    assert seen["mine"] == "lease_lost"


def test_a_worker_an_hour_behind(queue: Store, worker: Worker, engine: str) -> None:
    with Store(queue.target, clock=ModelClock(now(queue) - 2 * HOUR)) as earlier:
        earlier.enqueue(line("E0001"))  # due two hours ago: due by its clock too
    dead = queue.claim(1)  # a worker that died: its lease ends within two seconds
    assert dead is not None
    until(lambda: now(queue) >= dead.lease_until, what="the dead worker's lease never ended")
    plan = [{"do": "time"}, {"do": "claim", "lease": LONG}, {"do": "enqueue", "id": "E0002"},
            {"do": "claim", "lease": LONG}, {"do": "pause", "name": "held"}, {"do": "complete"}]
    worker.start(str(queue.target), "behind", "-1h", plan)
    worker.reach("held")
    taken = [queue.claim(LONG), queue.claim(LONG)]
    taken_ids = [t.event_id if t else None for t in taken]
    worker.go("held")
    faked, first, _, second, _, outcomes = worker.finish()
    assert abs(faked - time.time() + HOUR) < 60
    if engine == "sqlite":
        assert first is None  # the abandoned lease looks live to it for an hour more
        assert second[:2] == ["E0002", 1] and second[2] < now(queue)  # its own lease: over before it began
        assert taken_ids == ["E0001", "E0002"]  # correct workers took both
        assert [complete_in_own_transaction(queue, t) for t in taken if t] == ["done", "done"]
        assert outcomes == ["lease_lost"]  # the fence refused it
        assert effects(queue) == [("E0001", "correct"), ("E0002", "correct")]
    else:
        assert first[:2] == ["E0001", 2] and second[:2] == ["E0002", 1]
        assert taken_ids == [None, None] and outcomes == ["done", "done"]
        assert effects(queue) == [("E0001", "behind"), ("E0002", "behind")]


@pytest.mark.parametrize("client_clock", [False, True])
def test_a_retry_s_backoff_counts_on_the_deciding_clock(
    queue: Store, worker: Worker, engine: str, client_clock: bool
) -> None:
    # A worker an hour ahead reports a temporary failure: the backoff (1 s in the
    # queue default) counts from its own clock on SQLite, from the server's on
    # PostgreSQL. The negative control gives the PostgreSQL store the client's
    # clock: then its hour shows there too.
    if client_clock and engine == "sqlite":
        pytest.skip("SQLite has no clock but the client's: the control is PostgreSQL's")
    queue.enqueue(line("E0001"))
    plan = [{"do": "claim", "lease": LONG}, {"do": "fail"}]
    worker.start(str(queue.target), "ahead", "+1h", plan, client_clock=client_clock)
    first, failed = worker.finish()
    assert first is not None and first[0] == "E0001"
    ahead = engine == "sqlite" or client_clock
    expected = now(queue) + (HOUR if ahead else 0) + 1
    assert abs(failed[0] - expected) < 60, (failed, expected)
    assert queue.message("E0001").available_at == failed[0]


def stepped_during_a_lease(queue: Store, worker: Worker, lease: int, forge: bool = False) -> None:
    """A worker on the true clock claims E0001 and waits at ``claimed``; the caller steps its clock."""
    queue.enqueue(line("E0001"))
    plan = [{"do": "claim", "lease": lease}, {"do": "pause", "name": "claimed"}, {"do": "time"},
            {"do": "complete", "forge": forge}, {"do": "claim", "lease": LONG}, {"do": "complete"}]
    worker.start(str(queue.target), "stepped", "+0", plan)
    worker.reach("claimed")


def test_a_clock_stepped_forward_during_a_lease(queue: Store, worker: Worker, engine: str) -> None:
    stepped_during_a_lease(queue, worker, LONG)
    worker.step("+1h")
    worker.go("claimed")
    claimed, _, faked, outcome, again, last = worker.finish()
    assert claimed[:2] == ["E0001", 1] and abs(faked - time.time() - HOUR) < 60
    if engine == "sqlite":
        # by its own clock its lease ended: the fence refuses it, it claims the message again
        assert outcome == ["lease_lost"] and again[:2] == ["E0001", 2] and last == ["done"]
    else:
        assert outcome == ["done"] and again is None and last == []
    assert effects(queue) == [("E0001", "stepped")]


def test_a_clock_stepped_back_during_a_lease(queue: Store, worker: Worker) -> None:
    outcome, mine = stepped_back_after_a_takeover(queue, worker)
    # by its clock its lease runs another hour, but it is no longer the lease: the fence refuses it
    assert outcome == ["lease_lost"] and mine == "done"
    assert effects(queue) == [("E0001", "correct")]


def test_negative_control_a_fence_blind_to_the_generation_lets_the_stepped_back_worker_ack(
    tmp_path: Path, worker: Worker,
) -> None:
    with Store(tmp_path / "q.sqlite3") as queue:
        queue.write(lambda tx: tx.execute(EFFECTS))
        outcome, mine = stepped_back_after_a_takeover(queue, worker, forge=True)
        assert outcome == ["done"] and mine == "lease_lost"  # the stale worker's ACK landed
        assert effects(queue) == [("E0001", "stepped")]


def stepped_back_after_a_takeover(queue: Store, worker: Worker, forge: bool = False) -> tuple[list[str], str]:
    """Its lease of one second ends, a correct worker takes E0001 over, then its clock steps back an hour."""
    stepped_during_a_lease(queue, worker, 1, forge)
    taken = claim_when_free(queue)
    assert taken.generation == 2
    worker.step("-1h")
    worker.go("claimed")
    _, _, faked, outcome, again, _ = worker.finish()
    assert abs(faked - time.time() + HOUR) < 60 and again is None
    return outcome, complete_in_own_transaction(queue, taken)


def test_the_limits_page_s_clock_table_names_tests_of_this_module() -> None:
    table = (Path(__file__).resolve().parents[2] / "docs" / "includes" / "clock-table.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(test_\w+)`", table))
    assert len(named) == 4 and named <= set(globals()), named - set(globals())
