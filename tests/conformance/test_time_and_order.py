"""Jobs at a time (``at``) and per-message priority, on both engines.

The claim takes the highest priority first among the available messages, then
the oldest, then the event id; ``at`` is an absolute time under the same rule
as a delay (at most ``MAX_DELAY_SECONDS`` ahead). Only the clock is modelled,
except where a test uses the engine's own clock on purpose.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from queue_core import MAX_DELAY_SECONDS, ModelClock, Store
from queue_core.cli import main
from queue_core.errors import InvalidTime, QueueError

from ..support import batch, line


@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str:
    """What ``--db`` names: a file in tmp_path, or a fresh PostgreSQL database."""
    if engine == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "queue.sqlite3")


def claimed(store: Store) -> list[str]:
    """Claim until nothing is available; the event ids in claim order (each leased for an hour)."""
    order = []
    while (lease := store.claim(lease_seconds=3600)) is not None:
        order.append(lease.event_id)
    return order


def cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main([str(a) for a in args], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------ priority


def test_the_claim_takes_the_highest_priority_first_among_available_messages(
    store: Store, clock: ModelClock
) -> None:
    store.enqueue(line("E0001"))  # priority 0, the default
    store.enqueue(line("E0002"), priority=5, delay=10)  # the highest, not yet available
    store.enqueue(line("E0003"), priority=-5)
    store.enqueue(batch(line("E0004"), line("E0005")), priority=5)
    assert [m.priority for m in store.messages()] == [0, 5, -5, 5, 5]
    # among equal priorities, the event id (they became available together)
    assert claimed(store) == ["E0004", "E0005", "E0001", "E0003"]
    clock.advance(10)
    assert claimed(store) == ["E0002"]


def test_equal_priorities_keep_the_order_of_availability(store: Store, clock: ModelClock) -> None:
    # the negative control of the test above: without priorities, the oldest first
    store.enqueue(line("E0003"))
    clock.advance(1)
    store.enqueue(batch(line("E0002"), line("E0001")))
    clock.advance(1)
    assert claimed(store) == ["E0003", "E0001", "E0002"]


def test_a_duplicate_keeps_the_stored_time_and_priority(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"), priority=3)
    result = store.enqueue(line("E0001"), priority=-3, at=clock.now() + 50)
    assert (result.accepted, result.duplicates) == (0, 1)
    message = store.message("E0001")
    assert (message.priority, message.available_at) == (3, clock.now())


@pytest.mark.parametrize("priority, error", [
    (101, ValueError), (-101, ValueError), (True, TypeError), ("1", TypeError), (1.0, TypeError),
])
def test_a_priority_outside_its_range_is_refused_and_nothing_written(
    store: Store, priority: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="priority"):
        store.enqueue(line("E0001"), priority=priority)
    with pytest.raises(error, match="priority"):
        store.send("E0001", {"category": "book", "amount_cents": 100}, priority=priority)
    assert store.messages() == []


def test_the_schema_refuses_a_priority_outside_its_range(store: Store) -> None:
    store.enqueue(line("E0001"), priority=100)
    store.enqueue(line("E0002"), priority=-100)  # both bounds are allowed
    with pytest.raises(QueueError):
        with store.transaction() as tx:
            tx.execute("UPDATE messages SET priority = 101 WHERE event_id = 'E0001'")
    assert [m.priority for m in store.messages()] == [100, -100]


# ------------------------------------------------------------------------ at


def test_at_is_an_absolute_time(store: Store, clock: ModelClock) -> None:
    now = clock.now()
    store.enqueue(line("E0001"), at=now + 500)
    # a datetime with a timezone; a fraction of a second rounds up, never earlier
    store.enqueue(line("E0002"), at=datetime.fromtimestamp(now + 20.25, timezone.utc))
    store.send("E0003", {"category": "book", "amount_cents": 1}, at=now - 100)  # past: now
    assert [m.available_at for m in store.messages()] == [now + 500, now + 21, now]
    assert claimed(store) == ["E0003"]
    clock.set(now + 21)
    assert claimed(store) == ["E0002"]
    clock.set(now + 500)
    assert claimed(store) == ["E0001"]


def test_at_has_the_delay_s_limit(store: Store, clock: ModelClock) -> None:
    now = clock.now()
    store.enqueue(line("E0001"), at=now + MAX_DELAY_SECONDS)  # the last second allowed
    with pytest.raises(InvalidTime, match=f"at most {MAX_DELAY_SECONDS} seconds") as refused:
        store.enqueue(line("E0002"), at=now + MAX_DELAY_SECONDS + 1)
    assert refused.value.code == "invalid_time"
    assert [m.event_id for m in store.messages()] == ["E0001"]


@pytest.mark.parametrize("at, delay, said", [
    (datetime(2030, 1, 1), 0, "timezone"),  # naive: whose nine o'clock?
    (2000, 5, "delay or at, not both"),
    (-1, 0, "Unix seconds"),
])
def test_an_unusable_at_is_refused_and_nothing_written(
    store: Store, at: Any, delay: int, said: str
) -> None:
    with pytest.raises(InvalidTime, match=said):
        store.enqueue(line("E0001"), at=at, delay=delay)
    with pytest.raises(ValueError, match=said):  # InvalidTime is a ValueError too
        store.send("E0001", {"category": "book", "amount_cents": 1}, at=at, delay=delay)
    with pytest.raises(TypeError, match="datetime with a timezone or Unix seconds"):
        store.enqueue(line("E0001"), at="2030-01-01T00:00:00Z")  # type: ignore[arg-type]
    assert store.messages() == []


def test_at_with_the_engine_s_own_clock_needs_no_conversion(target: str) -> None:
    # No model clock: SQLite reads this host's, PostgreSQL the server's. Unix
    # seconds on both, so an aware datetime compares with either as it is.
    with Store(target) as store:
        hour = timedelta(hours=1)
        store.enqueue(line("E0001"), at=datetime.now(timezone.utc) - hour)
        store.enqueue(line("E0002"), at=datetime.now(timezone.utc) + hour)
        store.enqueue(line("E0003"), at=int(time.time()) + 3600)
        assert claimed(store) == ["E0001"]
        ahead = store.message("E0002").available_at - time.time()
        assert 3500 < ahead <= 3601  # an hour, whichever clock read it


# ----------------------------------------------------------------------- CLI


def test_enqueue_at_and_priority_on_the_command_line(target: str, tmp_path: Path) -> None:
    jsonl = tmp_path / "batch.jsonl"
    jsonl.write_text(batch(line("E0001"), line("E0002")), encoding="utf-8")
    assert cli("--db", target, "--now", 1000, "enqueue", jsonl, "--at", "1970-01-01T00:20:00+00:00",
               "--priority", -7)[:2] == (0, '{"accepted": 2, "duplicates": 0}\n')
    jsonl.write_text(batch(line("E0003")), encoding="utf-8")
    assert cli("--db", target, "--now", 1000, "enqueue", jsonl, "--at", 1100, "--priority", 7)[0] == 0
    with Store(target, clock=ModelClock(1200), create=False) as store:
        assert [(m.available_at, m.priority) for m in store.messages()] == [(1200, -7), (1200, -7), (1100, 7)]
        assert claimed(store) == ["E0003", "E0001", "E0002"]


@pytest.mark.parametrize("options, said", [
    (["--at", "2026-12-05T09:00:00"], "argument --at: '2026-12-05T09:00:00' has no timezone"),
    (["--at", "tomorrow"], "argument --at: expected ISO 8601 with a timezone"),
    (["--at", "2000", "--delay", "5"], "argument --delay: not allowed with argument --at"),
    (["--priority", "101"], "argument --priority: expected a number in -100..100"),
    (["--priority", "1.5"], "argument --priority: expected a whole number"),
])
def test_the_command_line_refuses_a_bad_time_or_priority(
    target: str, tmp_path: Path, options: list[str], said: str
) -> None:
    jsonl = tmp_path / "batch.jsonl"
    jsonl.write_text(batch(line("E0001")), encoding="utf-8")
    Store(target, clock=ModelClock(1000)).close()  # an existing queue: nothing may change it
    status, out, err = cli("--db", target, "--now", 1000, "enqueue", jsonl, *options)
    assert (status, out) == (2, "") and said in err and "Traceback" not in err
    with Store(target, clock=ModelClock(1000), create=False) as store:
        assert store.messages() == []


def test_the_command_line_refuses_an_at_too_far_ahead_with_its_code(target: str, tmp_path: Path) -> None:
    jsonl = tmp_path / "batch.jsonl"
    jsonl.write_text(batch(line("E0001")), encoding="utf-8")
    status, out, err = cli("--db", target, "--now", 1000, "enqueue", jsonl, "--at", 1001 + MAX_DELAY_SECONDS)
    assert (status, out) == (2, "") and err.startswith("queue-core: invalid_time: at ")
    assert "Traceback" not in err


@pytest.mark.one_engine
def test_the_help_names_the_new_options() -> None:
    # a value of the parser alone: no engine
    for command, options in (("enqueue", ("--at TIME", "--priority N")),
                             ("schedule", ("--every PERIOD", "--payload JSON", "--forever"))):
        proc = subprocess.run([sys.executable, "-m", "queue_core", command, "--help"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and all(option in proc.stdout for option in options), proc.stdout

