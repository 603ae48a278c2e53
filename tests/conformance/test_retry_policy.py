"""Each queue's retry policy: base, cap and jitter, a handler's retry_after, the attempt bound.

Runs on both engines (tests/conformance/conftest.py): the delays are read
back from the rows each engine stored; only the clock is modelled.
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    MAX_ATTEMPTS_LIMIT,
    InvalidQueue,
    Message,
    ModelClock,
    Outcome,
    QueueSettings,
    Store,
    TemporaryFailure,
    Tx,
    backoff_seconds,
    work,
)
from queue_core.engines import APPLICATION_ID
from queue_core.engines import postgres as postgres_engine
from queue_core.engines import sqlite as sqlite_engine
from queue_core.queues import DEFAULT_SETTINGS, NEW_QUEUE_BACKOFF_JITTER, SETTING_BOUNDS
from queue_core.rules import MAX_BACKOFF_BASE_SECONDS, MAX_DELAY_SECONDS, retry_draw

from ..support import line


def refuse(retry_after: float | None = None) -> Any:
    def handler(tx: Tx, message: Message) -> None:
        raise TemporaryFailure("rate_limited", "429", retry_after=retry_after)
    return handler


def delays(queue: Store, clock: ModelClock, event_id: str, failures: int, **fail: Any) -> list[int]:
    """Claim ``event_id`` and fail it ``failures`` times; the delay each failure set."""
    seen = []
    for _ in range(failures):
        lease = queue.claim()
        assert lease is not None and lease.event_id == event_id
        done = queue.fail(lease, "timeout", **fail)
        assert done.outcome is Outcome.RETRY and done.available_at is not None
        seen.append(done.available_at - clock.now())
        clock.set(done.available_at)
    return seen


@pytest.fixture
def slow(store: Store, clock: ModelClock) -> Iterator[Store]:
    """A queue of 10 claims: 5 s doubling to at most 60 s, jitter 0.5."""
    store.create_queue("slow", id_pattern=r"s-[0-9]+", max_attempts=10, backoff_base_seconds=5,
                       backoff_max_seconds=60, backoff_jitter=0.5)
    with Store(store.target, clock=clock, queue="slow") as queue:
        yield queue


# ------------------------------------------------------------- the delays

def test_a_created_queue_waits_base_doubling_to_its_cap_less_its_jitter(slow: Store, clock: ModelClock) -> None:
    slow.send("s-1", {"n": 1})
    got = delays(slow, clock, "s-1", 9)
    undisturbed = [5, 10, 20, 40, 60, 60, 60, 60, 60]  # min(60, 5 * 2**(n-1))
    for attempt, (delay, full) in enumerate(zip(got, undisturbed), 1):
        assert math.ceil(full * 0.5) <= delay <= full, (attempt, got)
        # the jitter is this attempt's own draw (generation == attempt: no redrive here)
        assert delay == full - math.floor(full * 0.5 * retry_draw("slow", "s-1", attempt))
    assert got != undisturbed  # the jitter took something off
    assert slow.fail(slow.claim(), "timeout").outcome is Outcome.DEAD  # the tenth claim


def test_messages_failed_together_come_back_apart(slow: Store, clock: ModelClock) -> None:
    for n in range(20):
        slow.send(f"s-{n}", {"n": n})
    due = {slow.fail(slow.claim(), "outage").available_at for _ in range(20)}
    assert len(due) > 1 and all(clock.now() + 3 <= at <= clock.now() + 5 for at in due if at)


def test_without_jitter_the_delays_are_exact(store: Store, clock: ModelClock) -> None:
    store.create_queue("exact", id_pattern=r"x-[0-9]+", max_attempts=6, backoff_base_seconds=3,
                       backoff_max_seconds=20, backoff_jitter=0)
    with Store(store.target, clock=clock, queue="exact") as queue:
        queue.send("x-1", {})
        assert delays(queue, clock, "x-1", 5) == [3, 6, 12, 20, 20]


def test_the_default_queue_still_waits_one_then_two_seconds(store: Store, clock: ModelClock) -> None:
    assert (store.settings.backoff_base_seconds, store.settings.backoff_jitter) == (1, 0.0)
    assert store.queue_settings("default") == DEFAULT_SETTINGS  # as stored
    store.enqueue(line("E0001"))
    assert delays(store, clock, "E0001", 2) == [1, 2]
    assert store.fail(store.claim(), "timeout").outcome is Outcome.DEAD


def test_a_new_queue_gets_jitter_and_an_hour_cap_by_default(store: Store) -> None:
    made = store.create_queue("plain", id_pattern=r"p-[0-9]+")
    assert (made.backoff_base_seconds, made.backoff_max_seconds, made.backoff_jitter) == (
        1, 3600, NEW_QUEUE_BACKOFF_JITTER)
    assert store.queue_settings("plain") == made


# --------------------------------------------------------------- retry_after

def test_retry_after_replaces_the_backoff_within_the_cap(slow: Store, clock: ModelClock) -> None:
    slow.send("s-1", {})
    first = slow.complete(slow.claim(), refuse(retry_after=42.5))
    assert (first.outcome, first.available_at) == (Outcome.RETRY, 1043)  # rounded up, no jitter
    clock.set(1043)
    second = slow.complete(slow.claim(), refuse(retry_after=86_400))
    assert second.available_at == 1043 + 60  # beyond the cap: the cap
    clock.set(1103)
    third = slow.fail(slow.claim(), "rate_limited", retry_after=0)
    assert third.available_at == 1103  # due at once, as asked
    row = slow.message("s-1")
    assert (row.state, row.available_at, row.last_error) == ("ready", 1103, "rate_limited")


def test_retry_after_reaches_the_store_on_the_workers_path(slow: Store, clock: ModelClock) -> None:
    slow.send("s-1", {})
    assert work(slow, refuse(retry_after=7)).retried == 1
    assert slow.message("s-1").available_at == clock.now() + 7


@pytest.mark.one_engine
@pytest.mark.parametrize("bad", [-1, -0.5, float("nan"), float("inf"), "5", True])
def test_a_bad_retry_after_is_refused_when_the_failure_is_made(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="retry_after"):
        TemporaryFailure("rate_limited", retry_after=bad)
    assert TemporaryFailure("rate_limited", retry_after=1.5).retry_after == 1.5  # the control


def test_a_bad_retry_after_given_to_fail_changes_nothing(store: Store) -> None:
    store.enqueue(line("E0001"))
    lease = store.claim()
    with pytest.raises(ValueError, match="retry_after"):
        store.fail(lease, "timeout", retry_after=-3)
    assert store.message("E0001").state == "leased"


# ---------------------------------------------------------- the attempt bound

@pytest.mark.one_engine
def test_the_delay_never_overflows_at_the_largest_attempt_base_and_cap() -> None:
    cap = SETTING_BOUNDS["backoff_max_seconds"][1]
    assert (SETTING_BOUNDS["backoff_base_seconds"][1], cap) == (MAX_BACKOFF_BASE_SECONDS, MAX_DELAY_SECONDS)
    for attempt in (MAX_ATTEMPTS_LIMIT, 1_000, 10**9):
        assert backoff_seconds(attempt, base=MAX_BACKOFF_BASE_SECONDS, cap=cap, jitter=1, draw=0.999) >= 1
        assert backoff_seconds(attempt, base=MAX_BACKOFF_BASE_SECONDS, cap=cap) == cap
    assert backoff_seconds(64) == 3600  # it used to raise OverflowError at 64 with max_attempts=100
    assert backoff_seconds(2, base=3, cap=5, jitter=1, draw=0.5) == 3  # [0, 5]: 5 - floor(2.5)


def test_the_last_attempt_of_the_largest_budget_waits_the_largest_cap(store: Store, clock: ModelClock) -> None:
    cap = MAX_DELAY_SECONDS
    store.create_queue("long", id_pattern=r"l-[0-9]+", max_attempts=MAX_ATTEMPTS_LIMIT,
                       backoff_base_seconds=MAX_BACKOFF_BASE_SECONDS, backoff_max_seconds=cap, backoff_jitter=0)
    with Store(store.target, clock=clock, queue="long") as queue:
        queue.send("l-1", {})
        got = delays(queue, clock, "l-1", MAX_ATTEMPTS_LIMIT - 1)
        assert got[0] == MAX_BACKOFF_BASE_SECONDS and max(got) == got[-1] == cap
        assert got == sorted(got)  # doubling, then the cap: never wrapped around
        assert queue.fail(queue.claim(), "timeout").outcome is Outcome.DEAD
        assert queue.message("l-1").attempts == MAX_ATTEMPTS_LIMIT


def test_store_and_create_queue_refuse_a_budget_over_the_bound(store: Store) -> None:
    with pytest.raises(ValueError, match=rf"max_attempts must be a whole number 1\.\.{MAX_ATTEMPTS_LIMIT}"):
        Store(store.target, max_attempts=MAX_ATTEMPTS_LIMIT + 1)
    with pytest.raises(InvalidQueue, match="max_attempts") as refused:
        store.create_queue("huge", max_attempts=MAX_ATTEMPTS_LIMIT + 1)
    assert refused.value.code == "invalid_setting" and store.queue_settings("huge") is None
    with Store(store.target, max_attempts=MAX_ATTEMPTS_LIMIT) as most:  # the control: the bound itself
        assert most.max_attempts == MAX_ATTEMPTS_LIMIT


@pytest.mark.one_engine
@pytest.mark.parametrize(("setting", "value", "named"), [
    ("backoff_base_seconds", 0, "backoff_base_seconds must be a whole number 1..86,400"),
    ("backoff_max_seconds", MAX_DELAY_SECONDS + 1, "backoff_max_seconds must be a whole number"),
    ("backoff_jitter", 1.5, "backoff_jitter must be a fraction 0..1"),
    ("backoff_jitter", float("nan"), "backoff_jitter must be a fraction 0..1"),
    ("backoff_base_seconds", 7200, "backoff_base_seconds 7200 is above backoff_max_seconds 3600"),
])
def test_a_bad_policy_is_refused_naming_its_setting(setting: str, value: Any, named: str) -> None:
    from queue_core.queues import settings

    good: dict[str, Any] = {key: getattr(DEFAULT_SETTINGS, key) for key in SETTING_BOUNDS}
    good["backoff_jitter"] = 0.0
    assert isinstance(settings("q", id_pattern="q-.+", **good), QueueSettings)  # the control
    with pytest.raises(InvalidQueue, match=named.replace(".", r"\.")):
        settings("q", id_pattern="q-.+", **{**good, setting: value})


# ------------------------------------------------- a version-6 database migrates

def version_6(engine: str, target: Any) -> None:
    """A database as version 6 left it: migrations 1..6, the queue 'orders' of then, a retry due."""
    six = "INSERT INTO queues VALUES ('orders', 'o-.+', 20, 30, 10000)"
    if engine == "sqlite":
        with closing(sqlite3.connect(target, isolation_level=None)) as conn:
            conn.execute("PRAGMA foreign_keys = OFF")
            conn.execute("BEGIN IMMEDIATE")
            for version in range(1, 7):
                for statement in sqlite_engine.sql_statements(sqlite_engine.MIGRATIONS[version]):
                    conn.execute(statement)
            conn.execute(six)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("PRAGMA user_version = 6")
            conn.execute("COMMIT")
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("BEGIN")
        for version in range(2, 7):
            conn.execute(postgres_engine.MIGRATIONS[version])
        conn.execute(six)
        conn.execute("INSERT INTO queue_core_schema (application_id, version) VALUES (%s, 6)",
                     (APPLICATION_ID,))
        conn.execute("COMMIT")


@pytest.fixture
def old_target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Any:
    target = tmp_path / "v6.sqlite3" if engine == "sqlite" else request.getfixturevalue("postgres_url")
    version_6(engine, target)
    return target


def test_a_version_6_database_gets_the_policy_columns_with_their_defaults(
        old_target: Any, clock: ModelClock) -> None:
    assert sqlite_engine.SCHEMA_VERSION == postgres_engine.SCHEMA_VERSION > 6
    with Store(old_target, clock=clock, create=False) as store:
        assert store.queue_settings("default") == DEFAULT_SETTINGS
        orders = store.queue_settings("orders")
        assert orders == QueueSettings("orders", "o-.+", 20, 30, 10_000, 1, 3600, 0.0)
        store.enqueue(line("E0001"))
        assert delays(store, clock, "E0001", 2) == [1, 2]  # default's own, unchanged
    with Store(old_target, clock=clock, queue="orders") as queue:
        queue.send("o-1", {})
        # 20 claims: past the hour's cap every wait is the cap, no longer days or years
        assert delays(queue, clock, "o-1", 19)[-8:] == [2048] + [3600] * 7


# ---------------------------------------------------------- the command line

def cli(folder: Path, target: Any, *args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queue_core", "--db", str(target), "--now", "1000",
                           *map(str, args)], cwd=folder, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_the_command_line_creates_a_policy_and_lists_it(tmp_path: Path, store: Store) -> None:
    made = cli(tmp_path, store.target, "create", "slow", "--id-pattern", "s-[0-9]+", "--backoff-base", "5",
               "--backoff-max", "600", "--backoff-jitter", "0.5")
    assert made.returncode == 0, made.stderr
    policy = {"backoff_base_seconds": 5, "backoff_max_seconds": 600, "backoff_jitter": 0.5}
    assert json.loads(made.stdout).items() >= policy.items()
    assert store.queue_settings("slow") == QueueSettings("slow", "s-[0-9]+", 3, 30, 10_000, 5, 600, 0.5)
    listed = cli(tmp_path, store.target, "queues", "--json")
    assert [{key: q[key] for key in policy} for q in json.loads(listed.stdout)] == [
        {"backoff_base_seconds": 1, "backoff_max_seconds": 3600, "backoff_jitter": 0.0}, policy]
    text = cli(tmp_path, store.target, "queues").stdout
    assert "default  1 s doubling, at most 3600 s, no jitter" in text
    assert "slow     5 s doubling, at most 600 s, jitter 0.5" in text


@pytest.mark.parametrize(("args", "named"), [
    (("--backoff-base", "0"), "--backoff-base"),
    (("--backoff-max", "31622401"), "--backoff-max"),
    (("--backoff-jitter", "1.5"), "--backoff-jitter"),
    (("--backoff-jitter", "nan"), "--backoff-jitter"),
    (("--max-attempts", str(MAX_ATTEMPTS_LIMIT + 1)), "--max-attempts"),
    (("--backoff-base", "90", "--backoff-max", "60"), "--backoff-base 90 is above --backoff-max 60"),
])
def test_a_bad_policy_on_the_command_line_exits_2_naming_the_option(
        tmp_path: Path, store: Store, args: tuple[str, ...], named: str) -> None:
    refused = cli(tmp_path, store.target, "create", "slow", "--id-pattern", "s-[0-9]+", *args)
    assert refused.returncode == 2 and named in refused.stderr and "Traceback" not in refused.stderr
    assert store.queue_settings("slow") is None


def test_creating_the_default_queue_again_keeps_its_policy(tmp_path: Path, store: Store) -> None:
    assert store.create_queue("default") == DEFAULT_SETTINGS  # its own settings: no conflict
    again = cli(tmp_path, store.target, "create", "default")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False, again.stderr
    other = cli(tmp_path, store.target, "create", "default", "--backoff-jitter", "0.5")  # the control
    assert other.returncode == 2 and "queue_conflict" in other.stderr
