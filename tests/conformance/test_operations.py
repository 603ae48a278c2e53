"""Operating the queue: metrics from the version 3 timestamps, and retention (prune) that keeps dedup exact.

Runs on both engines (tests/conformance/conftest.py): a real SQLite file,
and a real PostgreSQL database. Only the clock is modelled.
"""

from __future__ import annotations

import re

import pytest

from queue_core import BatchRejected, Handler, ModelClock, Outcome, Store, ledger
from queue_core.prometheus import exposition
from queue_core.envelope import payload_digest
from queue_core.values import Latency

from ..support import batch, line, money


def finish(store: Store, event_id: str) -> Outcome:
    lease = store.claim(30)
    assert lease is not None and lease.event_id == event_id, lease
    return store.complete(lease, Handler()).outcome


def test_enqueue_and_done_are_timed_and_a_retry_has_no_done_time(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001"), line("E0002", "toy")))
    clock.set(1004)
    assert finish(store, "E0001") is Outcome.DONE
    assert finish(store, "E0002") is Outcome.DEAD  # this handler refuses toys
    done, dead = store.message("E0001"), store.message("E0002")
    assert (done.enqueued_at, done.done_at, done.expired_leases, done.pruned) == (1000, 1004, 0, False)
    assert (dead.enqueued_at, dead.done_at) == (1000, None)


def test_a_lease_that_ran_out_is_counted_when_it_is_taken_over(store: Store, clock: ModelClock) -> None:
    store.enqueue(line("E0001"))
    store.claim(10)
    clock.advance(10)
    store.claim(10)  # takes over the expired lease: one
    clock.advance(10)
    store.claim(10)  # two
    clock.advance(10)
    assert store.claim(10) is None  # the third ran out too: dead (lease_expired), three
    message = store.message("E0001")
    assert (message.state, message.expired_leases) == ("dead", 3)
    assert store.metrics().expired_leases == 3


def test_the_metrics_of_a_known_history(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001"), line("E0002"), line("E0003", "toy"), line("E0004"), line("E0005")))
    clock.set(1010)
    finish(store, "E0001")  # 10 s from enqueue to done
    finish(store, "E0002")  # 10 s
    finish(store, "E0003")  # dead after one attempt
    clock.set(1040)
    finish(store, "E0004")  # 40 s
    clock.set(1100)
    store.enqueue(line("E0006"))  # ready: E0005 (since 1000) is the oldest
    metrics = store.metrics()
    assert metrics.now == 1100
    assert dict(metrics.messages) == {"ready": 2, "leased": 0, "done": 3, "dead": 1}
    assert metrics.oldest_ready_age == 100
    assert dict(metrics.dead_attempts) == {1: 1}
    # Nearest rank over [10, 10, 40]: p50 is the 2nd, p95 the 3rd.
    assert metrics.enqueue_to_done == Latency(count=3, p50=10, p95=40, max=40, sum=60)
    assert metrics.expired_leases == 0 and metrics.pruned == 0
    assert metrics.to_dict()["dead_attempts"] == {"1": 1}  # JSON keys are strings


def test_an_empty_queue_has_no_ages_and_no_latency(store: Store) -> None:
    metrics = store.metrics()
    assert (metrics.oldest_ready_age, metrics.enqueue_to_done) == (None, Latency(0, None, None, None, 0))
    text = exposition(metrics)
    assert 'queue_core_enqueue_to_done_seconds{queue="default",quantile="0.5"} NaN' in text
    assert 'queue_core_oldest_ready_age_seconds{queue="default"} 0' in text


# every sample names its queue, and may have one more label
SAMPLE = re.compile(r'^[a-z_]+\{queue="[a-z][a-z0-9_-]*"(,[a-z_]+="[^"\\\n]*")?\} (NaN|-?[0-9]+(\.[0-9]+)?)$')


def test_the_exposition_is_prometheus_text_format(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001"), line("E0002", "toy")))
    clock.set(1003)
    finish(store, "E0001")
    finish(store, "E0002")
    text = exposition(store.metrics())
    assert text.endswith("\n")
    families: dict[str, str] = {}
    for row in text.splitlines():
        if row.startswith("# HELP "):
            continue
        if row.startswith("# TYPE "):
            _, _, name, kind = row.split(" ")
            assert kind in ("gauge", "counter", "summary") and name not in families
            families[name] = kind
            continue
        assert SAMPLE.match(row), row  # name{label="value"} number, nothing else
        name = row.split("{")[0].split(" ")[0]
        base = re.sub(r"_(sum|count)$", "", name)
        assert name in families or families.get(base) == "summary", row  # each sample after its TYPE
    assert families["queue_core_expired_leases_total"] == "counter"
    assert 'queue_core_messages{queue="default",state="done"} 1' in text and 'queue_core_messages{queue="default",state="dead"} 1' in text
    assert 'queue_core_dead_messages_by_attempts{queue="default",attempts="1"} 1' in text
    assert 'queue_core_enqueue_to_done_seconds{queue="default",quantile="0.95"} 3' in text
    assert ('queue_core_enqueue_to_done_seconds_count{queue="default"} 1' in text
            and 'queue_core_enqueue_to_done_seconds_sum{queue="default"} 3' in text)


# ------------------------------------------------------------------ retention

def test_prune_removes_old_payloads_and_keeps_dedup_exact(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001", amount_cents=700), line("E0002", amount_cents=800)))
    clock.set(1010)
    finish(store, "E0001")  # done at 1010
    clock.set(1100)
    finish(store, "E0002")  # done at 1100
    clock.set(1200)
    result = store.prune(older_than_seconds=150)  # only what was done at 1050 or before
    assert result.to_dict() == {"pruned": 1, "unknown_age": 0}
    pruned, kept = store.message("E0001"), store.message("E0002")
    assert (pruned.pruned, pruned.payload, pruned.state, pruned.done_at) == (True, "{}", "done", 1010)
    assert (kept.pruned, kept.payload_object["amount_cents"]) == (False, 800)
    # The same line again: still a duplicate (its hash matched), nothing new stored.
    again = store.enqueue(line("E0001", amount_cents=700))
    assert (again.accepted, again.duplicates) == (0, 1)
    # Another payload under the pruned id: still a conflict, and the whole batch is refused.
    with pytest.raises(BatchRejected) as refused:
        store.enqueue(batch(line("E0003"), line("E0001", amount_cents=701)))
    assert refused.value.code == "event_conflict" and refused.value.line == 2
    assert [m.event_id for m in store.messages()] == ["E0001", "E0002"]  # nothing written
    assert money(store) == (2, 1500)  # the effects are the application's: untouched
    assert store.prune(older_than_seconds=150).pruned == 0  # nothing more is old enough
    assert store.metrics().pruned == 1


def test_dead_messages_are_never_pruned(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(line("E0001", "toy"), line("E0002")))
    finish(store, "E0001")
    finish(store, "E0002")
    clock.advance(10_000)
    assert store.prune(0).pruned == 1
    dead = store.message("E0001")
    assert (dead.state, dead.pruned, dead.payload_object["category"]) == ("dead", False, "toy")
    assert store.redrive(["E0001"]) == ["E0001"]  # still whole: an operator can fix the cause and redrive it


def test_the_kept_hash_is_the_canonical_payloads(store: Store, clock: ModelClock) -> None:
    # Keys in another order and other spacing are the same canonical payload: still a duplicate.
    store.enqueue('{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 5}}\n')
    canonical = store.message("E0001").payload
    finish(store, "E0001")
    store.prune(0)
    assert store.read(lambda view: view.execute(
        "SELECT payload_sha256 FROM messages WHERE event_id = 'E0001'").fetchone()[0]) == payload_digest(canonical)
    again = store.enqueue('{"payload": {"amount_cents": 5,   "category": "book"}, "event_id": "E0001"}\n')
    assert again.duplicates == 1


@pytest.mark.parametrize("age, error", [(-1, ValueError), (1.5, TypeError), ("7d", TypeError), (True, TypeError)])
def test_prune_refuses_a_bad_age(store: Store, age: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="older_than_seconds"):
        store.prune(age)  # type: ignore[arg-type]


def test_the_reference_report_still_adds_up_after_pruning(store: Store, clock: ModelClock) -> None:
    store.enqueue(batch(*(line(f"E{n:04d}", amount_cents=n) for n in range(1, 21))))
    for n in range(1, 21):
        finish(store, f"E{n:04d}")
    clock.advance(60)
    assert store.prune(30).pruned == 20
    assert ledger.report(store).to_dict()["effects"] == {"count": 20, "total_cents": 210,
                                                         "by_category": {"book": 210}}


def test_prune_works_in_chunks_and_prunes_them_all(store: Store, clock: ModelClock,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import queue_core.store

    monkeypatch.setattr(queue_core.reads, "PRUNE_CHUNK", 7)  # 20 payloads: three chunks and a rest
    store.enqueue(batch(*(line(f"E{n:04d}", amount_cents=n) for n in range(1, 21))))
    for n in range(1, 21):
        finish(store, f"E{n:04d}")
    assert store.prune(0).pruned == 20
    assert all(m.pruned for m in store.messages())
    again = store.enqueue(batch(*(line(f"E{n:04d}", amount_cents=n) for n in range(1, 21))))
    assert (again.accepted, again.duplicates) == (0, 20)
