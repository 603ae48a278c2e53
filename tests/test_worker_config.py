"""``WorkerConfig``: a worker's settings, each checked once with an error that names it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from queue_core import Handler, ModelClock, Store, WorkerConfig, WorkSummary, ledger, work
from queue_core.worker import WorkOptions

LINE = '{"event_id": "E%04d", "payload": {"category": "book", "amount_cents": 100}}\n'


@pytest.fixture
def store(tmp_path: Any) -> Iterator[Store]:
    with Store(tmp_path / "q.sqlite3", clock=ModelClock(1000)) as opened:
        ledger.install(opened)
        opened.enqueue("".join(LINE % n for n in range(1, 6)))
        yield opened


@pytest.mark.parametrize("field, value, error", [
    ("lease_seconds", 0, ValueError), ("lease_seconds", "30", TypeError), ("lease_seconds", True, TypeError),
    ("max_messages", -1, ValueError), ("max_messages", 2.0, TypeError), ("max_messages", False, TypeError),
    ("batch", 0, ValueError), ("batch", "8", ValueError), ("batch", True, ValueError),
    ("heartbeat_every", 0, ValueError), ("heartbeat_every", True, ValueError), ("heartbeat_every", "1", ValueError),
    ("forever", 1, TypeError), ("forever", "yes", TypeError),
    ("poll_seconds", 0, ValueError), ("poll_seconds", 3601, ValueError), ("poll_seconds", None, ValueError),
])
def test_a_bad_field_is_refused_with_its_name(field: str, value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=field):
        WorkerConfig(**{field: value})  # type: ignore[arg-type]


def test_a_heartbeat_at_or_above_a_given_lease_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match=r"heartbeat_every .* below lease_seconds \(10\), got 10"):
        WorkerConfig(lease_seconds=10, heartbeat_every=10)
    assert WorkerConfig(lease_seconds=10, heartbeat_every=9.5).heartbeat_every == 9.5


def test_the_options_are_the_config_s_fields() -> None:
    assert set(WorkOptions.__annotations__) == set(WorkerConfig.__dataclass_fields__)


def test_config_and_keywords_make_the_same_run(tmp_path: Any) -> None:
    results = []
    for name, kwargs in (("a", {"config": WorkerConfig(batch=2, max_messages=3)}),
                         ("b", {"batch": 2, "max_messages": 3})):
        with Store(tmp_path / f"{name}.sqlite3", clock=ModelClock(1000)) as store:
            ledger.install(store)
            store.enqueue("".join(LINE % n for n in range(1, 6)))
            results.append(work(store, Handler(), **kwargs))  # type: ignore[arg-type]
    assert results[0] == results[1] == WorkSummary(claimed=3, done=3)


def test_work_refuses_a_config_with_keywords_an_unknown_keyword_and_a_wrong_config(store: Store) -> None:
    with pytest.raises(TypeError, match="not both: got config and batch"):
        work(store, Handler(), WorkerConfig(), batch=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'lease'"):
        work(store, Handler(), lease=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="config must be a WorkerConfig, got dict"):
        work(store, Handler(), {"batch": 2})  # type: ignore[arg-type]
    assert store.status().count("ready") == 5  # nothing was claimed


def test_a_frozen_config_is_shared_between_runs(store: Store) -> None:
    config = WorkerConfig(max_messages=2, forever=True, poll_seconds=0.01)
    with pytest.raises(AttributeError):
        config.batch = 4  # type: ignore[misc]
    stop = threading.Event()
    assert work(store, Handler(), config, stop=stop) == WorkSummary(claimed=2, done=2)
    assert work(store, Handler(), config, stop=stop) == WorkSummary(claimed=2, done=2)


@pytest.mark.parametrize("code, waited_out", [("connection_lost", True), ("cannot_connect", True),
                                              ("database_busy", True), ("io_error", False)])
def test_a_forever_worker_waits_out_a_passing_error_doubling_its_pause_to_the_cap(
        store: Store, monkeypatch: pytest.MonkeyPatch, code: str, waited_out: bool) -> None:
    # The pages say a --forever worker waits out connection_lost, cannot_connect and
    # database_busy, pausing twice as long each time up to MAX_PAUSE_SECONDS, and that
    # any other storage error ends it. The cap is made small here so that the test waits
    # milliseconds; the negative control is io_error, which is not waited out.
    from queue_core import StorageError, worker

    monkeypatch.setattr(worker, "MAX_PAUSE_SECONDS", 0.08)
    calls = 0

    def failing_turn(*args: object) -> bool:
        nonlocal calls
        calls += 1
        raise StorageError("the database went away", code=code)

    monkeypatch.setattr(worker, "_turn", failing_turn)
    stop = threading.Event()
    pauses: list[float] = []

    def on_error(error: StorageError, pause: float) -> None:
        assert error.code == code
        pauses.append(pause)
        if len(pauses) == 6:
            stop.set()

    if not waited_out:
        with pytest.raises(StorageError) as raised:
            work(store, Handler(), forever=True, poll_seconds=0.01, stop=stop, on_error=on_error)
        assert (raised.value.code, calls, pauses) == (code, 1, [])
        return
    assert work(store, Handler(), forever=True, poll_seconds=0.01, stop=stop, on_error=on_error) == WorkSummary()
    assert pauses == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]
    # a finite worker waits out nothing: the first such error ends it
    with pytest.raises(StorageError):
        work(store, Handler(), on_error=on_error)
