"""The fence, as each engine's statements write it: the same four conditions everywhere.

The fenced statements of an engine (the ACK, a batch's ACK, a release, an
extension) each end with the fence: the lease's generation, its claim token,
``leased``, before the deadline. They are separate statements so that each
reads whole on the pages; this test holds their fences equal, word for word,
per engine, so that one cannot drift from the others.
"""

from __future__ import annotations

import re

import pytest

from queue_core.engines import postgres, sqlite

FENCED = ("ack", "release", "extend_lease")  # one message's lease, named in full
BATCH = "ack_many"  # every lease of a batch, from a list


def fence_of(sql: str) -> list[str]:
    """The statement's conditions after its WHERE, one per AND, without the message's key."""
    where = sql[sql.index("\nWHERE ") + len("\nWHERE "):]
    conditions = [" ".join(c.split()) for c in re.split(r"\bAND\b", where)]
    return [c for c in conditions if not c.startswith(("queue =", "event_id ="))]


@pytest.mark.parametrize("engine", [sqlite, postgres], ids=["sqlite", "postgresql"])
def test_every_fenced_statement_has_the_same_fence(engine: object) -> None:
    operations = engine.OPERATIONS  # type: ignore[attr-defined]
    fences = {name: fence_of(operations.sql(name)) for name in FENCED}
    first = fences["ack"]
    assert len(first) == 4, first  # generation, token, leased, deadline
    assert all(fence == first for fence in fences.values()), fences
    # the batch's ACK names its leases from a list, and keeps the other two conditions
    batch = fence_of(operations.sql(BATCH))
    assert batch[-2:] == first[-2:], batch


def test_a_drifted_fence_is_seen() -> None:
    # The negative control: a release whose fence lost its deadline differs from the ACK's.
    ack = sqlite.OPERATIONS.sql("ack")
    drifted = ack.replace("\n  AND lease_until > :now", "")
    assert fence_of(drifted) != fence_of(ack)
