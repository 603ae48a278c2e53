"""Evidence that no effect is lost or doubled: invariants, crash matrix, random kills, contention.

Four reusable pieces, used by the tests, by ``scripts/chaos.py`` and by the
page "How we know":

* ``check_invariants(db, ...)`` reads a queue file and returns the list of
  violated invariants (empty: all hold). It opens the file **read-only**
  (``mode=ro``) and uses plain SQL on purpose: it inspects the result of the
  protocol, it does not drive it, so it must not share the code it judges
  (``Store``) and must not be able to change what it looks at.
* ``crash_matrix()`` runs every write operation in a real child process that
  dies at every fault point it reaches, once by ``os._exit`` and once by
  SIGKILL; a fresh worker then finishes the queue and every invariant is
  checked, together with the exact states that the specification predicts.
* ``chaos()`` runs several ``queue-core work`` processes on one file and
  SIGKILLs them at random moments, round after round, then makes a final
  pass and checks the invariants.
* ``contention()`` starts eight ``queue-core work`` processes while the write
  lock is held for longer than SQLite's busy timeout, so that every one of them
  has to wait, give up, back off and retry; then it reports who did how much.

Only the clock is modelled (``--now``); processes, crashes and SQLite files
are real.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import faults
from ._child import CRASH_EXIT_CODE, HOWS, child_command
from .clock import ModelClock
from .handler import Handler
from .receipts import ReceiptHandler
from .store import BUSY_TIMEOUT_MS, LEASE_EXPIRED, MAX_ATTEMPTS, Lease, Message, Store
from .worker import work

Payload = Mapping[str, Any]

# ====================================================================== invariants


@dataclass(frozen=True)
class FileState:
    """Everything the checker reads from a queue file, in one read transaction."""

    integrity: tuple[str, ...]
    foreign_key_errors: int
    messages: tuple[Message, ...]
    effects: tuple[tuple[str, str, int], ...]
    receipts: tuple[tuple[str, str, str, str], ...] = ()  # tenant, operation, payload, effect

    def message(self, event_id: str) -> Message | None:
        return next((m for m in self.messages if m.event_id == event_id), None)

    def rows(self) -> tuple[tuple[Message, ...], tuple[tuple[str, str, int], ...], tuple[tuple[str, ...], ...]]:
        """Messages, effects and receipts: what "the same state" means for the crash matrix."""
        return self.messages, self.effects, self.receipts

    def receipt_proof(self, m: Message) -> tuple[str, str, str, str] | None:
        """The receipt of ``m``'s operation, if it proves an ACK without an effect of ``m``'s own.

        The operation is named by the payload's ``tenant`` and ``operation`` fields
        (what ``receipts.key_from_payload`` reads). The proof holds if that
        receipt exists, was recorded for the same payload, and names an
        existing effect.
        """
        receipt = self.receipt_of(m)
        if receipt is None or receipt[3] not in {e for e, _, _ in self.effects}:
            return None
        if _canonical(json.loads(receipt[2])) != _canonical(json.loads(m.payload)):
            return None
        return receipt

    def receipt_of(self, m: Message) -> tuple[str, str, str, str] | None:
        """The receipt stored under the operation ``m``'s payload names, if any."""
        key = _operation_key(m)
        return next((r for r in self.receipts if (r[0], r[1]) == key), None) if key else None


def read_file(db: str | Path) -> FileState:
    """Read a queue file through a read-only connection (``mode=ro``): nothing can be written.

    The connection may leave empty ``-wal``/``-shm`` files beside the database:
    a read-only connection may not delete them. The next writer reuses them.
    """
    conn = sqlite3.connect(f"{Path(db).resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("BEGIN")  # one consistent snapshot for all the reads below
        integrity = tuple(row[0] for row in conn.execute("PRAGMA integrity_check"))
        foreign = len(conn.execute("PRAGMA foreign_key_check").fetchall())
        messages = tuple(Message(*row) for row in conn.execute(
            "SELECT event_id, payload, state, attempts, generation, available_at, lease_until, last_error"
            " FROM messages ORDER BY event_id"))
        effects = tuple(conn.execute(
            "SELECT event_id, category, amount_cents FROM effects ORDER BY event_id").fetchall())
        # The receipts table is created by the first completion under receipts: it may not exist.
        has_receipts = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'receipts'").fetchone()
        receipts = tuple(conn.execute(
            "SELECT tenant, operation, payload, effect FROM receipts ORDER BY tenant, operation").fetchall()
        ) if has_receipts else ()
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return FileState(integrity, foreign, messages, effects, receipts)


def _operation_key(m: Message) -> tuple[str, str] | None:
    """The (tenant, operation) a message's payload names, or None (the checker's own reading)."""
    try:
        payload = json.loads(m.payload)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    tenant, operation = payload.get("tenant"), payload.get("operation")
    return (tenant, operation) if isinstance(tenant, str) and isinstance(operation, str) else None


def check_invariants(
    db: str | Path | FileState,
    *,
    events: Mapping[str, Payload] | None = None,
    expected_total: int | None = None,
    finished: bool = True,
    max_attempts: int = MAX_ATTEMPTS,
) -> list[str]:
    """Return every violated invariant of the queue file ``db`` (an empty list: all hold).

    Always checked: ``PRAGMA integrity_check`` is ok and no foreign key dangles;
    each done message has exactly one effect, or none of its own and the proof
    of a receipt (see below); no effect lacks its done message;
    each effect is what its stored payload says (category, amount); a dead
    message has a recorded reason; ``generation >= attempts`` (every claim raises
    both, a redrive resets only attempts); ``attempts <= max_attempts``; a
    message dead of ``lease_expired`` spent the whole budget.

    Receipts (``receipts.ReceiptHandler``; the table may not exist): every
    receipt names an existing effect; no effect has more than one receipt; a
    done message without an effect of its own was ACKed on the proof of the
    receipt of its operation (the payload's ``tenant`` and ``operation``),
    recorded for the same payload, whose effect exists; a message whose
    operation has a receipt naming another event's effect has no effect of its
    own (the operation would count twice). These rules read the receipts of a
    queue completed under a ``ReceiptHandler``, whose receipts name event ids of
    ``effects``; a receipt written with ``receipts.record`` for an effect kept
    elsewhere (another table) would be reported as naming no effect.

    :param events: every event the producers sent (event id -> payload): none
        may be missing (lost before it was stored), none may be stored with
        another payload, and no other message may appear.
    :param expected_total: the money the effects must add up to.
    :param finished: after a final pass, every message must be done, or dead
        with a reason: nothing may be left ready or leased.
    """
    if isinstance(db, FileState):
        state = db
    else:
        try:
            state = read_file(db)
        except sqlite3.DatabaseError as exc:
            return [f"the file cannot be read: {exc}"]
    violations: list[str] = []
    if state.integrity != ("ok",):
        violations.append(f"integrity_check: {'; '.join(state.integrity[:3])}")
    if state.foreign_key_errors:
        violations.append(f"foreign_key_check: {state.foreign_key_errors} dangling reference(s)")
    messages = {m.event_id: m for m in state.messages}
    effects_per_event = Counter(event_id for event_id, _, _ in state.effects)
    for m in state.messages:
        count = effects_per_event.get(m.event_id, 0)
        if m.state == "done" and count > 1:
            violations.append(f"{m.event_id} is done with {count} effects (doubled)")
        elif m.state == "done" and count == 0 and state.receipt_proof(m) is None:
            receipt = state.receipt_of(m)
            why = ("and no receipt of its operation" if receipt is None
                   else f"and the receipt of {receipt[0]}/{receipt[1]} is no proof (effect {receipt[3]} "
                        f"{'missing' if effects_per_event.get(receipt[3], 0) == 0 else 'of another payload'})")
            violations.append(f"{m.event_id} is done with 0 effects {why} (lost)")
        receipt = state.receipt_of(m) if count else None
        if receipt is not None and receipt[3] != m.event_id:
            violations.append(f"{m.event_id} has an effect of its own, but the receipt of its operation "
                              f"{receipt[0]}/{receipt[1]} names {receipt[3]} (the operation is doubled)")
        if m.state == "dead" and not m.last_error:
            violations.append(f"{m.event_id} is dead without a recorded reason")
        if m.generation < m.attempts:
            violations.append(f"{m.event_id}: generation {m.generation} < attempts {m.attempts}")
        if m.attempts > max_attempts:
            violations.append(f"{m.event_id}: {m.attempts} attempts, more than the budget of {max_attempts}")
        if m.state == "dead" and m.last_error == LEASE_EXPIRED and m.attempts != max_attempts:
            violations.append(f"{m.event_id}: dead of {LEASE_EXPIRED} after {m.attempts} attempts")
        if finished and m.state not in ("done", "dead"):
            violations.append(f"{m.event_id} is still {m.state} after the final pass")
    for event_id, category, amount in state.effects:
        m = messages.get(event_id)
        if m is None or m.state != "done":
            violations.append(f"effect of {event_id} without a done message "
                              f"({'no message' if m is None else m.state})")
            continue
        payload = json.loads(m.payload)
        if (payload.get("category"), payload.get("amount_cents")) != (category, amount):
            violations.append(f"effect of {event_id} is {category} {amount}, its payload says otherwise")
    receipts_per_effect = Counter(effect for _, _, _, effect in state.receipts)
    for tenant, operation, _, effect in state.receipts:
        if effect not in effects_per_event:
            violations.append(f"receipt {tenant}/{operation} names {effect}, which has no effect")
    for effect, count in sorted(receipts_per_effect.items()):
        if count > 1:
            violations.append(f"effect of {effect} has {count} receipts")
    if events is not None:
        for event_id, payload in events.items():
            m = messages.get(event_id)
            if m is None:
                violations.append(f"{event_id} was sent but is not stored (lost)")
            elif _canonical(json.loads(m.payload)) != _canonical(payload):
                violations.append(f"{event_id} is stored with another payload")
        for event_id in messages.keys() - events.keys():
            violations.append(f"{event_id} is stored but was never sent")
    if expected_total is not None:
        total = sum(amount for _, _, amount in state.effects)
        if total != expected_total:
            violations.append(f"money: effects add up to {total}, expected {expected_total}")
    return violations


def _canonical(value: Any) -> str:
    """The checker's own canonical JSON (it does not borrow the envelope's): 1 and 1.0 differ."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _losses_and_doubles(state: FileState, sent: Mapping[str, Payload], valid: set[str]) -> tuple[int, int]:
    """Losses: a sent event not stored, a valid event not done, a done message without its effect
    (and without the proof of a receipt).
    Doubles: more than one effect for an event, an effect without a done message, an effect of an
    operation whose receipt names another event's effect."""
    messages = {m.event_id: m for m in state.messages}
    effects = Counter(e for e, _, _ in state.effects)
    lost = sum(1 for e in sent if e not in messages)
    lost += sum(1 for e in valid if e in messages and messages[e].state != "done")
    lost += sum(1 for m in state.messages
                if m.state == "done" and effects[m.event_id] == 0 and state.receipt_proof(m) is None)
    doubled = sum(n - 1 for n in effects.values() if n > 1)
    doubled += sum(1 for e in effects if e not in messages or messages[e].state != "done")
    doubled += sum(1 for m in state.messages if effects[m.event_id]
                   and (r := state.receipt_of(m)) is not None and r[3] != m.event_id)
    return lost, doubled


def finish_queue(db: str | Path, now: int, *, categories: Sequence[str] = (), lease_seconds: int = 2,
                 receipts: bool = False, max_passes: int = 1_000) -> int:
    """A fresh worker finishes the queue: work, let model time pass, until nothing is ready or leased.

    Time jumps to the next moment something becomes claimable (a backoff ends,
    a lease runs out). Returns the model time at which the queue was finished.
    With ``receipts``, the worker completes under a ``ReceiptHandler`` (the
    operation named by the payload's ``tenant`` and ``operation``).
    """
    clock = ModelClock(now)
    store = Store(db, clock=clock, create=False)
    handler: Handler | ReceiptHandler = Handler.with_categories(categories)
    if receipts:
        handler = ReceiptHandler(handler)
    for _ in range(max_passes):
        work(store, handler, lease_seconds=lease_seconds)
        pending = [m for m in store.messages() if m.state in ("ready", "leased")]
        if not pending:
            return clock.now()
        due = min(max(m.available_at, m.lease_until or 0) for m in pending)
        clock.set(max(due, clock.now() + 1))
    raise RuntimeError(f"the queue was not finished after {max_passes} passes")


# ==================================================================== crash matrix

BOOK, PEN, TOY = "book", "pen", "toy"
DEMO_EVENTS: dict[str, Payload] = {
    "E0001": {"category": BOOK, "amount_cents": 10000},
    "E0002": {"category": PEN, "amount_cents": 2000},
    "E0003": {"category": BOOK, "amount_cents": 5000},
    "E0004": {"category": TOY, "amount_cents": 3000},  # dead: this handler version does not know toys
}
START = 1000
LEASE = 2

Final = tuple[str, int, int, str | None]  # state, attempts, generation, last_error
_DONE: Final = ("done", 1, 1, None)
_DEMO_FINAL: dict[str, Final] = {
    "E0001": _DONE, "E0002": _DONE, "E0003": _DONE, "E0004": ("dead", 1, 1, "invalid_payload"),
}
ROLLED_BACK, COMMITTED = "rolled back", "committed"


def batch_text(events: Mapping[str, Payload], *, repeat_first: bool = False) -> str:
    """A JSONL batch of ``events`` (optionally with its first line sent twice)."""
    lines = [json.dumps({"event_id": e, "payload": dict(p)}) for e, p in events.items()]
    if repeat_first and lines:
        lines.insert(1, lines[0])
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Scenario:
    """One write operation, prepared so that a child can run it and die inside it.

    ``setup`` prepares the queue file with the protocol's own API and returns
    the child's options (``now``, the lease, ...). ``expect`` gives the final
    state of every event after the fresh worker, as the specification predicts,
    for both outcomes a crash may have: the transaction was rolled back
    (a fault point before COMMIT) or it was committed (just after COMMIT).
    """

    key: str
    title: str
    operation: str
    events: Mapping[str, Payload]
    setup: Callable[[Store, ModelClock, Path], dict[str, Any]]
    expect: Mapping[str, Mapping[str, Final]]
    show: tuple[str, ...]
    categories: tuple[str, ...] = ()  # extra categories of the fresh worker's handler
    resend: str | None = None  # what the caller repeats when it heard no answer: "enqueue" or "redrive"
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


def _setup_claim_expired(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    lease = _claims(store, clock, (START, START + LEASE, START + 2 * LEASE))  # E0001 three times, each expired
    return {"now": lease.lease_until, "lease_seconds": LEASE}


def _setup_complete(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    return {"now": START, "lease": store.claim(LEASE)}


def _setup_complete_refused(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(DEMO_EVENTS))
    for _ in range(3):
        lease = store.claim(LEASE)
        assert lease is not None
        store.complete(lease, Handler())
    return {"now": START, "lease": store.claim(LEASE)}  # E0004, a toy


def _setup_fail(code: str, permanent: bool, claims: int) -> Callable[[Store, ModelClock, Path], dict[str, Any]]:
    def setup(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
        store.enqueue(batch_text(DEMO_EVENTS))
        lease = _claims(store, clock, [START + LEASE * n for n in range(claims)])
        return {"now": clock.now(), "lease": lease, "code": code, "permanent": permanent}
    return setup


REDRIVE_EVENTS: dict[str, Payload] = {**DEMO_EVENTS, "E0005": {"category": "bag", "amount_cents": 0}}


def _setup_redrive(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(REDRIVE_EVENTS))
    work(store, Handler(), lease_seconds=LEASE)  # E0004 (toy) and E0005 (amount 0) go dead
    clock.set(START + 1)
    return {"now": START + 1, "event_ids": ["E0004", "E0005"]}


def _both(final: Mapping[str, Final]) -> dict[str, dict[str, Final]]:
    return {ROLLED_BACK: dict(final), COMMITTED: dict(final)}


# The same operation (north's order-7 charge) arrives twice, under E0001 and E0002 (a producer that
# resent it under a new event id, a broker's redelivery); south's order-7 is another operation (tenants
# are namespaces); E0004 is a toy that this handler version refuses.
ORDER_7 = {"tenant": "north", "operation": "order-7:charge", "category": BOOK, "amount_cents": 10000}
RECEIPT_EVENTS: dict[str, Payload] = {
    "E0001": ORDER_7,
    "E0002": dict(ORDER_7),
    "E0003": {"tenant": "south", "operation": "order-7:charge", "category": PEN, "amount_cents": 2000},
    "E0004": {"tenant": "north", "operation": "order-8:charge", "category": TOY, "amount_cents": 3000},
}
NORTH_7, SOUTH_7 = ("north", "order-7:charge"), ("south", "order-7:charge")


def _setup_receipt_first(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(RECEIPT_EVENTS))
    return {"now": START, "lease": store.claim(LEASE)}  # E0001: effect + receipt + ACK


def _setup_receipt_reused(store: Store, clock: ModelClock, folder: Path) -> dict[str, Any]:
    store.enqueue(batch_text(RECEIPT_EVENTS))
    first = store.claim(LEASE)
    assert first is not None and first.event_id == "E0001"
    store.complete(first, ReceiptHandler(Handler()))
    return {"now": START, "lease": store.claim(LEASE)}  # E0002: ACKed on E0001's receipt


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "enqueue", "enqueue a batch", "enqueue", DEMO_EVENTS,
        _setup_enqueue, _both(_DEMO_FINAL), ("E0003", "E0004"), resend="enqueue",
        spec="Two of the four events are stored already; the batch has five lines (one of them twice). "
             "It is stored whole or not at all; the producer, who heard no answer, sends it again, and "
             "what was stored counts as duplicates."),
    Scenario(
        "claim", "claim", "claim", DEMO_EVENTS, _setup_claim,
        {ROLLED_BACK: _DEMO_FINAL, COMMITTED: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)}}, ("E0001",),
        spec="The claim takes E0001. A committed claim whose worker died is a lease nobody works on: it "
             "expires and the next claim takes the message again with the next generation (attempt 2)."),
    Scenario(
        "claim-expired", "claim after a last lease expired", "claim",
        DEMO_EVENTS, _setup_claim_expired,
        {ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("dead", 3, 3, LEASE_EXPIRED)},
         COMMITTED: {**_DEMO_FINAL, "E0001": ("dead", 3, 3, LEASE_EXPIRED), "E0002": ("done", 2, 2, None)}},
        ("E0001", "E0002"),
        spec="E0001's three leases have all expired: the budget is spent. The claim moves it to dead "
             "(lease_expired) and leases the next message, E0002, in the same transaction."),
    Scenario(
        "complete", "complete → done", "complete", DEMO_EVENTS, _setup_complete,
        {ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)}, COMMITTED: _DEMO_FINAL}, ("E0001",),
        spec="The completion of E0001's lease: effect and ACK commit together or not at all; a rolled-back "
             "completion leaves the claim, which expires and is completed by generation 2."),
    Scenario(
        "complete-refused", "complete → dead (handler refuses)", "complete", DEMO_EVENTS,
        _setup_complete_refused,
        {ROLLED_BACK: {**_DEMO_FINAL, "E0004": ("dead", 2, 2, "invalid_payload")}, COMMITTED: _DEMO_FINAL},
        ("E0004",),
        spec="The completion of E0004, a toy that this handler version refuses: a permanent failure goes "
             "to dead with its code, without an effect."),
    Scenario(
        "fail-temporary", "fail, temporary", "fail", DEMO_EVENTS,
        _setup_fail("timeout", False, 1),
        {ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
         COMMITTED: {**_DEMO_FINAL, "E0001": ("done", 2, 2, "timeout")}}, ("E0001",),
        spec="The worker reports a temporary failure of E0001: back to ready with a backoff of 1 s; "
             "attempt 2 completes it."),
    Scenario(
        "fail-permanent", "fail, permanent", "fail", DEMO_EVENTS, _setup_fail("rejected", True, 1),
        {ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)},
         COMMITTED: {**_DEMO_FINAL, "E0001": ("dead", 1, 1, "rejected")}}, ("E0001",),
        spec="The worker reports a permanent failure of E0001: straight to dead, keeping its code; if that "
             "was rolled back, the message is simply worked again (and this handler accepts it)."),
    Scenario(
        "fail-last", "fail, temporary, last attempt", "fail", DEMO_EVENTS,
        _setup_fail("timeout", False, 3),
        {ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("dead", 3, 3, LEASE_EXPIRED)},
         COMMITTED: {**_DEMO_FINAL, "E0001": ("dead", 3, 3, "timeout")}}, ("E0001",),
        spec="A temporary failure of E0001 on its third attempt ends in dead with its code; if it was "
             "rolled back, the third lease expires and the next claim records lease_expired."),
    Scenario(
        "redrive", "redrive two dead letters", "redrive",
        REDRIVE_EVENTS, _setup_redrive,
        _both({**_DEMO_FINAL, "E0004": ("done", 1, 2, "invalid_payload"),
               "E0005": ("dead", 1, 2, "invalid_payload")}),
        ("E0004", "E0005"), categories=(TOY,), resend="redrive",
        spec="E0004 (a toy, now supported by the fresh worker) and E0005 (amount 0, still invalid) are "
             "redriven together: attempts reset, generation kept, all or none; the operator redrives what is "
             "still dead. Redriving without fixing the cause sends E0005 back to dead."),
    Scenario(
        "complete-receipt-first", "complete under a receipt, first time", "complete", RECEIPT_EVENTS,
        _setup_receipt_first,
        {ROLLED_BACK: {**_DEMO_FINAL, "E0001": ("done", 2, 2, None)}, COMMITTED: _DEMO_FINAL},
        ("E0001", "E0002"),
        receipts={ROLLED_BACK: {NORTH_7: "E0002", SOUTH_7: "E0003"},
                  COMMITTED: {NORTH_7: "E0001", SOUTH_7: "E0003"}},
        spec="E0001 and E0002 carry the same operation (north, order-7:charge); the worker completes E0001 "
             "under a ReceiptHandler: effect, receipt and ACK commit together or not at all. Rolled back, "
             "the fresh worker reaches E0002 first (E0001 is still leased): E0002 gets the effect and the "
             "receipt, and generation 2 of E0001 is ACKed on that receipt. The money counts the operation once."),
    Scenario(
        "complete-receipt-reused", "complete on an existing receipt", "complete", RECEIPT_EVENTS,
        _setup_receipt_reused,
        {ROLLED_BACK: {**_DEMO_FINAL, "E0002": ("done", 2, 2, None)}, COMMITTED: _DEMO_FINAL},
        ("E0001", "E0002"),
        receipts={ROLLED_BACK: {NORTH_7: "E0001", SOUTH_7: "E0003"},
                  COMMITTED: {NORTH_7: "E0001", SOUTH_7: "E0003"}},
        spec="E0001 is done with its effect and the receipt of (north, order-7:charge); the worker "
             "completes E0002, the same operation under another event id: it is ACKed on the proof of "
             "the receipt, without a second effect. Rolled back, generation 2 of E0002 does the same."),
)


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
    after_crash: str  # ROLLED_BACK, COMMITTED, or "partial" (a violation)
    shown_after_crash: str
    resent: str
    shown_final: str
    total_cents: int
    expected_total: int
    losses: int  # sent events not stored, events that should be done and are not, done without effect
    doubles: int  # events with more than one effect, effects without a done message
    violations: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.point if self.repeats == 1 else f"{self.point} #{self.hit}"

    @property
    def ok(self) -> bool:
        return not self.violations


def _describe(state: FileState, ids: Sequence[str]) -> str:
    parts = []
    effects = {e for e, _, _ in state.effects}
    for event_id in ids:
        m = state.message(event_id)
        text = f"{event_id} absent" if m is None else f"{event_id} {m.state} {m.attempts}/{m.generation}"
        if m is not None and m.state == "done" and event_id not in effects:
            proof = state.receipt_proof(m)
            text += f" on {proof[3]}'s receipt" if proof else " without effect"
        parts.append(text)
    return ", ".join(parts)


@dataclass
class _Prepared:
    scenario: Scenario
    template: Path
    options: dict[str, Any]
    before: Any
    after: Any
    reached: list[tuple[str, int, int]]  # point, hit, how many times reached


def _prepare(scenario: Scenario, folder: Path) -> _Prepared:
    folder.mkdir(parents=True, exist_ok=True)
    template = folder / "template.sqlite3"
    clock = ModelClock(START)
    options = scenario.setup(Store(template, clock=clock), clock, folder)
    if scenario.receipts is not None:
        options["receipts"] = True  # the child completes under a ReceiptHandler
    before = read_file(template).rows()
    # The reference run: the same operation in a child that does not die. It
    # gives the state a committed operation leaves, and the fault points it
    # reaches, in order.
    reference = folder / "reference.sqlite3"
    shutil.copyfile(template, reference)
    traced = subprocess.run(child_command(reference, scenario.operation, trace=True, **options),
                            capture_output=True, text=True, check=False)
    if traced.returncode != 0:
        raise RuntimeError(f"{scenario.key}: the reference run failed: {traced.stderr}")
    points = traced.stdout.split()
    counts = Counter(points)
    seen: Counter[str] = Counter()
    reached = []
    for point in points:
        seen[point] += 1
        reached.append((point, seen[point], counts[point]))
    return _Prepared(scenario, template, options, before, read_file(reference).rows(), reached)


def _run_case(prepared: _Prepared, point: str, hit: int, repeats: int, how: str, folder: Path) -> CrashRow:
    scenario = prepared.scenario
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "queue.sqlite3"
    shutil.copyfile(prepared.template, db)
    violations: list[str] = []
    command = child_command(db, scenario.operation, point=point, hit=hit, how=how, **prepared.options)
    child = subprocess.run(command, capture_output=True, text=True, check=False)
    expected_status = CRASH_EXIT_CODE if how == "exit" else -signal.SIGKILL
    if child.returncode != expected_status:
        violations.append(f"the child exited with {child.returncode}, expected {expected_status} "
                          f"{child.stderr.strip()[-300:]}")

    crashed = read_file(db)
    expected_outcome = COMMITTED if point.endswith(".after_commit") else ROLLED_BACK
    if crashed.rows() == prepared.before:
        outcome = ROLLED_BACK
    elif crashed.rows() == prepared.after:
        outcome = COMMITTED
    else:
        outcome = "partial"
    if outcome != expected_outcome:
        violations.append(f"after the crash the file is {outcome}, expected {expected_outcome}")
    violations += [f"after the crash: {v}" for v in check_invariants(crashed, finished=False)]

    # What the caller does when it heard no answer, then a fresh worker.
    now = prepared.options["now"]
    resent = ""
    store = Store(db, clock=ModelClock(now), create=False)
    if scenario.resend == "enqueue":
        result = store.enqueue(Path(prepared.options["batch"]).read_bytes())
        resent = f"resent: {result.accepted} accepted, {result.duplicates} duplicates"
    elif scenario.resend == "redrive":
        still_dead = [e for e in prepared.options["event_ids"] if store.message(e).state == "dead"]
        if still_dead:
            store.redrive(still_dead)
        resent = f"redriven again: {', '.join(still_dead) or 'none'}"
    finish_queue(db, now, categories=scenario.categories, lease_seconds=LEASE,
                 receipts=scenario.receipts is not None)

    final = read_file(db)
    branch = COMMITTED if outcome == COMMITTED else ROLLED_BACK
    expected = scenario.expect[branch]
    holders = scenario.effect_holders(branch)  # an operation ACKed twice counts once
    expected_total = sum(int(scenario.events[e]["amount_cents"]) for e in holders)
    violations += check_invariants(final, events=scenario.events, expected_total=expected_total)
    for event_id, want in expected.items():
        m = final.message(event_id)
        got = None if m is None else (m.state, m.attempts, m.generation, m.last_error)
        if got != want:
            violations.append(f"{event_id} ended as {got}, the specification says {want}")
    if {e for e, _, _ in final.effects} != holders:
        violations.append(f"effects of {sorted(e for e, _, _ in final.effects)}, "
                          f"the specification says {sorted(holders)}")
    if scenario.receipts is not None:
        got_receipts = {(t, o): effect for t, o, _, effect in final.receipts}
        if got_receipts != dict(scenario.receipts[branch]):
            violations.append(f"receipts {got_receipts}, the specification says {dict(scenario.receipts[branch])}")
    should_be_done = {e for e, f in expected.items() if f[0] == "done"}
    lost, doubled = _losses_and_doubles(final, scenario.events, should_be_done)
    return CrashRow(
        scenario=scenario.key, operation=scenario.operation, point=point, hit=hit, repeats=repeats, how=how,
        exit_status=child.returncode, after_crash=outcome,
        shown_after_crash=_describe(crashed, scenario.show), resent=resent,
        shown_final=_describe(final, scenario.show),
        total_cents=sum(a for _, _, a in final.effects), expected_total=expected_total,
        losses=lost, doubles=doubled, violations=tuple(violations),
    )


@contextmanager
def _folder(workdir: str | Path | None) -> Iterator[Path]:
    if workdir is not None:
        path = Path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix="queue-core-evidence-") as name:
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
    to learn which fault points it reaches (and the state a commit leaves);
    then, for every reached point and every way of dying, copy the prepared
    file, let a child die there, check the file, let the caller resend what it
    got no answer for, let a fresh worker finish the queue, and check every
    invariant and the final state the specification predicts.

    ``jobs`` cases run at once, each in its own folder (default: twice the
    number of CPUs, at most 8; a case mostly waits for its child process).
    """
    with _folder(workdir) as root:
        prepared = [_prepare(s, root / s.key) for s in scenarios]
        cases = [(p, point, hit, repeats, how)
                 for p in prepared for point, hit, repeats in p.reached for how in hows]

        def run(index: int) -> CrashRow:
            p, point, hit, repeats, how = cases[index]
            return _run_case(p, point, hit, repeats, how, root / p.scenario.key / f"case-{index:03d}")

        with ThreadPoolExecutor(max_workers=jobs or min(8, 2 * (os.cpu_count() or 1))) as pool:
            return list(pool.map(run, range(len(cases))))


def points_covered(rows: Sequence[CrashRow]) -> set[str]:
    """The fault points at which a child died in ``rows``."""
    return {row.point for row in rows}


def uncovered_points(rows: Sequence[CrashRow]) -> set[str]:
    """Fault points of ``faults.POINTS`` that no case of ``rows`` reached."""
    return set(faults.POINTS) - points_covered(rows)


# ========================================================== processes on one file

QUEUE_CORE = (sys.executable, "-m", "queue_core")  # the real command line, as `queue-core` runs it


def _has_open(pid: int, path: Path) -> bool:
    """True if process ``pid`` has ``path`` open (Linux ``/proc``; False elsewhere)."""
    target = str(path.resolve())
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    except OSError:
        pass
    return False


def _wait_until_open(process: subprocess.Popen, path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if _has_open(process.pid, path):
            return True
        time.sleep(0.002)
    return False


@dataclass
class _Worker:
    process: subprocess.Popen
    started: float
    ended: float | None = None
    killed: bool = False


@contextmanager
def _reaping() -> Iterator[list[subprocess.Popen]]:
    """Collects the processes a run starts; kills those still running if the run fails."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.communicate()


def _start(command: Sequence[str], started: list[subprocess.Popen]) -> subprocess.Popen:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started.append(process)
    return process


def _start_worker(db: Path, now: int, started: list[subprocess.Popen],
                  lease_seconds: int | None = None) -> _Worker:
    command = [*QUEUE_CORE, "--db", str(db), "--now", str(now), "work"]
    if lease_seconds is not None:
        command += ["--lease-seconds", str(lease_seconds)]
    return _Worker(_start(command, started), time.monotonic())


def _wait_all(workers: Sequence[_Worker], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while any(w.ended is None for w in workers):
        for w in workers:
            if w.ended is None and w.process.poll() is not None:
                w.ended = time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError("worker processes did not finish in time")
        time.sleep(0.005)


def _outcome(worker: _Worker) -> dict[str, Any]:
    out, err = worker.process.communicate()
    status = worker.process.returncode
    summary = None
    if status == 0:
        try:
            summary = json.loads(out)
        except ValueError:
            summary = None
    return {"status": status, "summary": summary, "stderr": err.strip(), "killed": worker.killed,
            "traceback": "Traceback" in err}


# ===================================================================== contention


def contention(workdir: str | Path | None = None, *, workers: int = 8, events: int = 400,
               hold_extra_seconds: float = 0.5) -> dict[str, Any]:
    """``workers`` ``queue-core work`` processes on one file, all made to wait out the write lock.

    The file gets ``events`` messages. The write lock is taken (a protocol
    transaction left open) before the workers start and is held until every
    worker has the file open and is waiting for it, plus SQLite's busy timeout
    and ``hold_extra_seconds``: each worker's first claim therefore runs out
    its busy timeout, gets "busy", backs off and retries. Then the lock is
    released and they share the work. Returns the figures, including each
    worker's share.
    """
    with _folder(workdir) as root, _reaping() as started_processes:
        db = root / "queue.sqlite3"
        sent = {f"E{n:04d}": {"category": PEN, "amount_cents": n} for n in range(1, events + 1)}
        Store(db, clock=ModelClock(START)).enqueue(batch_text(sent))
        holder = Store(db, clock=ModelClock(START))
        started = time.monotonic()
        with holder.transaction("hold_the_lock"):
            crowd = [_start_worker(db, START, started_processes) for _ in range(workers)]
            waiting = [_wait_until_open(w.process, db, timeout=60) for w in crowd]
            time.sleep(BUSY_TIMEOUT_MS / 1000 + hold_extra_seconds)
            held = time.monotonic() - started
        _wait_all(crowd)
        seconds = time.monotonic() - started
        outcomes = [_outcome(w) for w in crowd]
        state = read_file(db)
        violations = check_invariants(state, events=sent, expected_total=sum(range(1, events + 1)))
        lost, doubled = _losses_and_doubles(state, sent, set(sent))
        shares = [o["summary"]["done"] if o["summary"] else None for o in outcomes]
        return {
            "workers": workers,
            "events": events,
            "busy_timeout_seconds": BUSY_TIMEOUT_MS / 1000,
            "lock_held_seconds": round(held, 2),
            "all_waiting_before_the_countdown": all(waiting),
            "exit_statuses": [o["status"] for o in outcomes],
            "tracebacks": sum(o["traceback"] for o in outcomes),
            "stderr_lines": sum(len(o["stderr"].splitlines()) for o in outcomes),
            "shares_done": shares,
            "claimed": sum(o["summary"]["claimed"] for o in outcomes if o["summary"]),
            "done": sum(s for s in shares if s is not None),
            "lease_lost": sum(o["summary"]["lease_lost"] for o in outcomes if o["summary"]),
            "worker_seconds": [round((w.ended or 0) - w.started, 2) for w in crowd],
            "seconds": round(seconds, 2),
            "total_cents": sum(a for _, _, a in state.effects),
            "expected_cents": sum(range(1, events + 1)),
            "losses": lost,
            "doubles": doubled,
            "violations": violations,
        }


# ========================================================================== chaos

QUICK = {"rounds": 10, "events_per_round": 200, "workers": 3, "max_kills_per_round": 5}
LONG = {"rounds": 45, "events_per_round": 220, "workers": 5, "max_kills_per_round": 10}  # 9,900 events
MAX_EVENTS = 9_999  # event ids are E0001..E9999 in one file
ROUND_STEP_SECONDS = 10  # model time between rounds: longer than any lease or backoff of the run


def chaos(
    workdir: str | Path | None = None,
    *,
    rounds: int = QUICK["rounds"],
    events_per_round: int = QUICK["events_per_round"],
    workers: int = QUICK["workers"],
    max_kills_per_round: int = QUICK["max_kills_per_round"],
    producer_kill_chance: float = 0.5,
    toy_share: float = 0.05,
    stagger_seconds: int = 2,
    lease_seconds: int = 2,
    seed: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Random SIGKILLs of real ``queue-core`` processes on one file, round after round; then a final pass.

    Each round: a producer (``queue-core enqueue``) sends a batch of new events
    (a few of them toys, which this handler refuses) plus a few lines already
    sent; with ``producer_kill_chance`` it is SIGKILLed at a random moment once
    it has the file open, and then it sends the same batch again until it gets
    an answer. Then ``workers`` ``queue-core work`` processes run; at random
    moments (up to ``max_kills_per_round`` times) one of them, once it has the
    file open, is SIGKILLed and replaced. Worker ``i`` reads the model clock
    ``i % (stagger_seconds + 1)`` seconds later than worker 0, with leases of
    ``lease_seconds``: a later worker finds an earlier one's lease expired and
    takes the message over while the earlier one may still be working on it,
    like a worker that paused longer than its lease. Each round starts
    ``ROUND_STEP_SECONDS`` of model time after the previous one, so abandoned
    leases have expired.

    The final pass: a fresh worker finishes the queue, the dead letters whose
    three leases all ran out (``lease_expired``, a price of the kills) are
    redriven, and the queue is finished again. Then every invariant is checked:
    every valid event done with exactly one effect, every toy dead with its
    reason, and the money exact.
    """
    if rounds * events_per_round > MAX_EVENTS:
        raise ValueError(f"at most {MAX_EVENTS} events fit in one file (event ids E0001..E9999)")
    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    say = progress or (lambda _message: None)
    figures: Counter[str] = Counter()
    outcomes: list[dict[str, Any]] = []
    violations: list[str] = []
    sent: dict[str, Payload] = {}
    began = time.monotonic()
    with _folder(workdir) as root, _reaping() as started_processes:
        db = root / "queue.sqlite3"
        Store(db, clock=ModelClock(START))
        now = START
        next_id = 1
        for round_number in range(1, rounds + 1):
            now += ROUND_STEP_SECONDS
            new: dict[str, Payload] = {}
            for _ in range(events_per_round):
                category = TOY if rng.random() < toy_share else rng.choice((BOOK, PEN, "bag"))
                new[f"E{next_id:04d}"] = {"category": category, "amount_cents": rng.randint(1, 99_999)}
                next_id += 1
            again = {e: sent[e] for e in rng.sample(sorted(sent), min(len(sent), 10))}
            sent.update(new)
            batch = root / f"batch-{round_number:03d}.jsonl"
            batch.write_text(batch_text({**again, **new}), encoding="utf-8")
            figures["lines_sent"] += len(again) + len(new)

            # The producer: maybe killed, then it resends the same batch until it hears an answer.
            kill_producer = rng.random() < producer_kill_chance
            killed_producer = False
            while True:
                producer = _start([*QUEUE_CORE, "--db", str(db), "--now", str(now), "enqueue", str(batch)],
                                  started_processes)
                if kill_producer:
                    kill_producer = False
                    if _wait_until_open(producer, db, timeout=5):
                        time.sleep(rng.uniform(0, 0.01))
                    if producer.poll() is None:
                        producer.kill()
                        killed_producer = True
                        figures["producer_kills"] += 1
                out, err = producer.communicate(timeout=120)
                if producer.returncode == 0:
                    answer = json.loads(out)
                    if answer["accepted"] not in (0, len(new)):
                        violations.append(f"round {round_number}: a batch was stored in part: {answer}")
                    if killed_producer and answer["accepted"] == 0:
                        figures["producer_kills_after_its_commit"] += 1
                    break
                if producer.returncode != -signal.SIGKILL:
                    violations.append(f"round {round_number}: the producer failed: {err.strip()[-300:]}")
                    break
                figures["producer_resends"] += 1

            # The workers, killed at random moments and replaced.
            def start(slot: int) -> _Worker:
                figures["worker_processes"] += 1
                return _start_worker(db, now + slot % (stagger_seconds + 1), started_processes, lease_seconds)

            crowd = [start(slot) for slot in range(workers)]
            kills = rng.randint(1, max_kills_per_round) if max_kills_per_round else 0
            while True:
                alive = [w for w in crowd if w.process.poll() is None]
                if not alive:
                    break
                if kills == 0:
                    time.sleep(0.01)
                    continue
                time.sleep(rng.uniform(0.0, 0.12))
                victim = rng.choice(alive)
                if _wait_until_open(victim.process, db, timeout=0.5):
                    time.sleep(rng.uniform(0, 0.01))
                    opened = True
                else:
                    opened = False
                if victim.process.poll() is None:
                    victim.process.send_signal(signal.SIGKILL)
                    victim.killed = True
                    figures["worker_kills"] += 1
                    figures["worker_kills_with_the_file_open"] += opened
                    crowd.append(start(crowd.index(victim)))
                kills -= 1
            _wait_all(crowd)
            outcomes += [_outcome(w) for w in crowd]
            say(f"round {round_number}/{rounds}: {len(sent)} events sent, "
                f"{figures['worker_kills']} worker kills so far")

        # The final pass: a fresh worker, then the operator redrives what the kills pushed to dead.
        now = finish_queue(db, now + ROUND_STEP_SECONDS, lease_seconds=lease_seconds)
        store = Store(db, clock=ModelClock(now), create=False)
        expired = [m.event_id for m in store.dead_letters() if m.last_error == LEASE_EXPIRED]
        if expired:
            store.redrive(expired)
            finish_queue(db, now, lease_seconds=lease_seconds)
        state = read_file(db)

    valid = {e for e, p in sent.items() if p["category"] != TOY}
    expected_total = sum(int(sent[e]["amount_cents"]) for e in valid)
    violations += check_invariants(state, events=sent, expected_total=expected_total)
    by_state = Counter(m.state for m in state.messages)
    for m in state.messages:
        if m.state == "dead" and (m.event_id in valid or m.last_error != "invalid_payload"):
            violations.append(f"{m.event_id} is dead ({m.last_error}) after the final pass")
    lost, doubled = _losses_and_doubles(state, sent, valid)
    errors = [o for o in outcomes if not o["killed"] and (o["status"] != 0 or o["traceback"])]
    doubled += sum("constraint_violation" in o["stderr"] for o in outcomes)
    violations += [f"a worker exited with {o['status']}: {o['stderr'][-300:]}" for o in errors]
    clean = [o["summary"] for o in outcomes if o["summary"]]
    return {
        "seed": seed,
        "rounds": rounds,
        "workers_at_once": workers,
        "lease_seconds": lease_seconds,
        "clock_stagger_seconds": stagger_seconds,
        "round_step_seconds": ROUND_STEP_SECONDS,
        "events": len(sent),
        "valid_events": len(valid),
        "toys": len(sent) - len(valid),
        "lines_sent": figures["lines_sent"],
        "producer_kills": figures["producer_kills"],
        "producer_resends": figures["producer_resends"],
        "producer_kills_after_its_commit": figures["producer_kills_after_its_commit"],
        "worker_processes": figures["worker_processes"],
        "worker_kills": figures["worker_kills"],
        "worker_kills_with_the_file_open": figures["worker_kills_with_the_file_open"],
        "kills": figures["worker_kills"] + figures["producer_kills"],
        "clean_worker_exits": len(clean),
        "worker_errors": len(errors),
        "tracebacks": sum(o["traceback"] for o in outcomes),
        "lease_lost_reported": sum(s["lease_lost"] for s in clean),
        "completed_by_a_later_generation": sum(m.state == "done" and m.generation > 1 for m in state.messages),
        "lease_expired_redriven": len(expired),
        "done": by_state["done"],
        "dead": by_state["dead"],
        "total_cents": sum(a for _, _, a in state.effects),
        "expected_cents": expected_total,
        "losses": lost,
        "doubles": doubled,
        "violations": violations,
        "seconds": round(time.monotonic() - began, 1),
    }


# ======================================================================== records
#
# The tests run the evidence and leave a record of what they found; the page
# "How we know" shows the record if it was made for exactly this code (same
# fingerprint, same parameters), and otherwise runs the evidence itself while
# the site is built. Either way the page shows figures measured on this code.


def fingerprint() -> str:
    """A short hash of queue_core's code and schema: a record is fresh only for the same code."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted([*root.glob("*.py"), root / "schema.sql"]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def default_record_folder() -> Path | None:
    """``test-artifacts/evidence`` in the source tree (git-ignored; ``make clean`` removes it).

    None when queue_core is not running from a source tree (an installed copy keeps no records).
    """
    root = Path(__file__).resolve().parent.parent
    return root / "test-artifacts" / "evidence" if (root / "pyproject.toml").is_file() else None


def _jsonable(value: Any) -> Any:
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return value


def save_record(name: str, params: Mapping[str, Any], result: Any, *, by: str, seconds: float,
                folder: Path | None = None) -> dict[str, Any]:
    """Write ``result`` as the record ``name`` (JSON) and return the record."""
    record = {
        "name": name,
        "fingerprint": fingerprint(),
        "params": dict(params),
        "by": by,
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(seconds, 1),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "system": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "result": _jsonable(result),
    }
    folder = folder or default_record_folder()
    if folder is None:
        return record
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    except OSError:
        pass  # a read-only tree: the record is still returned
    return record


def load_record(name: str, params: Mapping[str, Any], *, folder: Path | None = None) -> dict[str, Any] | None:
    """The record ``name`` if it exists and was made for this code and these parameters, else None."""
    folder = folder or default_record_folder()
    if folder is None:
        return None
    path = folder / f"{name}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    same_params = record.get("params") == json.loads(json.dumps(dict(params)))
    if record.get("fingerprint") != fingerprint() or not same_params:
        return None
    return record


def recorded(name: str, params: Mapping[str, Any], run: Callable[[], Any], *, by: str,
             folder: Path | None = None) -> dict[str, Any]:
    """The fresh record ``name``, or run ``run()`` now and record it (``by`` says who ran it)."""
    record = load_record(name, params, folder=folder)
    if record is None:
        began = time.monotonic()
        result = run()
        record = save_record(name, params, result, by=by, seconds=time.monotonic() - began, folder=folder)
    return record


def crash_rows(record: Mapping[str, Any]) -> list[CrashRow]:
    """The crash matrix rows of a record."""
    return [CrashRow(**{**row, "violations": tuple(row["violations"])}) for row in record["result"]]
