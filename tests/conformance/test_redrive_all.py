"""Operations in bulk: every state in ``status``, and ``redrive --all`` (``Store.redrive_all``).

Runs on both engines (tests/conformance/conftest.py); only the clock is modelled.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import Handler, LeaseLost, ModelClock, Outcome, Store
from queue_core.values import STATES

from ..support import batch, line

QUEUE_CORE = [sys.executable, "-m", "queue_core"]


def kill(store: Store, *event_ids: str) -> None:
    """Enqueue ``event_ids`` with an unknown category and work them: dead at once."""
    store.enqueue(batch(*(line(event_id, "toy") for event_id in event_ids)))
    for _ in event_ids:
        assert store.complete(store.claim(), Handler()).outcome is Outcome.DEAD


def test_status_reports_every_state_zero_where_none(store: Store) -> None:
    empty = store.status()
    assert list(empty.messages) == list(STATES) and set(empty.messages.values()) == {0}
    assert empty.messages["ready"] == 0  # the new user's KeyError
    store.enqueue(line("E0001"))
    counts = store.status().messages
    assert dict(counts) == {"ready": 1, "leased": 0, "done": 0, "dead": 0}
    assert list(store.metrics().messages) == list(STATES)
    assert [list(c.messages) for _, c in store.queues()] == [list(STATES)]


def test_redrive_all_redrives_every_dead_message_and_nothing_else(store: Store, clock: ModelClock) -> None:
    kill(store, "E0001", "E0003")
    store.enqueue(batch(line("E0002"), line("E0004")))
    lease = store.claim()  # E0002 leased
    store.complete(lease, Handler())  # done
    leased = store.claim()  # E0004 leased
    clock.set(1500)
    before = {m.event_id: m for m in store.messages()}
    assert store.redrive_all() == ["E0001", "E0003"]
    after = {m.event_id: m for m in store.messages()}
    assert [(after[i].state, after[i].attempts, after[i].available_at) for i in ("E0001", "E0003")] == [
        ("ready", 0, 1500), ("ready", 0, 1500)]
    assert all(after[i].generation == before[i].generation for i in after)  # the fence is kept
    assert (after["E0002"].state, after["E0004"].state) == ("done", "leased")
    assert store.redrive_all() == []  # none is dead any more
    assert leased is not None


def test_redrive_all_filters_by_error_code(store: Store) -> None:
    kill(store, "E0001", "E0002")
    store.enqueue(line("E0003"))

    def permanent(tx: object, message: object) -> None:
        from queue_core import PermanentFailure

        raise PermanentFailure("bad_reference", "no such account")

    assert store.complete(store.claim(), permanent).outcome is Outcome.DEAD
    assert store.redrive_all("no_such_code") == []
    assert store.redrive_all("bad_reference") == ["E0003"]
    assert store.message("E0001").state == "dead"  # invalid_payload: not this code
    assert store.redrive_all("invalid_payload") == ["E0001", "E0002"]


def test_a_worker_of_the_previous_cycle_cannot_ack_after_redrive_all(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    stale = None
    for _ in range(3):  # three leases, all run out: dead
        stale = store.claim(lease_seconds=2)
        clock.advance(2)
    assert store.claim() is None and store.message("E0001").state == "dead"
    assert store.redrive_all("lease_expired") == ["E0001"]
    fresh = store.claim(lease_seconds=100)
    assert stale is not None and fresh is not None and fresh.generation == stale.generation + 1
    with pytest.raises(LeaseLost):
        store.complete(stale, Handler())
    assert store.complete(fresh, Handler()).outcome is Outcome.DONE


def test_redrive_all_goes_in_chunks_once_over_each_message(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import queue_core.claims

    monkeypatch.setattr(queue_core.claims, "REDRIVE_CHUNK", 3)  # 8 dead: chunks of 3, 3, 2
    ids = [f"E{n:04d}" for n in range(1, 9)]
    kill(store, *ids)
    # the statement starts after the id it is given: a message redriven by an
    # earlier chunk, dead again by now, is not redriven twice in one run
    assert store.write(lambda tx: store._redrive_chunk(tx, None, "E0006")) == ids[6:]
    seen: list[tuple[str, list[str]]] = []
    real = store._redrive_chunk

    def chunk(tx, code, after):  # type: ignore[no-untyped-def]
        got = real(tx, code, after)
        seen.append((after, got))
        return got

    monkeypatch.setattr(store, "_redrive_chunk", chunk)
    assert store.redrive_all() == ids[:6]
    # one pass, in event id order, each chunk after the last id of the one before
    assert seen == [("", ids[:3]), ("E0003", ids[3:6]), ("E0006", [])]
    assert store.status().count("ready") == 8


def test_redrive_all_tx_is_all_or_nothing_in_the_callers_transaction(store: Store) -> None:
    kill(store, "E0001", "E0002")
    with pytest.raises(RuntimeError):
        with store.transaction() as tx:
            assert store.redrive_all_tx(tx) == ["E0001", "E0002"]
            raise RuntimeError("the caller changes its mind")
    assert store.status().count("dead") == 2  # rolled back, both
    with store.transaction() as tx:
        assert store.redrive_all_tx(tx) == ["E0001", "E0002"]
    assert store.status().count("ready") == 2


@pytest.mark.one_engine
@pytest.mark.parametrize("code, error", [(7, TypeError), ("", ValueError), ("x" * 201, ValueError)])
def test_redrive_all_refuses_a_bad_code_before_any_transaction(tmp_path: Path, code: object,
                                                              error: type[Exception]) -> None:
    with Store(tmp_path / "q.sqlite3") as store:
        with pytest.raises(error, match="code"):
            store.redrive_all(code)  # type: ignore[arg-type]


@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str:
    """What ``--db`` names: a file in tmp_path, or a fresh PostgreSQL database."""
    if engine == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "queue.sqlite3")


def cli(target: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QUEUE_CORE, "--db", target, "--now", "1000", *args], capture_output=True,
                          text=True, input=stdin, timeout=120)


def test_the_cli_redrives_all_or_by_code_and_prints_how_many(target: str) -> None:
    enqueued = cli(target, "enqueue", "-", stdin=batch(line("E0001", "toy"), line("E0002", "toy"), line("E0003")))
    assert enqueued.returncode == 0, enqueued.stderr
    assert cli(target, "work").returncode == 0
    assert json.loads(cli(target, "redrive", "--all", "--code", "lease_expired").stdout) == {
        "redriven": [], "count": 0}
    proc = cli(target, "redrive", "--all", "--code", "invalid_payload")
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"redriven": ["E0001", "E0002"], "count": 2}
    assert json.loads(cli(target, "status", "--json").stdout)["messages"] == {
        "ready": 2, "leased": 0, "done": 1, "dead": 0}
    assert cli(target, "work").returncode == 0
    assert json.loads(cli(target, "redrive", "E0001").stdout) == {"redriven": ["E0001"], "count": 1}
    for wrong, said in ((["redrive"], "one of the arguments EVENT_ID --all is required"),
                        (["redrive", "E0002", "--all"], "not allowed with argument EVENT_ID"),
                        (["redrive", "E0002", "--code", "invalid_payload"], "--code filters --all"),
                        (["redrive", "--all", "--code", ""], "--code")):
        refused = cli(target, *wrong)
        assert refused.returncode == 2 and said in refused.stderr and "Traceback" not in refused.stderr, wrong
    assert json.loads(cli(target, "status", "--json").stdout)["messages"]["dead"] == 1  # E0002 untouched
