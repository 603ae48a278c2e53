"""The adversary: user code drawn by Hypothesis against the promise, on both engines.

``proof/adversary.py`` is a state machine whose steps are what applications
do (handlers that fail a statement and catch it, savepoints before and after
a failure, swallowed refusals, receipts in several queues and outside any
queue, their own transactions, batches, stale leases, clock steps) and whose
invariant holds every clause of the promise against the database after every
step (``proof/adversary_model.py``). Here it runs with the quick budget on
each engine, with the attack families of ``QUEUE_CORE_ADVERSARY_FAMILIES``
(a comma-separated list of ``proof.adversary_user.FAMILIES``; all of them by
default, "" for the base attacks alone), and without shrinking (a failure
prints the steps as found; ``python scripts/adversary.py`` shrinks them).

On main's code every family of issue #44 and those found beyond its three
holes (``recovery``, ``control``, ``batch_tx``, ``names``) holds on both
engines; their regression seeds replay the shrunk sequences that broke the
code of #44, and must hold too. ``OPEN_HOLES`` lists the families that still
break a clause: they are left out of the search that must hold, and a test of
their own requires the adversary to keep finding them (from its own draws and
from their seeds), so that the entry cannot outlive the hole: when the fix
merges, that test fails, and the family moves back into the search. The
planted bugs (``tests/test_adversary_planted.py``) show the search catches each
closed hole again when its fix is reverted.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from proof.adversary import QUICK, Issued, Scripted, Step, replay, run
from proof.adversary_db import EffectRow, MessageRow, PostgresTarget, ReceiptRow, Snapshot, SqliteTarget, Target
from proof.adversary_model import Attempt, Owner, PromiseBroken, Truth, check
from proof.adversary_user import ALL_FAMILIES

FAMILIES_ENV = "QUEUE_CORE_ADVERSARY_FAMILIES"

# The attack families that still break a clause on this code, per engine, and the clause each
# breaks: none. Were one found, it would be listed here until its fix merges, and
# test_an_open_hole_is_still_found would fail once the fix lands until it is removed. The last
# one, leftover (a savepoint one handler of a claimed batch left open, rolled back to by a later
# handler, undid the earlier message's effect and both ended done), is closed: each handler of a
# batch runs in a savepoint of its own (proof/adversary_planted.py plants it back).
OPEN_HOLES: dict[str, dict[str, str]] = {"sqlite": {}, "postgresql": {}}


def families() -> frozenset[str]:
    """The attack families of this run: QUEUE_CORE_ADVERSARY_FAMILIES, else all."""
    listed = os.environ.get(FAMILIES_ENV)
    if listed is None:
        return ALL_FAMILIES
    chosen = frozenset(name.strip() for name in listed.split(",") if name.strip())
    unknown = chosen - ALL_FAMILIES
    if unknown:
        raise pytest.UsageError(f"{FAMILIES_ENV}: unknown families {sorted(unknown)}; "
                                f"they are {sorted(ALL_FAMILIES)}")
    return chosen


def target_for(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    if engine == "postgresql":
        return PostgresTarget(request.getfixturevalue("postgres_cluster"))
    return SqliteTarget(tmp_path)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("attacks", ["base", "families"])
def test_user_code_cannot_break_the_promise(engine: str, attacks: str, tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    """The quick budget: 60 examples of up to 30 steps, every clause checked after every step.

    "families" draws the attack families of QUEUE_CORE_ADVERSARY_FAMILIES (all
    by default) but the open holes, beside the base attacks; "base" the base
    attacks alone. The draws are seeded (``derandomize``): every run of the same code makes the
    same attacks, so that what is asserted of them holds or fails the same way each time.
    """
    chosen = frozenset() if attacks == "base" else families() - set(OPEN_HOLES[engine])
    budget = QUICK
    result = run(target_for(engine, tmp_path, request), budget, chosen, shrink=False, derandomize=True)
    if result.found is not None:
        found = result.found
        failure = f"{found['message']}\n{found['steps']}\n(shrunk: python scripts/adversary.py" \
                  f"{' --postgres' if engine == 'postgresql' else ''} --families {','.join(sorted(chosen))})"
        if found["clause"] is None:
            raise RuntimeError(f"the adversary itself failed: {failure}")
        raise PromiseBroken(found["clause"], failure)
    assert result.examples >= budget.examples and result.steps >= budget.examples * 5, result
    # the attacks were made: every kind of step ran, and completions ended every way
    assert set(result.rules) >= {"send", "claim", "complete", "complete_many", "own_transaction",
                                 "give_up", "manage", "time_passes", "send_claim_complete",
                                 "send_batch_complete", "race"}, result.rules
    ends = {event.split(": ")[-1] for event in result.events if event.startswith("complete ")}
    assert {"done", "retry", "dead", "raised:lease_lost"} <= ends, sorted(ends)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", sorted({f for holes in OPEN_HOLES.values() for f in holes}))
def test_an_open_hole_is_still_found(engine: str, family: str, tmp_path: Path,
                                     request: pytest.FixtureRequest) -> None:
    """A family of OPEN_HOLES alone, with the quick budget: the adversary finds its hole, on the
    clause it names (when its fix merges this fails: remove it from OPEN_HOLES)."""
    clause = OPEN_HOLES[engine].get(family)
    if clause is None:
        pytest.skip(f"{family} holds on {engine}")
    result = run(target_for(engine, tmp_path, request), QUICK, frozenset({family}), shrink=False, derandomize=True)
    assert result.found is not None, f"{family} held on {engine}: its hole is closed, remove it " \
                                     f"from OPEN_HOLES ({result.examples} examples, {result.steps} steps)"
    assert result.found["clause"] == clause, result.found


# ------------------------------------------------------------------------ regression seeds
#
# The shrunk sequences Hypothesis found (on the code of #44, and since), replayed step by step:
# each rule's draws are given in the order the failing example printed them ("Draw 1 (handler):
# 'fail_then_savepoint'", ...). Each must hold, but those of OPEN_HOLES, which must still break
# their clause.


def send_claim_complete(queue: str, event_id: str, payload: int, *draws: Any) -> Step:
    return lambda m: m.send_claim_complete(Scripted(m, *draws), queue=queue, event_id=event_id,
                                           payload=payload)


# handler, receipts, complete_message, slow, failing statement
PLAIN = ("one", "queue", False, 0, 0)
# name: (family, the clause it breaks while the family's hole is open, the steps)
TWO_IN_A_BATCH = [
    lambda m: m.send(queue="alpha", event_id="e-1", payload=0),
    lambda m: m.send(queue="alpha", event_id="e-2", payload=2),
]
SEEDS: dict[str, tuple[str, str, list[Step]]] = {
    "hole 1: one operation in two queues": ("scopes", "exactly one effect", [
        send_claim_complete("alpha", "e-1", 0, *PLAIN),
        send_claim_complete("beta", "e-1", 0, *PLAIN),
    ]),
    "hole 1: a receipt recorded outside any queue": ("scopes", "exactly one effect", [
        lambda m: m.record_outside(payload=0),
        send_claim_complete("alpha", "e-1", 0, *PLAIN),
    ]),
    "hole 1: a receipt recorded outside, in a queue's scope": ("scopes", "exactly one effect", [
        # one effect within a scope: the queue's message is ACKed on the outside code's effect
        lambda m: m.record_outside(payload=0, scope="alpha"),
        send_claim_complete("alpha", "e-1", 0, "one", "queue", False, 0, 0),
    ]),
    "hole 2: a savepoint opened after the failure": ("savepoints", "failed statement", [
        send_claim_complete("alpha", "e-1", 0, "fail_then_savepoint", "none", False, 0, 0),
    ]),
    "hole 3: a stale lease's LeaseLost swallowed": ("swallow", "effect and ACK together", [
        lambda m: m.send(queue="alpha", event_id="e-1", payload=0),
        lambda m: m.claim(worker=0, queue="alpha", how="claim", count=1, lease_seconds=2),
        lambda m: m.time_passes(step="2"),
        lambda m: m.claim(worker=1, queue="alpha", how="claim", count=1, lease_seconds=5),
        # a lease a worker holds: worker 0's, the first; leased_tx first, writes, no failure,
        # complete_tx, swallow
        lambda m: m.own_transaction(Scripted(m, "held", 0, 0, False, True, None, "complete_tx", True),
                                    queue="alpha", size=1),
    ]),
    "hole 3: the same lease again after done": ("swallow", "effect and ACK together", [
        send_claim_complete("alpha", "e-1", 0, "nothing", "none", False, 0, 0),
        lambda m: m.own_transaction(Scripted(m, "stale", Issued(0), False, True, None, "complete_tx", True),
                                    queue="alpha", size=1),
    ]),
    "recovery: a savepoint opened before the failure": ("recovery", "failed statement", [
        send_claim_complete("alpha", "e-1", 0, "savepoint_then_fail", "none", False, 0, 0),
    ]),
    "control: COMMIT then BEGIN inside the handler": ("control", "effect and ACK together", [
        send_claim_complete("alpha", "e-1", 0, "commit_begin_inside", "none", False, 0, 0),
    ]),
    "control: ROLLBACK inside the handler": ("control", "effect and ACK together", [
        send_claim_complete("alpha", "e-1", 0, "rollback_inside", "none", False, 0, 0),
    ]),
    "batch_tx: the caller's write, then complete_many_tx of a lost lease": ("batch_tx", "effect and ACK together", [
        lambda m: m.send(queue="alpha", event_id="e-1", payload=0),
        lambda m: m.claim(worker=0, queue="alpha", how="claim", count=1, lease_seconds=2),
        lambda m: m.time_passes(step="2"),
        lambda m: m.claim(worker=1, queue="alpha", how="claim", count=1, lease_seconds=5),
        # worker 0's stale lease; no leased_tx, writes, no failure, complete_many_tx, nothing caught
        lambda m: m.own_transaction(Scripted(m, "held", 0, 0, False, True, None, "complete_many_tx", False),
                                    queue="alpha", size=1),
    ]),
    "names: a handler's ROLLBACK TO the store's batch savepoint": ("names", "exactly one effect", [
        *TWO_IN_A_BATCH,
        # worker 0 claims both (claim_messages), no stale lease, focus on names; e-1 "one", e-2
        # "rollback_to_store" of the savepoint queue_core_batch (failing statement 0), no receipts
        lambda m: m.complete_many(Scripted(m, 0, "claim_messages", False, "names", "one", "none", 0,
                                           "rollback_to_store", "none", 0), queue="alpha", count=2),
    ]),
    "leftover: a savepoint left open, rolled back to by the next handler": ("leftover", "exactly one effect", [
        *TWO_IN_A_BATCH,
        # worker 0 claims both, focus on leftover; e-1 "leave_open" (SAVEPOINT adv_open, then its
        # row), e-2 "rollback_to_leftover" (ROLLBACK TO adv_open, then its row), no receipts
        lambda m: m.complete_many(Scripted(m, 0, "claim_messages", False, "leftover", "leave_open", "none", 0,
                                           "rollback_to_leftover", "none", 0), queue="alpha", count=2),
    ]),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS, ids=[re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") for name in SEEDS])
def test_regression_seed(engine: str, seed: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    family, clause, steps = SEEDS[seed]
    if family not in OPEN_HOLES[engine]:
        replay(target_for(engine, tmp_path, request), steps)
        return
    with pytest.raises(PromiseBroken) as broken:
        replay(target_for(engine, tmp_path, request), steps)
    assert broken.value.clause == OPEN_HOLES[engine][family] == clause, broken.value


# ------------------------------------------------------------------- the checks can fail


def _message(state: str, generation: int = 1, token: int = 7, event_id: str = "e-1") -> MessageRow:
    return MessageRow("alpha", event_id, '{"cents":100,"operation":"op-1","tenant":"acme"}', state, 1,
                      generation, 1000, 1005 if state == "leased" else None, token)


def _row(generation: int = 1, token: int = 7, kind: str = "one", event_id: str = "e-1") -> EffectRow:
    return EffectRow("adv_effect", "", "alpha", event_id, generation, token, kind, "a", "acme", "op-1")


def _truth(*acked: Attempt) -> Truth:
    truth = Truth(max_attempts={"alpha": 3})
    truth.sent[("alpha", "e-1")] = _message("done").payload
    for attempt in acked:
        truth.acked[(attempt.queue, attempt.event_id)] = attempt
    return truth


ACKED = Attempt("alpha", "e-1", 1, 7, "one", (_row(),))
BROKEN: dict[str, tuple[str, Snapshot, Truth]] = {
    "an effect without its ACK": ("effect and ACK together",
                                  Snapshot((_message("leased"),), (_row(),), ()), _truth()),
    "a stale attempt's effect beside the ACKed one": (
        "effect and ACK together", Snapshot((_message("done", 2),), (_row(1), _row(2)), ()),
        _truth(Attempt("alpha", "e-1", 2, 7, "one", (_row(2),)))),
    "another attempt's rows under the ACKed lease": (
        "effect and ACK together", Snapshot((_message("done"),), (_row(), _row(kind="own_tx")), ()),
        _truth(ACKED)),
    "done with no effect behind it": ("exactly one effect",
                                      Snapshot((_message("done"),), (), ()), _truth(ACKED)),
    "done without an ACK user code saw": ("effect and ACK together",
                                          Snapshot((_message("done"),), (), ()), _truth()),
    "an ACK user code saw that is not there": ("exactly one effect",
                                               Snapshot((_message("leased"),), (), ()), _truth(ACKED)),
    "a payload changed by a second send": (
        "stored once", Snapshot((replace(_message("done"), payload='{"cents":250}'),), (_row(),), ()),
        _truth(ACKED)),
    "a receipt naming another effect": (
        "receipts", Snapshot((_message("done"),), (_row(),),
                             (ReceiptRow((("tenant", "acme"), ("operation", "op-1"), ("effect", "api-1"))),)),
        _truth(ACKED)),
}


@pytest.mark.one_engine
@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_each_check_catches_its_break(case: str) -> None:  # negative controls of check()
    clause, snapshot, truth = BROKEN[case]
    if clause == "receipts":
        truth.receipts[("alpha", "acme", "op-1")] = Owner("alpha", "acme", "op-1", truth.sent[("alpha", "e-1")],
                                                          "e-1", "alpha", (_row(),))
    with pytest.raises(PromiseBroken) as broken:
        check(snapshot, truth)
    assert broken.value.clause == clause, broken.value


@pytest.mark.one_engine
def test_a_consistent_database_passes_the_checks() -> None:
    truth = _truth(ACKED)
    truth.receipts[("alpha", "acme", "op-1")] = Owner("alpha", "acme", "op-1", truth.sent[("alpha", "e-1")],
                                                      "e-1", "alpha", (_row(),))
    receipt = ReceiptRow((("tenant", "acme"), ("operation", "op-1"), ("effect", "e-1")))
    check(Snapshot((_message("done"),), (_row(),), (receipt,)), truth)
