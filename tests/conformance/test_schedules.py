"""Periodic jobs, on both engines: each period enqueued once, however many schedulers run.

The exactness test drives the period with a ModelClock in this process (two
stores, two connections, one clock); the real-process test starts two
``queue-core schedule --forever`` processes on a one-second period and checks
only what holds on any machine: no period twice, at least one period.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from queue_core import InvalidTime, ModelClock, Schedule, Store, enqueue_period
from queue_core.cli import main
from queue_core.errors import BatchRejected

from ..support import until

JOBS_IDS = r"[a-z0-9_-]+-[0-9]+"


@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str:
    """A database holding the queue ``jobs`` whose id rule takes NAME-<digits>."""
    where = str(request.getfixturevalue("postgres_url")) if engine == "postgresql" \
        else str(tmp_path / "queue.sqlite3")
    with Store(where, clock=ModelClock(0)) as store:
        store.create_queue("jobs", id_pattern=JOBS_IDS)
    return where


def cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main([str(a) for a in args], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_two_schedulers_enqueue_each_period_exactly_once(target: str) -> None:
    clock = ModelClock(1000)
    tick = Schedule("tick", 60, '{"report": "daily"}')
    with Store(target, clock=clock, queue="jobs") as one, Store(target, clock=clock, queue="jobs") as two:
        accepted: dict[str, int] = {}
        # both wake at every step of 7 s: each period is seen by both, several times
        while clock.now() < 1000 + 10 * 60:
            for store in (one, two):
                period = enqueue_period(store, tick)
                assert period.start == clock.now() - clock.now() % 60
                accepted[period.event_id] = accepted.get(period.event_id, 0) + period.result.accepted
            clock.advance(7)
        starts = range(960, 1000 + 10 * 60, 60)  # the period 1000 fell in, then each next one
        assert accepted == {f"tick-{start}": 1 for start in starts}
        stored = one.messages()
        assert [m.event_id for m in stored] == sorted(f"tick-{start}" for start in starts)
        assert {m.payload for m in stored} == {'{"report":"daily"}'}


def test_a_schedule_under_another_payload_is_a_conflict_not_a_second_message(target: str) -> None:
    # the negative control of the test above: the id alone does not deduplicate
    clock = ModelClock(1000)
    with Store(target, clock=clock, queue="jobs") as store:
        enqueue_period(store, Schedule("tick", 60, '{"n": 1}'))
        with pytest.raises(BatchRejected) as refused:
            enqueue_period(store, Schedule("tick", 60, '{"n": 2}'))
        assert refused.value.code == "event_conflict"
        assert len(store.messages()) == 1
        # another name is another schedule: its own message for the same period
        assert enqueue_period(store, Schedule("tock", 60, '{"n": 2}')).result.accepted == 1


def test_schedule_once_from_the_command_line_and_its_priority(target: str) -> None:
    run = ("--db", target, "--queue", "jobs", "schedule", "tick", "--every", "1m",
           "--payload", '{"n": 1}', "--priority", 9)
    status, out, err = cli(*run, "--now", 1019)
    assert (status, err) == (0, "")
    assert json.loads(out) == {"event_id": "tick-960", "start": 960, "accepted": 1, "duplicates": 0}
    assert json.loads(cli(*run, "--now", 1019)[1])["duplicates"] == 1
    assert json.loads(cli(*run, "--now", 1020)[1])["event_id"] == "tick-1020"
    with Store(target, clock=ModelClock(1020), create=False, queue="jobs") as store:
        assert [(m.event_id, m.priority) for m in store.messages()] == [("tick-1020", 9), ("tick-960", 9)]


@pytest.mark.parametrize("queue, name, options, said", [
    ("default", "tick", [], "a schedule needs a queue of its own"),
    ("jobs", "Tick", [], "queue jobs refuses the schedule's event id 'Tick-0'"),
    ("jobs", "tick", ["--payload", "[1]"], "payload must be a JSON object"),
    ("jobs", "tick", ["--payload", "{"], "payload is not JSON"),
])
def test_a_schedule_the_queue_cannot_take_is_refused_before_anything_is_written(
    target: str, queue: str, name: str, options: list[str], said: str
) -> None:
    status, out, err = cli("--db", target, "--queue", queue, "--now", 1000, "schedule", name,
                           "--every", 60, "--payload", '{"n": 1}', *options)
    assert (status, out) == (2, "") and err.startswith("queue-core: invalid_time: ") and said in err, err
    for each in ("default", "jobs"):
        with Store(target, clock=ModelClock(1000), create=False, queue=each) as store:
            assert store.messages() == []


@pytest.mark.one_engine
@pytest.mark.parametrize("options, said", [
    (["--every", "0"], "argument --every: expected a period of 1.."),
    (["--every", "soon"], "argument --every: expected an age such as"),
    (["--every", "60", "--forever", "--now", "5"], "--forever waits on the system clock"),
])
def test_the_command_line_refuses_a_bad_period(tmp_path: Path, options: list[str], said: str) -> None:
    # refused before a database is opened: none is made
    status, out, err = cli("--db", tmp_path / "q.sqlite3", "schedule", "tick", "--payload", "{}", *options)
    assert (status, out) == (2, "") and said in err and "Traceback" not in err
    assert not (tmp_path / "q.sqlite3").exists()


@pytest.mark.one_engine
def test_a_schedule_checks_its_queue_s_id_rule() -> None:
    from queue_core import QueueSettings
    from queue_core.queues import DEFAULT_SETTINGS
    from queue_core.schedules import check_schedule

    jobs = QueueSettings("jobs", JOBS_IDS, 3, 30, 10_000)
    check_schedule(Schedule("tick", 60, "{}"), jobs)  # accepted: no exception
    with pytest.raises(InvalidTime, match="a queue of its own"):
        check_schedule(Schedule("tick", 60, "{}"), DEFAULT_SETTINGS)
    short = QueueSettings("jobs", r"[a-z]+-[0-9]{1,4}", 3, 30, 10_000)  # takes tick-0, not a real start
    with pytest.raises(InvalidTime, match="refuses the schedule's event id"):
        check_schedule(Schedule("tick", 60, "{}"), short)


def scheduler(folder: Path, target: str, number: int) -> tuple[subprocess.Popen[str], Path]:
    """A real ``queue-core schedule --forever`` process; its stdout goes to a file."""
    out = folder / f"scheduler-{number}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "queue_core", "--db", target, "--queue", "jobs", "schedule", "tick",
         "--every", "1", "--payload", '{"n": 1}', "--forever"],
        cwd=folder, stdout=out.open("w"), stderr=subprocess.PIPE, text=True)
    return proc, out


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines() if text.endswith("}")]


@pytest.mark.timeout(120)
def test_two_real_schedulers_never_enqueue_a_period_twice(target: str, tmp_path: Path) -> None:
    runs = [scheduler(tmp_path, target, number) for number in (1, 2)]
    try:
        # each has enqueued (or found) a period, and so handles signals; then a second period exists
        until(lambda: all(lines(out) for _, out in runs), timeout=60, what="a scheduler printed nothing")
        with Store(target, create=False, queue="jobs") as store:
            until(lambda: len(store.messages()) >= 2, timeout=60, what="no second period")
    finally:
        for proc, _ in runs:
            proc.send_signal(signal.SIGTERM)
        results = [(proc.wait(timeout=60), proc.stderr.read() if proc.stderr else "") for proc, _ in runs]
    assert results == [(0, ""), (0, "")]  # SIGTERM: a normal stop, between two periods
    accepted: dict[str, int] = {}
    for _, out in runs:
        for period in lines(out):
            accepted[period["event_id"]] = accepted.get(period["event_id"], 0) + period["accepted"]
    with Store(target, create=False, queue="jobs") as store:
        stored = {m.event_id: m for m in store.messages()}
    # every period one of them enqueued is stored once; none was accepted twice
    assert set(accepted) == set(stored) and set(accepted.values()) == {1}
    assert len(stored) >= 2 and all(event_id == f"tick-{int(event_id[5:])}" for event_id in stored)
