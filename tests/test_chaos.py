"""Random SIGKILLs of real queue-core processes, and eight workers on one write lock.

``queue_core.testing.chaos.chaos`` (the quick run; ``python scripts/chaos.py --long``
for a deeper one) and ``queue_core.testing.chaos.contention``. Each run leaves a
record in ``test-artifacts/evidence/`` that the page "How we know" shows.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from queue_core.store import BUSY_TIMEOUT_MS
from queue_core.testing import records
from queue_core.testing.chaos import QUICK, ChaosResult, ContentionResult, chaos, contention

RECORDS = Path(__file__).resolve().parent.parent / "test-artifacts" / "evidence"  # the page reads them here


@pytest.fixture(scope="module")
def random_kills(tmp_path_factory: pytest.TempPathFactory) -> ChaosResult:
    folder = tmp_path_factory.mktemp("chaos")
    began = time.monotonic()
    result = chaos(folder, **QUICK)
    records.save_record("chaos", QUICK, result, by="tests/test_chaos.py",
                        seconds=time.monotonic() - began, folder=RECORDS)
    return result


@pytest.fixture(scope="module")
def crowd(tmp_path_factory: pytest.TempPathFactory) -> ContentionResult:
    folder = tmp_path_factory.mktemp("contention")
    began = time.monotonic()
    result = contention(folder)
    records.save_record("contention", {}, result, by="tests/test_chaos.py",
                        seconds=time.monotonic() - began, folder=RECORDS)
    return result


def test_random_kills_lose_nothing_and_double_nothing(random_kills: ChaosResult) -> None:
    c = random_kills
    assert c.violations == (), f"seed {c.seed}"
    assert (c.losses, c.doubles) == (0, 0)
    assert c.total_cents == c.expected_cents
    assert c.done == c.valid_events
    assert c.dead == c.toys  # dead only for the reason that cannot be retried away
    assert c.ok


def test_random_kills_really_happened_over_thousands_of_events(random_kills: ChaosResult) -> None:
    c = random_kills
    assert c.events >= 2000
    assert c.rounds == QUICK["rounds"]
    assert c.worker_kills >= c.rounds // 2  # one to five tries per round, if a victim is alive
    assert c.worker_kills_with_the_file_open > 0


def test_no_process_failed_except_by_a_kill(random_kills: ChaosResult) -> None:
    c = random_kills
    assert c.worker_errors == 0
    assert c.tracebacks == 0
    assert c.clean_worker_exits + c.worker_kills == c.worker_processes


def test_eight_workers_wait_out_the_write_lock_and_exit_cleanly(crowd: ContentionResult) -> None:
    assert crowd.workers == 8
    if Path("/proc/self/fd").is_dir():  # how the run sees that a worker has the file open
        assert crowd.all_waiting_before_the_countdown
    assert crowd.lock_held_seconds > BUSY_TIMEOUT_MS / 1000  # longer than SQLite's own wait
    assert crowd.exit_statuses == (0,) * 8
    assert crowd.tracebacks == 0 and crowd.stderr_lines == 0


def test_eight_workers_share_the_work_without_loss_or_double(crowd: ContentionResult) -> None:
    assert crowd.violations == ()
    assert (crowd.losses, crowd.doubles) == (0, 0)
    assert crowd.done == crowd.claimed == crowd.events
    assert sum(share or 0 for share in crowd.shares_done) == crowd.events
    assert crowd.total_cents == crowd.expected_cents


def test_the_results_round_trip_through_their_json(random_kills: ChaosResult, crowd: ContentionResult) -> None:
    for result in (random_kills, crowd):
        data = json.loads(json.dumps(result.to_dict()))
        assert type(result).from_dict(data) == result
    saved = records.load_record("chaos", QUICK, folder=RECORDS)
    if saved is not None:  # a read-only tree keeps no record
        assert ChaosResult.from_dict(saved.result) == random_kills


def test_an_effect_insert_refused_by_the_unique_key_counts_as_a_double(tmp_path: Path) -> None:
    # A clash in the effect INSERT no longer escapes the worker: the store records it on the message
    # (handler_error, "IntegrityError: UNIQUE constraint failed ..."). The runs count it as a double.
    from queue_core import Handler, ModelClock, Store, ledger
    from queue_core.testing.chaos import _unique_key_refusals
    from queue_core.testing.invariants import read_file

    db = tmp_path / "q.sqlite3"
    store = Store(db, clock=ModelClock(1000))
    ledger.install(store)
    store.enqueue('{"event_id": "E0001", "payload": {"category": "pen", "amount_cents": 1}}\n')
    assert _unique_key_refusals(read_file(db)) == 0
    with store.transaction() as tx:  # a buggy client wrote the effect without the ACK
        tx.execute("INSERT INTO effects VALUES ('E0001', 'pen', 1)")
    lease = store.claim(2)
    assert lease is not None
    completion = store.complete(lease, Handler())
    assert (completion.outcome.value, completion.error) == ("retry", "handler_error")
    assert _unique_key_refusals(read_file(db)) == 1
