"""The delivery lab: one job on an at-least-once broker, told step by step.

queue_core writes the effect and the ACK in one transaction, so it cannot ACK
too early. Many brokers cannot offer that: their ACK lives in *their* store,
the effect in *yours*. The lab models exactly that situation with two real
SQLite files in a temporary folder:

* ``broker.sqlite3``: one job, its state (``ready``, ``in flight``,
  ``settled``), how many deliveries were issued, and the current delivery's
  lease (``lease_until``, in model ticks). A delivery is fenced by its number:
  only the newest one may ACK, and only before its lease ends.
* ``app.sqlite3``: the application's ledger (the effect: charge tenant
  ``north`` for operation ``order-17:charge``) and, when the story uses them,
  the receipts of ``queue_core.receipts``, written in the ledger's transaction.

Every step is a separate transaction on a fresh connection, and the state after
it is read back from both files. A "stop" is modelled by not sending the ACK
(no process is killed here; the crash chapter does that for real). Time is a
``ModelClock`` in ticks, so every run prints the same table.

Stories (``CASES``): ``normal``; ``duplicate-effect`` (a repeat without a
receipt doubles the effect); ``reuse-effect`` (a repeat with a receipt reuses
it); ``early-ack`` (ACK before the write loses the work); ``expiry`` (a
delivery cannot be received again before its lease ends, and an old
delivery's ACK is refused once a newer one was issued).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import receipts
from ..clock import ModelClock
from ..errors import QueueError

STORIES = ("normal", "duplicate-effect", "reuse-effect", "early-ack")
CASES = STORIES + ("expiry",)
TITLES = {
    "normal": "the effect is written, then the delivery is ACKed",
    "duplicate-effect": "a repeat without a receipt doubles the effect",
    "reuse-effect": "a repeat with a receipt reuses the effect",
    "early-ack": "an ACK before the write loses the work",
    "expiry": "a lease cannot be received twice; an old delivery cannot ACK",
}
LEASE_TICKS = 5
SCOPE = "checkout"  # the application's charges: the receipts' namespace
TENANT = "north"
OPERATION = "order-17:charge"
PAYLOAD = {"amount_cents": 10000}
STEP_KEYS = ("event", "queue", "deliveries", "effects", "receipts")

# The broker's whole state: one job. A lease deadline exists exactly while it is in
# flight.
_BROKER_SCHEMA = """
CREATE TABLE job (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    state       TEXT    NOT NULL CHECK (state IN ('ready', 'in flight', 'settled')),
    deliveries  INTEGER NOT NULL CHECK (deliveries >= 0),
    lease_until INTEGER CHECK ((state = 'in flight') = (lease_until IS NOT NULL))
) STRICT;
INSERT INTO job (id, state, deliveries) VALUES (1, 'ready', 0);
"""
# The application's effect. Deliberately no UNIQUE (tenant, operation): the
# lab shows what happens with and without a receipt, not a second defence.
_APP_SCHEMA = """
CREATE TABLE ledger (
    id           INTEGER PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    operation    TEXT    NOT NULL,
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0)
) STRICT;
"""


class Refused(QueueError):
    """The lab's broker refused a request: ``not_available`` or ``delivery_lost``."""


@dataclass(frozen=True)
class Step:
    """One step of a story and the state read back from both files after it."""

    event: str
    queue: str  # the job's state at the broker
    deliveries: int  # deliveries issued so far
    effects: int  # rows in the ledger
    receipts: int  # rows in receipts

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def _transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT on a fresh connection; ROLLBACK on any exception."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


class Broker:
    """A model of an at-least-once broker holding one job, in its own SQLite file."""

    def __init__(self, path: Path, clock: ModelClock) -> None:
        self.path = path
        self.clock = clock
        with closing(sqlite3.connect(path)) as conn:
            conn.executescript(_BROKER_SCHEMA)

    def receive(self) -> tuple[int, int]:
        """Issue the next delivery; return ``(delivery number, lease_until)``."""
        now = self.clock.now()
        with _transaction(self.path) as conn:
            state, deliveries, lease_until = conn.execute(
                "SELECT state, deliveries, lease_until FROM job"
            ).fetchone()
            if state == "settled":
                raise Refused("the job is settled", code="not_available")
            if state == "in flight" and now < lease_until:
                raise Refused(
                    f"delivery {deliveries} holds the job until t={lease_until}",
                    code="not_available",
                )
            conn.execute(
                "UPDATE job SET state = 'in flight', deliveries = ?, lease_until = ?",
                (deliveries + 1, now + LEASE_TICKS),
            )
            return deliveries + 1, now + LEASE_TICKS

    def ack(self, delivery: int) -> None:
        """Settle the job, if ``delivery`` is the newest one and its lease is on."""
        now = self.clock.now()
        with _transaction(self.path) as conn:
            state, deliveries, lease_until = conn.execute(
                "SELECT state, deliveries, lease_until FROM job"
            ).fetchone()
            if state != "in flight":
                raise Refused(f"the job is {state}", code="delivery_lost")
            if delivery != deliveries:
                raise Refused(
                    f"delivery {deliveries} was issued after it", code="delivery_lost"
                )
            if now >= lease_until:
                raise Refused(
                    f"its lease ended at t={lease_until}", code="delivery_lost"
                )
            conn.execute("UPDATE job SET state = 'settled', lease_until = NULL")

    def state(self) -> tuple[str, int]:
        with closing(sqlite3.connect(self.path)) as conn:
            state, deliveries = conn.execute(
                "SELECT state, deliveries FROM job"
            ).fetchone()
            return str(state), int(deliveries)


class App:
    """The application's database: the ledger (the effect) and its receipts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with closing(sqlite3.connect(path)) as conn:
            conn.executescript(_APP_SCHEMA)
        with _transaction(path) as conn:
            # not a queue database: the receipts table is created here
            receipts.create_table(conn)

    def charge(self, *, with_receipt: bool) -> str:
        """Write the charge in one transaction (with a receipt or not); report it."""
        with _transaction(self.path) as conn:

            def write_effect() -> str:
                cursor = conn.execute(
                    "INSERT INTO ledger (tenant, operation, amount_cents) "
                    "VALUES (?, ?, ?)",
                    (TENANT, OPERATION, PAYLOAD["amount_cents"]),
                )
                return f"ledger/{cursor.lastrowid}"

            if not with_receipt:
                return f"writes the effect ({write_effect()}), no receipt"
            recorded = receipts.record(
                conn, TENANT, OPERATION, PAYLOAD, write_effect, scope=SCOPE
            )
            if recorded.reused:
                return (
                    f"finds the receipt and reuses the effect ({recorded.effect}); "
                    "writes nothing"
                )
            return (
                f"writes the effect ({recorded.effect}) and its receipt "
                "in one transaction"
            )

    def counts(self) -> tuple[int, int]:
        with closing(sqlite3.connect(self.path)) as conn:
            effects = conn.execute("SELECT count(*) FROM ledger").fetchone()[0]
            return effects, len(receipts.all_receipts(conn))


class _Story:
    def __init__(self, folder: Path) -> None:
        self.clock = ModelClock(0)
        self.broker = Broker(folder / "broker.sqlite3", self.clock)
        self.app = App(folder / "app.sqlite3")
        self.steps: list[Step] = []

    def step(self, text: str) -> None:
        queue, deliveries = self.broker.state()
        effects, receipt_count = self.app.counts()
        self.steps.append(
            Step(
                f"t={self.clock.now()} {text}",
                queue,
                deliveries,
                effects,
                receipt_count,
            )
        )

    def at(self, tick: int) -> None:
        self.clock.set(tick)

    def receive(self, who: str) -> int:
        delivery, until = self.broker.receive()
        self.step(f"{who} receives delivery {delivery} (lease until t={until})")
        return delivery

    def refused(self, action: Callable[[], object]) -> Refused:
        try:
            action()
        except Refused as refusal:
            return refusal
        raise RuntimeError(
            "the lab's broker accepted a request that the story expects it to refuse"
        )


def _normal(s: _Story) -> None:
    first = s.receive("A")
    s.at(1)
    s.step(f"A {s.app.charge(with_receipt=True)}")
    s.broker.ack(first)
    s.step(f"A ACKs delivery {first} after the write: the job is settled")


def _repeat(s: _Story, with_receipt: bool) -> None:
    first = s.receive("A")
    s.at(1)
    s.step(f"A {s.app.charge(with_receipt=with_receipt)}")
    s.step(
        "A stops before its ACK: the effect is committed, "
        f"delivery {first} is not settled"
    )
    s.at(LEASE_TICKS)
    second = s.receive("the lease ran out; B")
    s.step(f"B {s.app.charge(with_receipt=with_receipt)}")
    s.at(LEASE_TICKS + 1)
    s.broker.ack(second)
    s.step(f"B ACKs delivery {second}: the job is settled")


def _early_ack(s: _Story) -> None:
    first = s.receive("A")
    s.at(1)
    s.broker.ack(first)
    s.step(f"A ACKs delivery {first} BEFORE writing, then stops: nothing was written")
    s.at(LEASE_TICKS)
    refusal = s.refused(s.broker.receive)
    s.step(
        f"B asks for the job: refused, {refusal.code} ({refusal.message}); "
        "the charge is lost"
    )


def _expiry(s: _Story) -> None:
    first = s.receive("A")
    s.at(LEASE_TICKS - 1)
    refusal = s.refused(s.broker.receive)
    s.step(f"B asks for the job: refused, {refusal.code} ({refusal.message})")
    s.at(LEASE_TICKS)
    refusal = s.refused(lambda: s.broker.ack(first))
    s.step(f"A ACKs delivery {first}: refused, {refusal.code} ({refusal.message})")
    second = s.receive("B")
    s.at(LEASE_TICKS + 1)
    refusal = s.refused(lambda: s.broker.ack(first))
    s.step(
        f"A ACKs delivery {first} again: refused, {refusal.code} ({refusal.message})"
    )
    s.broker.ack(second)
    s.step(f"B ACKs delivery {second}: the job is settled")


_RUNS: dict[str, Callable[[_Story], None]] = {
    "normal": _normal,
    "duplicate-effect": lambda s: _repeat(s, with_receipt=False),
    "reuse-effect": lambda s: _repeat(s, with_receipt=True),
    "early-ack": _early_ack,
    "expiry": _expiry,
}


def run_case(case: str, folder: Path | None = None) -> list[Step]:
    """Run one story on fresh SQLite files (in ``folder``, else a temporary one)."""
    if case not in _RUNS:
        raise ValueError(f"unknown lab case {case!r}; known: {', '.join(CASES)}")
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="queue-core-lab-") as tmp:
            return run_case(case, Path(tmp))
    folder = Path(folder)
    taken = [
        name for name in ("broker.sqlite3", "app.sqlite3") if (folder / name).exists()
    ]
    if taken:
        raise ValueError(
            f"the lab needs fresh files; {folder} already holds {', '.join(taken)}"
        )
    story = _Story(folder)
    story.step(
        f"job accepted ({TENANT}, {OPERATION}, {PAYLOAD['amount_cents']} cents); "
        "nothing done yet"
    )
    _RUNS[case](story)
    return story.steps


def run_lab(cases: Iterable[str] = STORIES) -> dict[str, list[Step]]:
    """Run several stories, each on its own files in one temporary folder."""
    wanted = list(cases)
    with tempfile.TemporaryDirectory(prefix="queue-core-lab-") as tmp:
        results = {}
        for case in wanted:
            folder = Path(tmp) / case
            folder.mkdir()
            results[case] = run_case(case, folder)
        return results


def to_json(results: dict[str, list[Step]]) -> str:
    """One object keyed by case name; each a list of steps."""
    return json.dumps(
        {case: [step.to_dict() for step in steps] for case, steps in results.items()},
        ensure_ascii=False,
    )


def format_text(results: dict[str, list[Step]]) -> str:
    """Each story as plain text: every step's event, then the state after it."""
    blocks = []
    for case, steps in results.items():
        lines = [f"{case}: {TITLES[case]}"]
        for s in steps:
            lines.append(s.event)
            lines.append(
                f"    queue: {s.queue}, deliveries: {s.deliveries}, "
                f"effects: {s.effects}, receipts: {s.receipts}"
            )
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def markdown_table(steps: list[Step]) -> str:
    """A Markdown table of the state after every step (the site's, at build time)."""
    lines = [
        "| event | queue | deliveries | effects | receipts |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {s.event} | {s.queue} | {s.deliveries} | {s.effects} | {s.receipts} |"
        for s in steps
    ]
    return "\n".join(lines) + "\n"
