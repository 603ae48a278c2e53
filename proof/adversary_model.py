"""The adversary's model: what the promise says the database must hold, and the checks.

The model does not predict the queue's bookkeeping (which message a claim
takes, when a retry comes back: ``tests/test_model.py`` does that). It keeps
what the promise is about, learnt from what user code saw:

* ``sent``: each (queue, event_id) stored, with the payload it was first sent
  with ("the same event sent again is stored once");
* ``acked``: for each message whose ACK user code saw commit, the attempt
  that ACKed it (its lease's generation and claim token, the code that ran,
  the rows it wrote), or, under receipts, the receipt it was ACKed on;
* ``receipts``: per (scope, tenant, operation) the first effect recorded
  under it: a queue's message, or code outside any queue;
* ``outside``: the rows such outside code committed.

Two kinds of judgement use it. Before an attempt, ``predict`` says from the
database's state what the promise lets happen: the ACK only while the lease
passes the fence, never after a failed statement or a refusal, and under
receipts the first effect of the scope or a reuse of it; the step then
compares with what the store did (``judge``). After every step, ``check``
reads the whole database (a snapshot through a connection of its own) and
holds every clause against it. A broken clause raises ``PromiseBroken``
naming it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from queue_core import Lease
from queue_core.envelope import canonical_json

from proof.adversary_db import EffectRow, MessageRow, Snapshot

__all__ = [
    "CLAUSES",
    "Attempt",
    "Owner",
    "PromiseBroken",
    "Truth",
    "Verdict",
    "check",
    "fence_passes",
    "judge",
]

# The promise's clauses the adversary holds (docs/includes/promise.md), by short name.
CLAUSES: Final = {
    "stored once": "the same event sent again is stored once",
    "effect and ACK together": "the effect and the ACK commit in one transaction, or neither does",
    "the fence": "the ACK commits only while the lease passes the fence",
    "at most once": "however often a message is delivered, its effect commits at most once",
    "exactly one effect": "a message that ends done has exactly one committed effect behind it",
    "failed statement": "a statement that failed refuses the ACK, even one the handler caught",
    "refusal": "a handler that refuses (raises) is refused, and nothing it wrote stays",
    "at least once": "a message whose lease ran out, or that is ready, is delivered again",
    "receipts": "under receipts, the second message of a scope is ACKed on the first one's "
                "effect; one operation in two scopes makes two effects",
    "completion": "a handler that returns while the lease passes the fence is ACKed "
                  "(the documented completion)",
}


class PromiseBroken(AssertionError):
    """A clause of the promise did not hold: ``clause`` names it, the message says how."""

    def __init__(self, clause: str, detail: str) -> None:
        super().__init__(f"[{clause}] {CLAUSES[clause]}: {detail}")
        self.clause = clause


@dataclass(frozen=True)
class Attempt:
    """An attempt whose ACK committed: the lease it ran under and the rows its code wrote."""

    queue: str
    event_id: str
    generation: int
    token: int
    kind: str
    rows: tuple[EffectRow, ...]  # its own effect (empty: it wrote nothing, or it reused a receipt)
    reused: Owner | None = None  # under receipts: the first effect it was ACKed on
    tenant: str = ""  # its payload's receipt key
    operation: str = ""


@dataclass(frozen=True)
class Owner:
    """The first effect recorded under one receipt key: what the receipt names."""

    scope: str
    tenant: str
    operation: str
    payload: str  # canonical
    name: str  # the effect's reference: the message's event_id, or the outside code's id
    queue: str | None  # the queue whose message wrote it; None: code outside any queue
    rows: tuple[EffectRow, ...]


@dataclass(frozen=True)
class Verdict:
    """What the promise lets an attempt end as."""

    outcome: str  # "done", "refused", "lease_lost" or "any" (the checks of the database judge it)
    reason: str  # why, in words (for the report)
    clause: str  # the clause broken if the store does otherwise
    reuse: Owner | None = None  # done under receipts on this first effect
    refusal: str | None = None  # the code a refusal is recorded with
    permanent: bool = False
    tolerant: bool = False  # any end but done will do (how a doomed attempt ends is not promised)


def fence_passes(row: MessageRow | None, lease: Lease, now: int) -> bool:
    """The fence, from the database's state: leased, same generation and claim token, now < lease_until."""
    return (row is not None and row.state == "leased" and row.generation == lease.generation
            and row.token == lease.token and row.lease_until is not None and now < row.lease_until)


@dataclass
class Truth:
    """What the promise says the database holds, learnt from what user code saw."""

    max_attempts: Mapping[str, int]
    sent: dict[tuple[str, str], str] = field(default_factory=dict)
    acked: dict[tuple[str, str], Attempt] = field(default_factory=dict)
    receipts: dict[tuple[str, str, str], Owner] = field(default_factory=dict)
    outside: list[EffectRow] = field(default_factory=list)

    # ----------------------------------------------------------- sending

    def send(self, queue: str, event_id: str, payload: Mapping[str, Any]) -> str:
        """"new", "duplicate" or "conflict": what sending this event must do."""
        text = canonical_json(payload)
        stored = self.sent.get((queue, event_id))
        if stored is None:
            self.sent[(queue, event_id)] = text
            return "new"
        return "duplicate" if stored == text else "conflict"

    # ------------------------------------------------------------ receipts

    def receipt(self, scope: str, payload: Mapping[str, Any],
                pending: Mapping[tuple[str, str, str], Owner] | None = None) -> tuple[str, Owner | None]:
        """Under receipts in ``scope``: ("own", None), ("reuse", owner) or ("conflict", owner)."""
        key = (scope, str(payload["tenant"]), str(payload["operation"]))
        owner = (pending or {}).get(key) or self.receipts.get(key)
        if owner is None:
            return "own", None
        return ("reuse" if owner.payload == canonical_json(payload) else "conflict"), owner

    def own(self, scope: str, payload: Mapping[str, Any], attempt: Attempt) -> Owner:
        """The receipt a first effect under ``scope`` writes (the queue's message names it)."""
        return Owner(scope, str(payload["tenant"]), str(payload["operation"]),
                     canonical_json(payload), attempt.event_id, attempt.queue, attempt.rows)

    # ------------------------------------------------------------ learning

    def ack(self, attempt: Attempt, owner: Owner | None = None) -> None:
        """User code saw this attempt's ACK commit (and, first under its key, its receipt)."""
        self.acked[(attempt.queue, attempt.event_id)] = attempt
        if owner is not None:
            self.receipts.setdefault((owner.scope, owner.tenant, owner.operation), owner)

    def record_outside(self, owner: Owner) -> None:
        """Code outside any queue committed an effect under a receipt."""
        self.receipts[(owner.scope, owner.tenant, owner.operation)] = owner
        self.outside.extend(owner.rows)

    def purge(self, keys: Iterable[tuple[str, str]]) -> None:
        """Purged messages are forgotten: sent again, they are new."""
        for key in keys:
            self.sent.pop(key, None)


def judge(verdict: Verdict, outcome: str, code: str | None = None, *, what: str) -> None:
    """Compare what the store did with what the promise lets it do; ``PromiseBroken`` if it broke a clause.

    ``outcome`` is the completion's (done, retry, dead, lease_lost) or
    ``raised:<code>`` for a ``QueueError`` the call raised; ``code`` the
    completion's error code.
    """
    if verdict.outcome == "any":
        return
    if (outcome == "done") != (verdict.outcome == "done"):
        said = "ACKed it" if outcome == "done" else f"said {outcome}"
        raise PromiseBroken(verdict.clause, f"{what}: the store {said}, but {verdict.reason}")
    if verdict.outcome == "lease_lost" and outcome not in ("lease_lost", "raised:lease_lost"):
        raise PromiseBroken("the fence", f"{what}: {verdict.reason}, yet the store said {outcome}")
    if verdict.outcome != "refused" or verdict.tolerant:
        return
    # refused: retried, or dead when permanent or the attempts are spent; with its code
    expected = ("dead",) if verdict.permanent else ("retry", "dead")
    if outcome not in expected or (verdict.refusal is not None and code != verdict.refusal):
        raise PromiseBroken(verdict.clause, f"{what}: {verdict.reason}; the store said {outcome} "
                                            f"({code}), expected {'/'.join(expected)} ({verdict.refusal})")


def check(snapshot: Snapshot, truth: Truth) -> None:
    """Every clause, held against the database: raises ``PromiseBroken`` on the first that fails."""
    _stored_once(snapshot, truth)
    _effects_with_their_ack(snapshot, truth)
    _done_has_exactly_one_effect(snapshot, truth)
    _receipts(snapshot, truth)


def _stored_once(snapshot: Snapshot, truth: Truth) -> None:
    # a pruned message keeps its payload's digest only: it stands for the payload it was sent with
    sent = {key: hashlib.sha256(text.encode()).hexdigest() for key, text in truth.sent.items()}
    stored = {(m.queue, m.event_id): m.payload if m.digest is None or m.digest != sent.get((m.queue, m.event_id))
              else truth.sent[(m.queue, m.event_id)] for m in snapshot.messages}
    if len(stored) != len(snapshot.messages):
        raise PromiseBroken("stored once", "a (queue, event_id) is stored twice")
    if stored != truth.sent:
        wrong = sorted(set(stored.items()) ^ set(truth.sent.items()))
        raise PromiseBroken("stored once", f"stored {sorted(stored.items())}, sent "
                                           f"{sorted(truth.sent.items())} (differ: {wrong})")


def _effects_with_their_ack(snapshot: Snapshot, truth: Truth) -> None:
    """Each committed row belongs to the ACK of the attempt it names (DB alone); one attempt per message."""
    attempts: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for row in snapshot.effects:
        if row.queue == "":
            continue  # code outside any queue: checked against the model below
        message = snapshot.message(row.queue, row.event_id)
        if (message is None or message.state != "done"
                or (message.generation, message.token) != (row.generation, row.token)):
            now = "absent" if message is None else (
                f"{message.state}, generation {message.generation}"
                f"{'' if message.token == row.token else ', another claim token'}")
            raise PromiseBroken(
                "effect and ACK together",
                f"row {row.part!r} of {row.table} written by {row.kind!r} for {row.queue}/"
                f"{row.event_id} under generation {row.generation} committed, but that "
                f"attempt's ACK did not: the message is {now}")
        attempts.setdefault((row.queue, row.event_id), set()).add((row.generation, row.token))
    for (queue, event_id), seen in attempts.items():
        if len(seen) > 1:
            raise PromiseBroken("at most once", f"{queue}/{event_id} has the committed effects of "
                                                f"{len(seen)} attempts")
    outside = sorted(r for r in snapshot.effects if r.queue == "")
    if outside != sorted(truth.outside):
        raise PromiseBroken("effect and ACK together",
                            f"code outside the queues committed {outside}, expected {truth.outside}")


def _done_has_exactly_one_effect(snapshot: Snapshot, truth: Truth) -> None:
    done = {(m.queue, m.event_id): m for m in snapshot.messages if m.state == "done"}
    if set(done) - set(truth.acked):
        raise PromiseBroken(
            "effect and ACK together",
            f"done in the database: {sorted(set(done) - set(truth.acked))}, but no completion user code "
            "saw commit ACKed it (the ACK committed outside the completion's transaction)")
    if set(truth.acked) - set(done):
        raise PromiseBroken("exactly one effect", f"ACKed, but not done in the database: "
                                                  f"{sorted(set(truth.acked) - set(done))}")
    rows: dict[tuple[str, str], list[EffectRow]] = {}
    for row in snapshot.effects:
        rows.setdefault((row.queue, row.event_id), []).append(row)
    for key, attempt in sorted(truth.acked.items(), key=lambda item: item[0]):
        message = done[key]
        if (message.generation, message.token) != (attempt.generation, attempt.token):
            raise PromiseBroken("exactly one effect", f"{key[0]}/{key[1]} is done under generation "
                                f"{message.generation}, ACKed under {attempt.generation}")
        got = Counter(rows.get(key, []))
        extra, missing = got - Counter(attempt.rows), Counter(attempt.rows) - got
        if extra:
            raise PromiseBroken(
                "effect and ACK together",
                f"{key[0]}/{key[1]} was ACKed by {attempt.kind!r} under generation "
                f"{attempt.generation}; rows of another attempt under that lease committed too, "
                f"without an ACK of their own: {[(r.table, r.part, r.kind) for r in extra]}")
        if missing:
            named = [(r.get("tenant"), r.get("operation"), r.get("effect")) for r in snapshot.receipts
                     if (r.get("tenant"), r.get("operation")) == (attempt.tenant, attempt.operation)]
            raise PromiseBroken(
                "exactly one effect",
                f"{key[0]}/{key[1]} is done and should have its own {len(attempt.rows)} row(s) of "
                f"{attempt.kind!r} behind it; the database holds none of "
                f"{[(r.table, r.part) for r in missing]}"
                + (f" (the receipt of its key names {named})" if named else ""))
        owner = attempt.reused
        if owner is not None:
            present = Counter(r for r in snapshot.effects if r in owner.rows)
            if present != Counter(owner.rows):
                raise PromiseBroken("receipts", f"{key[0]}/{key[1]} was ACKed on {owner.name}'s "
                                                f"effect, which is not in the database")


def _receipts(snapshot: Snapshot, truth: Truth) -> None:
    """Each stored receipt names the first effect of its key (and scope, where receipts have one)."""
    has_scope = any("scope" in dict(r.columns) for r in snapshot.receipts)
    expected: dict[tuple[str, ...], set[tuple[str, str | None]]] = {}
    for (scope, tenant, operation), owner in truth.receipts.items():
        named = (scope, tenant, operation) if has_scope else (tenant, operation)
        expected.setdefault(named, set()).add((owner.name, owner.queue))
    found: dict[tuple[str, ...], tuple[str, str | None]] = {}
    for receipt in snapshot.receipts:
        tenant, operation = str(receipt.get("tenant")), str(receipt.get("operation"))
        stored: tuple[str, ...] = ((str(receipt.get("scope")), tenant, operation) if has_scope
                                   else (tenant, operation))
        found[stored] = (str(receipt.get("effect")), receipt.get("effect_queue"))
    if set(found) != set(expected):
        raise PromiseBroken("receipts", f"stored receipts {sorted(found)}, expected {sorted(expected)}")
    for key, (name, queue) in found.items():
        if name not in {n for n, _ in expected[key]}:
            raise PromiseBroken("receipts", f"the receipt {key} names {name}, not the first effect "
                                            f"of its key ({sorted(expected[key], key=str)})")
        if has_scope and queue is not None and (name, queue) not in expected[key]:
            raise PromiseBroken("receipts", f"the receipt {key} names {queue}/{name}, not the first "
                                            f"effect of its scope")
