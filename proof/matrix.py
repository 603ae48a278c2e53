"""The crash matrix: every write operation, dying at every point it reaches, two ways.

``crash_matrix()`` runs every write operation in a real child process
(``queue_core.app.crash_child``) that dies at every probe point it reaches
(``store.PROBE_POINTS``), once by ``os._exit`` and once by SIGKILL; the caller
then repeats what it got no answer for, a fresh worker finishes the queue, and
every invariant is checked, together with the exact states that the
specification predicts for both outcomes a crash may have: the transaction
was rolled back, or it was committed.

The batched path is crashed the same way: ``claim_many`` and ``complete_many``
reach, inside their one transaction, the points of their messages' operation
once per message (``claim.after_update`` three times for three leases), and a
child dies at each of those hits too. Whatever message of the batch it died
at, the file must be exactly as before the batch or exactly as after its
COMMIT: a batch commits whole or not at all.

Only the clock is modelled (``--now``); processes, crashes and SQLite files
are real.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from queue_core import ledger
from queue_core.clock import ModelClock
from queue_core.receipts import ReceiptHandler
from queue_core.store import LEASE_EXPIRED, PROBE_POINTS, Store
from queue_core.values import Lease
from queue_core.worker import work
from queue_core.app.crash_child import CRASH_EXIT_CODE, HOWS, child_command
from proof.invariants import (
    FileState,
    Payload,
    check_invariants,
    finish_queue,
    losses_and_doubles,
    read_file,
)

__all__ = [
    "BATCH_EVENTS",
    "COMMITTED",
    "DEMO_EVENTS",
    "RECEIPT_EVENTS",
    "ROLLED_BACK",
    "SCENARIOS",
    "CrashRow",
    "Prepared",
    "Scenario",
    "batch_text",
    "crash_matrix",
    "crash_rows",
    "points_covered",
    "prepare",
    "run_case",
    "uncovered_points",
]

BOOK, PEN, TOY = "book", "pen", "toy"
DEMO_EVENTS: dict[str, Payload] = {
    "E0001": {"category": BOOK, "amount_cents": 10000},
    "E0002": {"category": PEN, "amount_cents": 2000},
    "E0003": {"category": BOOK, "amount_cents": 5000},
    # dead: this handler version does not know toys
    "E0004": {"category": TOY, "amount_cents": 3000},
}
START = 1000
LEASE = 2

# state, attempts, generation, last_error
FinalState = tuple[str, int, int, "str | None"]
_DONE: FinalState = ("done", 1, 1, None)
_DEMO_FINAL: dict[str, FinalState] = {
    "E0001": _DONE,
    "E0002": _DONE,
    "E0003": _DONE,
    "E0004": ("dead", 1, 1, "invalid_payload"),
}
ROLLED_BACK, COMMITTED = "rolled back", "committed"
PARTIAL = "partial"  # neither: a violation


def batch_text(events: Mapping[str, Payload], *, repeat_first: bool = False) -> str:
    """A JSONL batch of ``events`` (optionally with its first line sent twice)."""
    lines = [json.dumps({"event_id": e, "payload": dict(p)}) for e, p in events.items()]
    if repeat_first and lines:
        lines.insert(1, lines[0])
    return "\n".join(lines) + "\n"


# ====================================================================== scenarios

Setup = Callable[[Store, ModelClock, Path], dict[str, Any]]


@dataclass(frozen=True)
class Scenario:
    """One write operation, prepared so that a child can run it and die inside it.

    ``setup`` prepares the queue file with the protocol's own API and returns
    the child's options (``now``, the lease, ...). ``expect`` gives the final
    state of every event after the fresh worker, as the specification predicts,
    for both outcomes a crash may have: the transaction was rolled back
    (a probe point before COMMIT) or it was committed (just after COMMIT).
    """

    key: str
    title: str
    operation: str
    events: Mapping[str, Payload]
    setup: Setup
    expect: Mapping[str, Mapping[str, FinalState]]
    show: tuple[str, ...]
    categories: tuple[str, ...] = ()  # extra categories of the fresh worker's handler
    # what the caller repeats when it heard no answer: "enqueue" or "redrive"
    resend: str | None = None
    spec: str = ""
    # Completions under a ReceiptHandler (child and fresh worker): the receipts table each branch
    # must end with, (tenant, operation) -> the event whose effect it names. None: a plain handler.
    receipts: Mapping[str, Mapping[tuple[str, str], str]] | None = None

    def effect_holders(self, branch: str) -> set[str]:
        """The events that must end with an effect of their own: done, and not ACKed on another's receipt."""
        receipts = (self.receipts or {}).get(branch, {})
        holders = set()
        for event_id, final in self.expect[branch].items():
            payload = self.events[event_id]
            key = (payload.get("tenant"), payload.get("operation"))
            if final[0] == "done" and receipts.get(key, event_id) == event_id:  # type: ignore[arg-type]
                holders.add(event_id)
        return holders

    def expected_total(self, branch: str) -> int:
        """The money after the fresh worker: an operation ACKed twice counts once."""
        return sum(
            int(self.events[e]["amount_cents"]) for e in self.effect_holders(branch)
        )


def _claims(store: Store, clock: ModelClock, times: Sequence[int]) -> Lease:
    lease = None
    for now in times:
        clock.set(now)
        lease = store.claim(LEASE)
    assert lease is not None
    return lease


def _setup_enqueue(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    first_two = {k: DEMO_EVENTS[k] for k in ("E0001", "E0002")}
    store.enqueue(batch_text(first_two))
    path = folder / "batch.jsonl"
    path.write_text(batch_text(DEMO_EVENTS, repeat_first=True), encoding="utf-8")
    return {"now": START, "batch": path}


def _setup_claim(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    return {"now": START, "lease_seconds": LEASE}


def _setup_claim_expired(
    store: Store, clock: ModelClock, folder: Path
) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    # E0001 three times, each expired
    lease = _claims(store, clock, (START, START + LEASE, START + 2 * LEASE))
    return {"now": lease.lease_until, "lease_seconds": LEASE}


def _setup_complete(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    return {"now": START, "lease": store.claim(LEASE)}


def _setup_extend(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    lease = store.claim(LEASE)
    # halfway through the lease
    return {"now": START + 1, "lease": lease, "lease_seconds": 5 * LEASE}


def _setup_release(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    return {"now": START + 1, "lease": store.claim(LEASE)}


def _setup_complete_refused(
    store: Store, clock: ModelClock, folder: Path
) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    for _ in range(3):
        lease = store.claim(LEASE)
        assert lease is not None
        store.complete(lease, ledger.Handler())
    return {"now": START, "lease": store.claim(LEASE)}  # E0004, a toy


def _setup_fail(code: str, permanent: bool, claims: int) -> Setup:
    def setup(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
        store.enqueue(batch_text(DEMO_EVENTS))
        lease = _claims(store, clock, [START + LEASE * n for n in range(claims)])
        return {
            "now": clock.now(),
            "lease": lease,
            "code": code,
            "permanent": permanent,
        }

    return setup


REDRIVE_EVENTS: dict[str, Payload] = {
    **DEMO_EVENTS,
    "E0005": {"category": "bag", "amount_cents": 0},
}


def _setup_redrive(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(REDRIVE_EVENTS))
    # E0004 (toy) and E0005 (amount 0) go dead
    work(store, ledger.Handler(), lease_seconds=LEASE)
    clock.set(START + 1)
    return {"now": START + 1, "event_ids": ["E0004", "E0005"]}


# The batched path. claim_many: E0001's three leases have all expired and E0005 waits behind the others.
BATCH_EVENTS: dict[str, Payload] = {
    **DEMO_EVENTS,
    "E0005": {"category": PEN, "amount_cents": 500},
}
_BATCH_FINAL: dict[str, FinalState] = {**_DEMO_FINAL, "E0005": _DONE}
BATCH_COUNT = 3


def _setup_claim_many(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(BATCH_EVENTS))
    # E0001 three times, each expired
    lease = _claims(store, clock, (START, START + LEASE, START + 2 * LEASE))
    assert lease.event_id == "E0001" and lease.attempt == 3
    return {"now": lease.lease_until, "count": BATCH_COUNT, "lease_seconds": LEASE}


def _setup_complete_many(
    store: Store, clock: ModelClock, folder: Path
) -> dict[str, Any]:
    """Leases of E0002 (valid), E0001 (stale: generation 2 was issued since) and E0004 (a toy), in that order."""
    store.enqueue(batch_text(DEMO_EVENTS))
    stale = store.claim(LEASE)  # E0001, generation 1; it expires ...
    clock.set(START + LEASE)
    current = store.claim(LEASE)  # ... and another worker holds generation 2 now
    assert (
        stale is not None
        and current is not None
        and (stale.event_id, current.event_id) == ("E0001", "E0001")
    )
    valid = store.claim(LEASE)
    other = store.claim(LEASE)
    assert valid is not None and other is not None and other.event_id == "E0003"
    # E0003 is done before the batch: not part of it
    store.complete(other, ledger.Handler())
    toy = store.claim(LEASE)
    assert toy is not None and (valid.event_id, toy.event_id) == ("E0002", "E0004")
    return {"now": clock.now(), "leases": [valid, stale, toy]}


def _both(final: Mapping[str, FinalState]) -> dict[str, dict[str, FinalState]]:
    return {ROLLED_BACK: dict(final), COMMITTED: dict(final)}


# The same operation (north's order-7 charge) arrives twice, under E0001 and E0002 (a producer that
# resent it under a new event id, a broker's redelivery); south's order-7 is another operation (tenants
# are namespaces); E0004 is a toy that this handler version refuses.
ORDER_7 = {
    "tenant": "north",
    "operation": "order-7:charge",
    "category": BOOK,
    "amount_cents": 10000,
}
RECEIPT_EVENTS: dict[str, Payload] = {
    "E0001": ORDER_7,
    "E0002": dict(ORDER_7),
    "E0003": {
        "tenant": "south",
        "operation": "order-7:charge",
        "category": PEN,
        "amount_cents": 2000,
    },
    "E0004": {
        "tenant": "north",
        "operation": "order-8:charge",
        "category": TOY,
        "amount_cents": 3000,
    },
}
NORTH_7, SOUTH_7 = ("north", "order-7:charge"), ("south", "order-7:charge")


def receipt_handler() -> ReceiptHandler:
    """The handler of every completion under receipts here: the child's and the fresh worker's."""
    return ReceiptHandler(ledger.Handler(), effect_exists=ledger.has_effect)


def _setup_receipt_first(
    store: Store, clock: ModelClock, folder: Path
) -> dict[str, Any]:
    store.enqueue(batch_text(RECEIPT_EVENTS))
    return {"now": START, "lease": store.claim(LEASE)}  # E0001: effect + receipt + ACK


def _setup_receipt_reused(
    store: Store, clock: ModelClock, folder: Path
) -> dict[str, Any]:
    store.enqueue(batch_text(RECEIPT_EVENTS))
    first = store.claim(LEASE)
    assert first is not None and first.event_id == "E0001"
    store.complete(first, receipt_handler())
    # E0002: ACKed on E0001's receipt
    return {"now": START, "lease": store.claim(LEASE)}


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "enqueue",
        "enqueue a batch",
        "enqueue",
        DEMO_EVENTS,
        _setup_enqueue,
        _both(_DEMO_FINAL),
        ("E0003", "E0004"),
        resend="enqueue",
        spec="Two of the four events are stored already; the batch has five lines (one of them twice). "
        "It is stored whole or not at all; the producer, who heard no answer, sends it again, and "
        "what was stored counts as duplicates.",
    ),
    Scenario(
        "claim",
        "claim",
        "claim",
        DEMO_EVENTS,
        _setup_claim,
        {
            ROLLED_BACK: _DEMO_FINAL,
            COMMITTED: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
        },
        ("E0001",),
        spec="The claim takes E0001. A committed claim whose worker died is a lease nobody works on: it "
        "expires and the next claim takes the message again with the next generation (attempt 2).",
    ),
    Scenario(
        "claim-expired",
        "claim after a last lease expired",
        "claim",
        DEMO_EVENTS,
        _setup_claim_expired,
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("dead", 3, 3, LEASE_EXPIRED)},
            COMMITTED: {
                **_DEMO_FINAL,
                "E0001": ("dead", 3, 3, LEASE_EXPIRED),
                "E0002": ("done", 2, 2, None),
            },
        },
        ("E0001", "E0002"),
        spec="E0001's three leases have all expired: the budget is spent. The claim moves it to dead "
        "(lease_expired) and leases the next message, E0002, in the same transaction.",
    ),
    Scenario(
        "complete",
        "complete → done",
        "complete",
        DEMO_EVENTS,
        _setup_complete,
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
            COMMITTED: _DEMO_FINAL,
        },
        ("E0001",),
        spec="The completion of E0001's lease: effect and ACK commit together or not at all; a rolled-back "
        "completion leaves the claim, which expires and is completed by generation 2.",
    ),
    Scenario(
        "complete-refused",
        "complete → dead (handler refuses)",
        "complete",
        DEMO_EVENTS,
        _setup_complete_refused,
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0004": ("dead", 2, 2, "invalid_payload")},
            COMMITTED: _DEMO_FINAL,
        },
        ("E0004",),
        spec="The completion of E0004, a toy that this handler version refuses: a permanent failure goes "
        "to dead with its code, without an effect.",
    ),
    Scenario(
        "extend",
        "extend a lease (heartbeat)",
        "extend",
        DEMO_EVENTS,
        _setup_extend,
        _both({**_DEMO_FINAL, "E0001": ("done", 2, 2, None)}),
        ("E0001",),
        spec="Halfway through E0001's lease, its worker extends it to end 10 s from now: the deadline "
        "moves, nothing else (no attempt spent, the same generation). Either way the worker then dies: "
        "the lease, extended or not, runs out, and generation 2 completes E0001.",
    ),
    Scenario(
        "release",
        "release a lease (a stopping worker)",
        "release",
        DEMO_EVENTS,
        _setup_release,
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
            COMMITTED: {**_DEMO_FINAL, "E0001": ("done", 1, 2, None)},
        },
        ("E0001",),
        spec="A worker gives E0001's lease back unfinished: E0001 is ready again at once and its claim "
        "does not count as an attempt (the generation stays). Rolled back, the lease stays until it "
        "runs out and generation 2 is the second attempt; committed, generation 2 is the first.",
    ),
    Scenario(
        "fail-temporary",
        "fail, temporary",
        "fail",
        DEMO_EVENTS,
        _setup_fail("timeout", False, 1),
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
            COMMITTED: {**_DEMO_FINAL, "E0001": ("done", 2, 2, "timeout")},
        },
        ("E0001",),
        spec="The worker reports a temporary failure of E0001: back to ready with a backoff of 1 s; "
        "attempt 2 completes it.",
    ),
    Scenario(
        "fail-permanent",
        "fail, permanent",
        "fail",
        DEMO_EVENTS,
        _setup_fail("rejected", True, 1),
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
            COMMITTED: {**_DEMO_FINAL, "E0001": ("dead", 1, 1, "rejected")},
        },
        ("E0001",),
        spec="The worker reports a permanent failure of E0001: straight to dead, keeping its code; if that "
        "was rolled back, the message is simply worked again (and this handler accepts it).",
    ),
    Scenario(
        "fail-last",
        "fail, temporary, last attempt",
        "fail",
        DEMO_EVENTS,
        _setup_fail("timeout", False, 3),
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("dead", 3, 3, LEASE_EXPIRED)},
            COMMITTED: {**_DEMO_FINAL, "E0001": ("dead", 3, 3, "timeout")},
        },
        ("E0001",),
        spec="A temporary failure of E0001 on its third attempt ends in dead with its code; if it was "
        "rolled back, the third lease expires and the next claim records lease_expired.",
    ),
    Scenario(
        "redrive",
        "redrive two dead letters",
        "redrive",
        REDRIVE_EVENTS,
        _setup_redrive,
        _both(
            {
                **_DEMO_FINAL,
                "E0004": ("done", 1, 2, "invalid_payload"),
                "E0005": ("dead", 1, 2, "invalid_payload"),
            }
        ),
        ("E0004", "E0005"),
        categories=(TOY,),
        resend="redrive",
        spec="E0004 (a toy, now supported by the fresh worker) and E0005 (amount 0, still invalid) are "
        "redriven together: attempts reset, generation kept, all or none; the operator redrives what is "
        "still dead. Redriving without fixing the cause sends E0005 back to dead.",
    ),
    Scenario(
        "complete-receipt-first",
        "complete under a receipt, first time",
        "complete",
        RECEIPT_EVENTS,
        _setup_receipt_first,
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
            COMMITTED: _DEMO_FINAL,
        },
        ("E0001", "E0002"),
        receipts={
            ROLLED_BACK: {NORTH_7: "E0002", SOUTH_7: "E0003"},
            COMMITTED: {NORTH_7: "E0001", SOUTH_7: "E0003"},
        },
        spec="E0001 and E0002 carry the same operation (north, order-7:charge); the worker completes E0001 "
        "under a ReceiptHandler: effect, receipt and ACK commit together or not at all. Rolled back, "
        "the fresh worker reaches E0002 first (E0001 is still leased): E0002 gets the effect and the "
        "receipt, and generation 2 of E0001 is ACKed on that receipt. The money counts the operation once.",
    ),
    Scenario(
        "complete-receipt-reused",
        "complete on an existing receipt",
        "complete",
        RECEIPT_EVENTS,
        _setup_receipt_reused,
        {
            ROLLED_BACK: {**_DEMO_FINAL, "E0002": ("done", 2, 2, None)},
            COMMITTED: _DEMO_FINAL,
        },
        ("E0001", "E0002"),
        receipts={
            ROLLED_BACK: {NORTH_7: "E0001", SOUTH_7: "E0003"},
            COMMITTED: {NORTH_7: "E0001", SOUTH_7: "E0003"},
        },
        spec="E0001 is done with its effect and the receipt of (north, order-7:charge); the worker "
        "completes E0002, the same operation under another event id: it is ACKed on the proof of "
        "the receipt, without a second effect. Rolled back, generation 2 of E0002 does the same.",
    ),
    Scenario(
        "claim-many",
        "claim_many of 3, one last lease expired",
        "claim_many",
        BATCH_EVENTS,
        _setup_claim_many,
        {
            ROLLED_BACK: {**_BATCH_FINAL, "E0001": ("dead", 3, 3, LEASE_EXPIRED)},
            COMMITTED: {
                **_BATCH_FINAL,
                "E0001": ("dead", 3, 3, LEASE_EXPIRED),
                "E0002": ("done", 2, 2, None),
                "E0003": ("done", 2, 2, None),
                "E0004": ("dead", 2, 2, "invalid_payload"),
            },
        },
        ("E0001", "E0002", "E0003", "E0004", "E0005"),
        spec="E0001's three leases have all expired; claim_many(3) moves it to dead (lease_expired) inside "
        "the batch and leases E0002, E0003 and E0004, each with its own generation, in one transaction; "
        "E0005 stays ready. Committed, the three leases have no worker: they expire and generation 2 "
        "finishes each (E0004, a toy, is refused then).",
    ),
    Scenario(
        "complete-many",
        "complete_many of 3: done, stale, refused",
        "complete_many",
        DEMO_EVENTS,
        _setup_complete_many,
        {
            ROLLED_BACK: {
                **_DEMO_FINAL,
                "E0001": ("done", 3, 3, None),
                "E0002": ("done", 2, 2, None),
                "E0004": ("dead", 2, 2, "invalid_payload"),
            },
            COMMITTED: {**_DEMO_FINAL, "E0001": ("done", 3, 3, None)},
        },
        ("E0001", "E0002", "E0004"),
        spec="One transaction completes three leases, each in its own savepoint: E0002 (effect + ACK), "
        "E0001 with a stale generation 1 (another worker holds generation 2: only this message is "
        "undone, lease_lost) and E0004, a toy the handler refuses (dead, no effect). Committed or "
        "rolled back as a whole; rolled back, generation 2 redoes E0002 and E0004.",
    ),
)


# =================================================================== the results


@dataclass(frozen=True)
class CrashRow:
    """One case of the crash matrix and what was found."""

    scenario: str
    operation: str
    point: str
    hit: int
    repeats: int  # how many times this operation reaches the point
    how: str
    exit_status: int
    after_crash: str  # ROLLED_BACK, COMMITTED, or PARTIAL (a violation)
    shown_after_crash: str
    resent: str
    shown_final: str
    total_cents: int
    expected_total: int
    # sent events not stored, events that should be done and are not, done without effect
    losses: int
    doubles: int  # events with more than one effect, effects without a done message
    violations: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.point if self.repeats == 1 else f"{self.point} #{self.hit}"

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "violations": list(self.violations)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CrashRow:
        return cls(**{**data, "violations": tuple(data["violations"])})


def crash_rows(record: Any) -> list[CrashRow]:
    """The rows of a crash-matrix record (``records.Record``, or its ``result`` list)."""
    result = getattr(record, "result", record)
    return [CrashRow.from_dict(row) for row in result]


def points_covered(rows: Sequence[CrashRow]) -> set[str]:
    """The probe points at which a child died in ``rows``."""
    return {row.point for row in rows}


def uncovered_points(rows: Sequence[CrashRow]) -> set[str]:
    """Points of ``store.PROBE_POINTS`` that no case of ``rows`` reached."""
    return set(PROBE_POINTS) - points_covered(rows)


def _describe(state: FileState, ids: Sequence[str]) -> str:
    parts = []
    effects = {e for e, _, _ in state.effects}
    for event_id in ids:
        m = state.message(event_id)
        text = (
            f"{event_id} absent"
            if m is None
            else f"{event_id} {m.state} {m.attempts}/{m.generation}"
        )
        if m is not None and m.state == "done" and event_id not in effects:
            proof = state.receipt_proof(m)
            text += f" on {proof[3]}'s receipt" if proof else " without effect"
        parts.append(text)
    return ", ".join(parts)


# ================================================================== running cases


@dataclass(frozen=True)
class Prepared:
    """A scenario's template file, the child's options, and what a run without dying showed."""

    scenario: Scenario
    template: Path
    options: Mapping[str, Any]
    before: Any  # FileState.rows() of the template
    after: Any  # FileState.rows() after the operation committed
    # point, hit, how many times the operation reaches it
    reached: tuple[tuple[str, int, int], ...]


def prepare(scenario: Scenario, folder: Path) -> Prepared:
    """Prepare the template file, then run the operation once in a child that does not die.

    That reference run gives the state a committed operation leaves, and the
    probe points it reaches, in order.
    """
    folder.mkdir(parents=True, exist_ok=True)
    template = folder / "template.sqlite3"
    clock = ModelClock(START)
    # closed before the copy: the WAL is then in the file
    with Store(template, clock=clock) as store:
        ledger.install(store)  # a queue of the reference application
        options = scenario.setup(store, clock, folder)
    if scenario.receipts is not None:
        options["receipts"] = True  # the child completes under a ReceiptHandler
    before = read_file(template).rows()
    reference = folder / "reference.sqlite3"
    shutil.copyfile(template, reference)
    traced = subprocess.run(
        child_command(reference, scenario.operation, trace=True, **options),
        capture_output=True,
        text=True,
        check=False,
    )
    if traced.returncode != 0:
        raise RuntimeError(f"{scenario.key}: the reference run failed: {traced.stderr}")
    points = traced.stdout.split()
    counts = Counter(points)
    seen: Counter[str] = Counter()
    reached = []
    for point in points:
        seen[point] += 1
        reached.append((point, seen[point], counts[point]))
    return Prepared(
        scenario, template, options, before, read_file(reference).rows(), tuple(reached)
    )


def run_case(
    prepared: Prepared, point: str, hit: int, repeats: int, how: str, folder: Path
) -> CrashRow:
    """One case: a child dies at ``point`` (its ``hit``-th time there), then the file is judged."""
    scenario = prepared.scenario
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "queue.sqlite3"
    shutil.copyfile(prepared.template, db)
    exit_status, violations = _die_at(db, prepared, point, hit, how)

    crashed = read_file(db)
    outcome = _outcome_of(crashed, prepared)
    expected_outcome = COMMITTED if point.endswith(".after_commit") else ROLLED_BACK
    if outcome != expected_outcome:
        violations.append(
            f"after the crash the file is {outcome}, expected {expected_outcome}"
        )
    violations += [
        f"after the crash: {v}" for v in check_invariants(crashed, finished=False)
    ]

    now = prepared.options["now"]
    resent = _resend(db, prepared, now)
    finish_queue(
        db,
        now,
        categories=scenario.categories,
        lease_seconds=LEASE,
        receipts=scenario.receipts is not None,
    )

    final = read_file(db)
    branch = COMMITTED if outcome == COMMITTED else ROLLED_BACK
    violations += _judge_final(final, scenario, branch)
    should_be_done = {e for e, f in scenario.expect[branch].items() if f[0] == "done"}
    lost, doubled = losses_and_doubles(final, scenario.events, should_be_done)
    return CrashRow(
        scenario=scenario.key,
        operation=scenario.operation,
        point=point,
        hit=hit,
        repeats=repeats,
        how=how,
        exit_status=exit_status,
        after_crash=outcome,
        shown_after_crash=_describe(crashed, scenario.show),
        resent=resent,
        shown_final=_describe(final, scenario.show),
        total_cents=final.total_cents,
        expected_total=scenario.expected_total(branch),
        losses=lost,
        doubles=doubled,
        violations=tuple(violations),
    )


def _die_at(
    db: Path, prepared: Prepared, point: str, hit: int, how: str
) -> tuple[int, list[str]]:
    """Run the operation in a child that dies at ``point``; a child that did not die there is a violation."""
    command = child_command(
        db,
        prepared.scenario.operation,
        point=point,
        hit=hit,
        how=how,
        **prepared.options,
    )
    child = subprocess.run(command, capture_output=True, text=True, check=False)
    expected_status = CRASH_EXIT_CODE if how == "exit" else -signal.SIGKILL
    if child.returncode == expected_status:
        return child.returncode, []
    return child.returncode, [
        f"the child exited with {child.returncode}, expected {expected_status} "
        f"{child.stderr.strip()[-300:]}"
    ]


def _outcome_of(crashed: FileState, prepared: Prepared) -> str:
    """Exactly the state before the operation, exactly the state after it, or neither."""
    if crashed.rows() == prepared.before:
        return ROLLED_BACK
    if crashed.rows() == prepared.after:
        return COMMITTED
    return PARTIAL


def _resend(db: Path, prepared: Prepared, now: int) -> str:
    """What the caller does when it heard no answer: the producer resends, the operator redrives again."""
    if prepared.scenario.resend is None:
        return ""
    with Store(db, clock=ModelClock(now), create=False) as store:
        return _resend_with(store, prepared)


def _resend_with(store: Store, prepared: Prepared) -> str:
    if prepared.scenario.resend == "enqueue":
        result = store.enqueue(Path(prepared.options["batch"]).read_bytes())
        return f"resent: {result.accepted} accepted, {result.duplicates} duplicates"
    if prepared.scenario.resend == "redrive":
        still_dead = [
            e for e in prepared.options["event_ids"] if store.message(e).state == "dead"
        ]
        if still_dead:
            store.redrive(still_dead)
        return f"redriven again: {', '.join(still_dead) or 'none'}"
    return ""


def _judge_final(final: FileState, scenario: Scenario, branch: str) -> list[str]:
    """Every invariant, and the final state, effects and receipts the specification predicts."""
    holders = scenario.effect_holders(branch)
    violations = check_invariants(
        final, events=scenario.events, expected_total=scenario.expected_total(branch)
    )
    for event_id, want in scenario.expect[branch].items():
        m = final.message(event_id)
        got = None if m is None else (m.state, m.attempts, m.generation, m.last_error)
        if got != want:
            violations.append(
                f"{event_id} ended as {got}, the specification says {want}"
            )
    if {e for e, _, _ in final.effects} != holders:
        violations.append(
            f"effects of {sorted(e for e, _, _ in final.effects)}, "
            f"the specification says {sorted(holders)}"
        )
    if scenario.receipts is not None:
        got_receipts = {(t, o): effect for t, o, _, effect in final.receipts}
        if got_receipts != dict(scenario.receipts[branch]):
            violations.append(
                f"receipts {got_receipts}, the specification says {dict(scenario.receipts[branch])}"
            )
    return violations


@contextmanager
def work_folder(
    workdir: str | Path | None, prefix: str = "queue-core-evidence-"
) -> Iterator[Path]:
    """``workdir`` (created if needed), or a temporary folder removed afterwards."""
    if workdir is not None:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix=prefix) as name:
            yield Path(name)


def crash_matrix(
    workdir: str | Path | None = None,
    *,
    scenarios: Sequence[Scenario] = SCENARIOS,
    hows: Sequence[str] = HOWS,
    jobs: int | None = None,
) -> list[CrashRow]:
    """Run every scenario's operation in a child that dies at every point it reaches.

    For each scenario: prepare the file, run the operation once without dying
    to learn which probe points it reaches (and the state a commit leaves);
    then, for every reached point and every way of dying, copy the prepared
    file, let a child die there, check the file, let the caller resend what it
    got no answer for, let a fresh worker finish the queue, and check every
    invariant and the final state the specification predicts.

    ``jobs`` cases run at once, each in its own folder (default: twice the
    number of CPUs, at most 8; a case mostly waits for its child process).
    """
    with work_folder(workdir) as root:
        prepared = [prepare(s, root / s.key) for s in scenarios]
        cases = [
            (p, point, hit, repeats, how)
            for p in prepared
            for point, hit, repeats in p.reached
            for how in hows
        ]

        def run(index: int) -> CrashRow:
            p, point, hit, repeats, how = cases[index]
            return run_case(
                p, point, hit, repeats, how, root / p.scenario.key / f"case-{index:03d}"
            )

        with ThreadPoolExecutor(
            max_workers=jobs or min(8, 2 * (os.cpu_count() or 1))
        ) as pool:
            return list(pool.map(run, range(len(cases))))
