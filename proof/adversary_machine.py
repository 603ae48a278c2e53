"""The adversary's machine without its rules: a fresh database, the lease holders, the verdicts.

``proof/adversary.py`` adds the rules (what user code does); this base class
opens a fresh database per example (two queues, the user's tables), keeps the
lease holders and every lease ever issued, reads the database through its own
connection, and works out what the promise lets an attempt end as
(``verdict``). After every step its invariant holds every clause against the
database (``proof/adversary_model.check``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final

from hypothesis import event
from hypothesis.errors import InvalidArgument
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant

from queue_core import BatchRejected, Claimed, Lease, ModelClock, Store
from queue_core.envelope import canonical_json

from proof.adversary_db import USER_TABLES, Database, MessageRow, Snapshot, Target
from proof.adversary_model import Attempt, Owner, PromiseBroken, Truth, Verdict, check, fence_passes
from proof.adversary_user import ALL_FAMILIES, KINDS, Call, Kind

__all__ = ["EVENT_IDS", "MAX_ATTEMPTS", "PAYLOADS", "QUEUES", "SHARED_SCOPE", "WORKERS",
           "Held", "Machine", "Tally"]

START: Final = 1000
QUEUES: Final = ("alpha", "beta")
EVENT_IDS: Final = ("e-1", "e-2", "e-3", "e-4")
PAYLOADS: Final = (
    {"tenant": "acme", "operation": "op-1", "cents": 100},
    {"tenant": "acme", "operation": "op-1", "cents": 250},
    {"tenant": "acme", "operation": "op-2", "cents": 100},
    {"tenant": "zeta", "operation": "op-1", "cents": 100},
)
WORKERS: Final = 3
MAX_ATTEMPTS: Final = 3
SHARED_SCOPE: Final = "shared"  # a scope both queues' receipt handlers are given on purpose


@dataclass
class Tally:
    """What a run did: examples, steps, each rule's count, the events it reached."""

    examples: int = 0
    steps: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)

    def note(self, what: str) -> None:
        self.events[what] += 1
        try:
            event(what)  # Hypothesis's statistics too (--hypothesis-show-statistics)
        except InvalidArgument:
            pass  # a replay outside Hypothesis (the regression seeds)


@dataclass(frozen=True)
class Held:
    """A lease a worker holds: its queue, and what the claim returned (a Lease or a Claimed)."""

    queue: str
    item: Lease | Claimed

    @property
    def lease(self) -> Lease:
        return self.item.lease if isinstance(self.item, Claimed) else self.item

    def __repr__(self) -> str:
        how = "claim_message" if isinstance(self.item, Claimed) else "claim"
        lease = self.lease
        return (f"<{how} of {self.queue}/{lease.event_id}, generation {lease.generation}, "
                f"until {lease.lease_until}>")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how Hypothesis prints a draw
        printer.text(repr(self))


class Machine(RuleBasedStateMachine):
    """User code against one fresh database per example; the promise checked after every step."""

    target: ClassVar[Target]
    families: ClassVar[frozenset[str]] = ALL_FAMILIES
    tally: ClassVar[Tally] = Tally()

    def __init__(self) -> None:
        super().__init__()
        self.stores: dict[str, Store] = {}
        self.db: Database | None = None
        self.opened = False

    @initialize()
    def open_database(self) -> None:
        path, reader = self.target.open()
        self.opened = True
        self.clock = ModelClock(START)
        with Store(path, clock=self.clock) as first:
            for name in QUEUES:
                first.create_queue(name, id_pattern="e-[0-9]", max_attempts=MAX_ATTEMPTS,
                                   lease_seconds=5, backoff_base_seconds=1, backoff_max_seconds=2,
                                   backoff_jitter=0)
            with first.transaction() as tx:
                for statement in USER_TABLES:
                    tx.execute(statement)
        self.stores = {name: Store(path, clock=self.clock, queue=name) for name in QUEUES}
        self.db = reader()
        self.truth = Truth(max_attempts=dict.fromkeys(QUEUES, MAX_ATTEMPTS))
        self.workers: list[list[Held]] = [[] for _ in range(WORKERS)]
        self.issued: list[Held] = []
        self.outside = 0
        self.tally.examples += 1

    def teardown(self) -> None:
        for store in self.stores.values():
            store.close()
        if self.db is not None:
            self.db.close()
        if self.opened:
            self.target.remove()

    @invariant()
    def the_promise_holds(self) -> None:
        if self.db is not None:
            check(self.db.snapshot(), self.truth)

    # ---------------------------------------------------------------- drawing

    def _count(self, name: str) -> None:
        self.tally.rules[name] += 1
        self.tally.steps += 1

    def _snapshot(self) -> Snapshot:
        """The messages, as another client reads them now (what a step decides from)."""
        assert self.db is not None
        return self.db.messages()

    def _kind(self, data: st.DataObject, *, batch: bool, focus: str = "none") -> Kind:
        """A handler's body, drawn by name among those of the families switched on; those of the
        ``focus`` family about eight times as often as all the others together."""
        kinds = {k.name: k for k in KINDS if (k.family == "base" or k.family in self.families)
                 and (k.batch or not batch)}  # in KINDS' order: a failure shrinks to the simplest
        names = list(kinds)
        focused = [name for name in names if kinds[name].family == focus]
        if focused:
            names += focused * (8 * (len(names) - len(focused)) // len(focused))
        return kinds[data.draw(st.sampled_from(names), label="handler")]

    def _focus(self, data: st.DataObject) -> str:
        """The family a batch's handlers are mostly drawn from (the attacks that need two handlers
        of one batch to meet: names, leftover), or "none" (where several are switched on)."""
        families = sorted({k.family for k in KINDS if k.batch and k.family in self.families})
        if not families:
            return "none"
        return data.draw(st.sampled_from([*families, "none"] if len(families) > 1 else families),
                         label="focus")

    def _mode(self, data: st.DataObject, queue: str) -> str:
        """Receipts: none, the queue's own scope, or one shared by both queues.

        Without the ``scopes`` family only queue alpha uses receipts, and
        nothing records outside a queue: no two scopes ever meet.
        """
        modes = ["none", "queue"]
        if "scopes" not in self.families and queue != QUEUES[0]:
            modes = ["none"]
        elif "scopes" in self.families:
            modes.append("shared")
        return data.draw(st.sampled_from(modes), label="receipts")

    @staticmethod
    def _scope(queue: str, mode: str) -> str:
        return {"none": "", "queue": queue, "shared": SHARED_SCOPE}[mode]

    def _take(self, data: st.DataObject, source: str) -> Held | None:
        """A lease: one a worker holds (given up by it), any ever issued (stale), or a fresh claim."""
        if source == "stale":
            return data.draw(st.sampled_from(self.issued), label="issued lease") if self.issued else None
        holders = [w for w, held in enumerate(self.workers) if held]
        if source == "fresh" or not holders:
            queue = data.draw(st.sampled_from(QUEUES), label="queue")
            taken = self._claim(0, queue, "claim_message", 1, 4)
            if taken:
                self.workers[0].remove(taken[0])
            return taken[0] if taken else None
        worker = data.draw(st.sampled_from(holders), label="worker")
        held = self.workers[worker]
        return held.pop(data.draw(st.integers(0, len(held) - 1), label="which lease"))

    # ----------------------------------------------------------- sends, claims

    def _send(self, queue: str, event_id: str, payload: int, delay: int = 0) -> None:
        """Send, and hold "the same event sent again is stored once"."""
        expected = self.truth.send(queue, event_id, PAYLOADS[payload])
        try:
            result = self.stores[queue].send(event_id, PAYLOADS[payload], delay=delay)
            got = "new" if result.accepted == 1 else "duplicate" if result.duplicates == 1 else "?"
        except BatchRejected as refused:
            got = "conflict" if refused.code == "event_conflict" else refused.code
        if got != expected:
            raise PromiseBroken("stored once", f"sending {queue}/{event_id} was {got}, "
                                               f"expected {expected}")
        self.tally.note(f"send: {got}")

    def _claim(self, worker: int, queue: str, how: str, count: int, lease_seconds: int) -> list[Held]:
        """Claim, and hold "delivery is at least once": what is claimable now is handed out."""
        now = self.clock.now()
        claimable = {m.event_id for m in self._snapshot().messages
                     if m.queue == queue and m.state in ("ready", "leased") and m.available_at <= now
                     and (m.state == "ready" or (m.lease_until or 0) <= now)
                     and m.attempts < MAX_ATTEMPTS}
        store = self.stores[queue]
        got: list[Lease | Claimed]
        if how in ("claim", "claim_message"):
            one = store.claim(lease_seconds) if how == "claim" else store.claim_message(lease_seconds)
            got, count = ([] if one is None else [one]), 1
        elif how == "claim_messages":
            got = list(store.claim_messages(count, lease_seconds))
        else:
            got = list(store.claim_many(count, lease_seconds))
        held = [Held(queue, g) for g in got]
        ids = [h.lease.event_id for h in held]
        if len(ids) != min(count, len(claimable)) or not set(ids) <= claimable:
            raise PromiseBroken("at least once", f"{how}({count}) in {queue} at {now} returned "
                                                 f"{ids}; claimable were {sorted(claimable)}")
        self.workers[worker] += held
        self.issued += held
        self.tally.note(f"claim: {len(held)} leased")
        return held

    # --------------------------------------------------------------- verdicts

    def _payload(self, row: MessageRow | None, held: Held) -> dict[str, Any]:
        """The payload the handler will see: the claim's, else the stored one."""
        if isinstance(held.item, Claimed):
            return dict(held.item.message.payload_object)
        if row is not None and row.digest is None:
            loaded: dict[str, Any] = json.loads(row.payload)
            return loaded
        return dict(PAYLOADS[0])  # the message is gone (purged) or done (pruned): no handler runs

    def _verdict(self, pre: Snapshot, call: Call, payload: dict[str, Any], mode: str, *, now: int,
                 read_first: bool, pending: dict[tuple[str, str, str], Owner] | None = None) -> Verdict:
        """What the promise lets this attempt end as, from the database's state before it.

        ``now`` is the clock when the completion began; the handler may have
        moved it since (the clock now is when its ACK or refusal is written).
        ``pending``: receipts written earlier in the same transaction (a batch).
        """
        row, lease = pre.message(call.queue, call.lease.event_id), call.lease
        lost = Verdict("lease_lost", "the lease does not pass the fence", "the fence")
        if read_first and not fence_passes(row, lease, now):
            return lost
        after = self.clock.now()
        if not fence_passes(row, lease, after):
            return replace(lost, reason=f"the lease does not pass the fence at {after}, after the handler")
        if mode != "none":
            found, owner = self.truth.receipt(call.scope, payload, pending)
            if found == "reuse" and owner is not None:
                return Verdict("done", f"its scope {call.scope!r} holds the receipt of {owner.name}",
                               "receipts", reuse=owner)
            if found == "conflict":
                return Verdict("refused", f"its scope {call.scope!r} holds the key with another payload",
                               "receipts", refusal="operation_conflict", permanent=True)
        verdict = self._own_verdict(pre, call, after, mode)
        if mode != "none" and any(key[1:] == (call.tenant, call.operation) and key[0] != call.scope
                                  for key in self.truth.receipts):
            # the first of its key in its scope, while another scope holds the key: a store that
            # shares receipts across scopes ACKs (or refuses) it on the other scope's receipt
            return replace(verdict, clause="receipts", reason=f"{verdict.reason} (its scope "
                           f"{call.scope!r} holds no receipt of its key; another scope does)")
        return verdict

    def _own_verdict(self, pre: Snapshot, call: Call, after: int, mode: str) -> Verdict:
        """What an attempt that runs its own handler (no receipt reused) ends as."""
        lease = call.lease
        kind = call.kind
        if kind.name == "rollback_to_leftover":
            # a ROLLBACK TO a savepoint an earlier handler of the same transaction left open: the
            # store may refuse it or let it fail; the checks of the database judge what it undid
            return Verdict("any", "its handler rolled back to a savepoint it did not open",
                           "exactly one effect")
        if kind.control is not None:
            names = kind.name == "rollback_to_store"
            does = "names the store's own savepoints" if names else "ends the transaction"
            return Verdict("refused", f"its handler ran {kind.control!r} through tx.execute, which "
                           f"{does} and is refused (StatementRefused)",
                           "exactly one effect" if names else "effect and ACK together", tolerant=True)
        if call.outbox is not None:
            stored = self.truth.sent.get((call.outbox.queue, lease.event_id))
            if stored is not None and stored != canonical_json(call.payload):
                return Verdict("refused", f"its outbox sends {call.outbox.queue}/{lease.event_id} with "
                                          "another payload than the stored one", "refusal",
                               refusal="handler_error")
        if kind.refusal is not None:
            failed = kind.refusal == "statement_failed"
            # under receipts on PostgreSQL the receipt's own INSERT fails next: handler_error
            code = None if failed and mode != "none" else kind.refusal
            return Verdict("refused", f"its handler {kind.name!r} "
                                      f"{'ran a statement that failed' if failed else 'refused'}",
                           "failed statement" if failed else "refusal", refusal=code,
                           permanent=kind.permanent)
        if call.other is not None:
            store, other = call.other
            if not fence_passes(pre.message(store.queue, other.event_id), other, after):
                return Verdict("refused", f"its handler swallowed the refused fence of "
                                          f"{store.queue}/{other.event_id}, whose effect it wrote",
                               "effect and ACK together", tolerant=True)
        return Verdict("done", "its handler returned while the lease passes the fence",
                       "receipts" if mode != "none" else "completion")

    def _learn_done(self, call: Call, payload: dict[str, Any], mode: str, verdict: Verdict) -> Owner | None:
        """User code saw this attempt's ACK commit; returns the receipt it wrote, if it wrote one."""
        lease = call.lease
        rows = () if verdict.reuse is not None else call.rows()
        attempt = Attempt(call.queue, lease.event_id, lease.generation, lease.token, call.kind.name,
                          rows, verdict.reuse, call.tenant, call.operation)
        owner = None if mode == "none" or verdict.reuse else self.truth.own(call.scope, payload, attempt)
        self.truth.ack(attempt, owner)
        if call.outbox is not None and call.ran:
            self.truth.send(call.outbox.queue, lease.event_id, call.payload)
        if call.other is not None and call.other_result == "done":
            store, other = call.other
            smuggled = call.smuggled()
            assert smuggled is not None
            self.truth.ack(Attempt(store.queue, other.event_id, other.generation, other.token,
                                   "smuggled", (smuggled,)))
        return owner
