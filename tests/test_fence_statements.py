"""The fence, written once per engine: one statement moves every lease.

Each engine writes the fence (the lease's generation, its claim token,
``leased``, before the deadline) in one named statement, ``fenced_move``,
which acknowledges, releases and extends. These tests hold that it is the only
statement that writes a leased row back to done or ready or moves a lease's
deadline, that its condition has the four parts on both engines, and that a
fence missing a part lets a stale lease through (the negative control).
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from queue_core import ModelClock, Store
from queue_core.engines import postgres, sqlite

FENCE_PARTS = ("generation", "lease_token", "state = 'leased'", "lease_until >")


def conditions(sql: str) -> list[str]:
    """The statement's conditions after its WHERE, one per AND."""
    where = sql[sql.index("\nWHERE ") + len("\nWHERE "):]
    return [" ".join(c.split()) for c in re.split(r"\n  AND\b", where)]


@pytest.mark.parametrize("engine", [sqlite, postgres], ids=["sqlite", "postgresql"])
def test_the_fence_is_one_statement_with_four_parts(engine: object) -> None:
    operations = engine.OPERATIONS  # type: ignore[attr-defined]
    fence = conditions(operations.sql("fenced_move"))
    assert len(fence) == 4, fence  # the queue; (event_id, generation, token); leased; deadline
    assert fence[0].startswith("queue =")
    assert "(event_id, generation, lease_token) IN" in fence[1]
    assert fence[2] == "state = 'leased'"
    assert fence[3].startswith("lease_until >")
    # no other statement of the engine moves a leased row by its lease
    others = [
        name for name, query in operations.queries.items()
        if name != "fenced_move" and query.sql.startswith("UPDATE")
        and "lease_token" in query.sql[query.sql.find("\nWHERE"):]
    ]
    assert others == [], others


def _stale_lease_moves(sql: str, path: Path) -> int:
    """How many rows ``sql`` (a fenced_move) ACKs for a lease whose generation is stale."""
    with Store(path, clock=ModelClock(1000)) as store:
        store.enqueue('{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 1}}')
        first = store.claim(lease_seconds=5)
        assert first is not None
        conn = sqlite3.connect(store.target, isolation_level=None)
        try:
            # the lease ran out and another worker claimed it: generation 2
            conn.execute("UPDATE messages SET generation = generation + 1, lease_until = 2000")
            leases = json.dumps([[first.event_id, first.generation, first.token]])
            return conn.execute(sql, {"move": "ack", "now": 1001, "until": None,
                                      "queue": "default", "leases": leases}).rowcount
        finally:
            conn.close()


def test_a_fence_missing_a_part_lets_a_stale_lease_through(tmp_path: Path) -> None:
    fenced = sqlite.OPERATIONS.sql("fenced_move")
    assert _stale_lease_moves(fenced, tmp_path / "whole.sqlite3") == 0  # the whole fence refuses the old generation
    # the negative control: without the generation the old worker's ACK lands
    broken = fenced.replace("(event_id, generation, lease_token) IN (", "(event_id, 0, lease_token) IN (")
    broken = broken.replace("json_extract(value, '$[1]')", "0")
    assert broken != fenced
    assert _stale_lease_moves(broken, tmp_path / "broken.sqlite3") == 1
