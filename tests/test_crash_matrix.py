"""The crash matrix: every write operation, dying at every fault point, two ways.

``proof.matrix.crash_matrix`` runs each operation (enqueue, claim, complete,
also under idempotency receipts, fail temporary and permanent, redrive, and the
batched path's claim_many and complete_many) in a real child process that dies at
each probe point the operation reaches (``store.PROBE_POINTS``), at every time it
reaches it (a batch reaches its messages' points once per message), once by
``os._exit`` and once by SIGKILL; a fresh worker then finishes the queue and
every invariant is checked. The run leaves a record in
``test-artifacts/evidence/`` that the page "How we know" shows
(docs/how-we-know.md).

Also here: a store without a probe pays nothing for its points and no CLI path
gives it one, and the checker really finds each kind of violation (negative
controls), so that "0 violations" means something.

Every file that is inspected byte by byte, copied or damaged here is first
closed by every store that wrote it (``with Store(...)``): an open store keeps
its commits in the ``-wal`` file beside it, not yet in the main file.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import queue_core
from queue_core import Handler, ModelClock, Store, cli, ledger
from queue_core.store import BATCH_OPERATIONS, OPERATIONS, PROBE_POINTS
from queue_core.values import Lease
from proof import records
from proof.chaos import QUEUE_CORE
from queue_core.app.crash_child import (
    CRASH_EXIT_CODE,
    NOT_REACHED_EXIT_CODE,
    child_command,
    lease_argument,
    parse_lease_argument,
    points_of,
    run_crashing,
)
from queue_core.testing.faults import FaultPlan
from proof.invariants import FileState, check_invariants, finish_queue, losses_and_doubles, read_file
from proof.matrix import (
    COMMITTED,
    DEMO_EVENTS,
    RECEIPT_EVENTS,
    ROLLED_BACK,
    SCENARIOS,
    CrashRow,
    batch_text,
    crash_matrix,
    crash_rows,
    prepare,
    run_case,
    uncovered_points,
)

PACKAGE = Path(queue_core.__file__).parent
RECORDS = Path(__file__).resolve().parent.parent / "test-artifacts" / "evidence"  # the page reads them here
SCENARIO_KEYS = [s.key for s in SCENARIOS]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> list[CrashRow]:
    folder = tmp_path_factory.mktemp("crash-matrix")
    began = time.monotonic()
    rows = crash_matrix(folder)
    records.save_record("crash-matrix", {}, rows, by="tests/test_crash_matrix.py",
                        seconds=time.monotonic() - began, folder=RECORDS)
    return rows


def failures(rows: list[CrashRow]) -> str:
    return "\n".join(f"{r.scenario} {r.label} {r.how}: {'; '.join(r.violations)}" for r in rows if not r.ok)


def test_every_fault_point_is_crashed_at_both_ways(matrix: list[CrashRow]) -> None:
    assert len(PROBE_POINTS) == 42  # 36 of the simple path (claim: 4, one statement; extend and release: 5 each), 3 of each batch operation's own
    assert uncovered_points(matrix) == set()
    ways = Counter((row.scenario, row.point, row.hit) for row in matrix)
    assert set(ways.values()) == {2}  # each case once by os._exit, once by SIGKILL
    assert {row.operation for row in matrix} == set(OPERATIONS)
    assert len(matrix) >= 2 * len(PROBE_POINTS)
    for row in matrix:  # every case died at a point of its own operation, at a hit the operation reaches
        assert row.point in points_of(row.operation), row
        assert 1 <= row.hit <= row.repeats, row


def test_every_point_of_a_batch_is_crashed_at_every_hit(matrix: list[CrashRow]) -> None:
    batch_points = {p for p in PROBE_POINTS if p.split(".")[0] in BATCH_OPERATIONS}
    assert len(batch_points) == 6
    assert batch_points <= {row.point for row in matrix if row.operation in BATCH_OPERATIONS}
    claims = Counter(row.label for row in matrix if row.scenario == "claim-many")
    # claim_many(3): the first statement takes E0001..E0003 (E0001 expires to dead, E0002 and E0003
    # are leased), the second takes the one still wanted (E0004): three leases.
    assert claims == Counter({label: 2 for label in (
        "claim_many.after_begin", "claim.after_update #1", "claim.after_update #2", "claim.after_update #3",
        "claim_many.before_commit", "claim_many.after_commit")})
    completions = Counter(row.label for row in matrix if row.scenario == "complete-many")
    # complete_many of E0002 (done), E0001 (stale: refused before any point) and E0004 (refused by the handler).
    assert completions == Counter({label: 2 for label in (
        "complete_many.after_begin", "complete.after_read #1", "complete.after_effect", "complete.after_recheck",
        "complete.after_update #1", "complete.after_read #2", "complete.after_update #2",
        "complete_many.before_commit", "complete_many.after_commit")})
    for row in matrix:
        if row.operation in BATCH_OPERATIONS:
            assert row.ok and row.losses == row.doubles == 0, row
            assert row.after_crash == (COMMITTED if row.point.endswith(".after_commit") else ROLLED_BACK), row


@pytest.mark.parametrize("scenario", SCENARIO_KEYS)
def test_a_crash_anywhere_in_the_operation_loses_nothing_and_doubles_nothing(
    matrix: list[CrashRow], scenario: str
) -> None:
    rows = [row for row in matrix if row.scenario == scenario]
    assert rows
    assert failures(rows) == ""
    for row in rows:
        assert row.total_cents == row.expected_total


def test_the_child_really_died_at_the_point(matrix: list[CrashRow]) -> None:
    for row in matrix:
        assert row.exit_status == (CRASH_EXIT_CODE if row.how == "exit" else -signal.SIGKILL), row


def test_before_commit_everything_is_rolled_back_after_commit_everything_stays(
    matrix: list[CrashRow],
) -> None:
    for row in matrix:
        expected = COMMITTED if row.point.endswith(".after_commit") else ROLLED_BACK
        assert row.after_crash == expected, row


def test_the_matrix_takes_each_branch_of_the_specification(matrix: list[CrashRow]) -> None:
    finals = {(row.scenario, row.after_crash): row.shown_final for row in matrix}
    # A committed claim that nobody completes costs an attempt: generation 2 finishes it.
    assert finals[("claim", COMMITTED)] == "E0001 done 2/2"
    assert finals[("claim", ROLLED_BACK)] == "E0001 done 1/1"
    # Effect + ACK: rolled back means generation 2 does the work; committed means it is done once.
    assert finals[("complete", ROLLED_BACK)] == "E0001 done 2/2"
    assert finals[("complete", COMMITTED)] == "E0001 done 1/1"
    # Redrive keeps the generation and resets attempts; without a fix the message dies again.
    assert finals[("redrive", COMMITTED)] == "E0004 done 1/2, E0005 dead 1/2"
    resent = {row.resent for row in matrix if row.scenario == "enqueue"}
    assert resent == {"resent: 2 accepted, 3 duplicates", "resent: 0 accepted, 5 duplicates"}
    # Receipts: the same operation under E0001 and E0002 makes one effect, whoever gets there first.
    assert finals[("complete-receipt-first", COMMITTED)] == "E0001 done 1/1, E0002 done 1/1 on E0001's receipt"
    assert finals[("complete-receipt-first", ROLLED_BACK)] == "E0001 done 2/2 on E0002's receipt, E0002 done 1/1"
    assert finals[("complete-receipt-reused", COMMITTED)] == "E0001 done 1/1, E0002 done 1/1 on E0001's receipt"
    assert finals[("complete-receipt-reused", ROLLED_BACK)] == "E0001 done 1/1, E0002 done 2/2 on E0001's receipt"
    # claim_many: the expiry to dead and the three leases commit together, or nothing does.
    after = {(row.scenario, row.after_crash): row.shown_after_crash for row in matrix}
    assert after[("claim-many", COMMITTED)] == (
        "E0001 dead 3/3, E0002 leased 1/1, E0003 leased 1/1, E0004 leased 1/1, E0005 ready 0/0")
    assert after[("claim-many", ROLLED_BACK)] == (
        "E0001 leased 3/3, E0002 ready 0/0, E0003 ready 0/0, E0004 ready 0/0, E0005 ready 0/0")
    assert finals[("claim-many", COMMITTED)] == (
        "E0001 dead 3/3, E0002 done 2/2, E0003 done 2/2, E0004 dead 2/2, E0005 done 1/1")
    assert finals[("claim-many", ROLLED_BACK)] == (
        "E0001 dead 3/3, E0002 done 1/1, E0003 done 1/1, E0004 dead 1/1, E0005 done 1/1")
    # complete_many: the stale lease of E0001 leaves its current lease (generation 2) untouched.
    assert after[("complete-many", COMMITTED)] == "E0001 leased 2/2, E0002 done 1/1, E0004 dead 1/1"
    assert after[("complete-many", ROLLED_BACK)] == "E0001 leased 2/2, E0002 leased 1/1, E0004 leased 1/1"
    assert finals[("complete-many", COMMITTED)] == "E0001 done 3/3, E0002 done 1/1, E0004 dead 1/1"
    assert finals[("complete-many", ROLLED_BACK)] == "E0001 done 3/3, E0002 done 2/2, E0004 dead 2/2"


def test_receipt_completions_die_at_every_point_of_complete_they_reach(matrix: list[CrashRow]) -> None:
    complete_points = {p for p in PROBE_POINTS if p.startswith("complete.")}
    first = {row.point for row in matrix if row.scenario == "complete-receipt-first"}
    reused = {row.point for row in matrix if row.scenario == "complete-receipt-reused"}
    assert first == complete_points  # the effect and the receipt are written
    # On a reused receipt the handler writes nothing, and returns: after_effect is where its writes
    # would be, so the child dies there too (and the file is exactly as before).
    assert reused == complete_points
    for row in matrix:
        if row.scenario.startswith("complete-receipt"):
            assert row.total_cents == row.expected_total == 12000  # the operation counts once


# ------------------------------------------------------ the harness cannot pass by accident


def test_a_point_the_operation_never_reaches_is_a_failure_not_a_pass(tmp_path: Path) -> None:
    refused = next(s for s in SCENARIOS if s.key == "complete-refused")
    prepared = prepare(refused, tmp_path / "prepare")
    assert "complete.after_effect" not in {point for point, _, _ in prepared.reached}
    row = run_case(prepared, "complete.after_effect", 1, 1, "exit", tmp_path / "case")
    assert row.exit_status == NOT_REACHED_EXIT_CODE
    assert any("exited with 3" in v for v in row.violations)


def test_the_child_completes_under_receipts_only_when_asked(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    with Store(db, clock=ModelClock(1000)) as store:
        ledger.install(store)
        store.enqueue(batch_text(RECEIPT_EVENTS))
        lease = store.claim(2)
    assert lease is not None
    assert "--receipts" not in child_command(db, "complete", lease=lease, now=1000, trace=True)
    under = child_command(db, "complete", lease=lease, now=1000, trace=True, receipts=True)
    assert "--receipts" in under
    assert "--receipts" in child_command(db, "complete_many", leases=[lease], now=1000, trace=True, receipts=True)
    for operation in ("claim", "claim_many", "enqueue", "fail", "redrive"):
        with pytest.raises(ValueError, match="only to complete"):
            child_command(db, operation, now=1000, trace=True, receipts=True)
    assert subprocess.run(under, capture_output=True, check=False).returncode == 0
    assert [(r[0], r[1], r[3]) for r in read_file(db).receipts] == [("north", "order-7:charge", "E0001")]


def test_the_child_refuses_a_point_of_another_operation(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    with Store(db, clock=ModelClock(1000)) as store:
        store.enqueue('{"event_id": "E0001", "payload": {"category": "pen", "amount_cents": 1}}\n')
    status = run_crashing(db, "claim", now=1000, point="complete.after_effect", capture=True)
    assert status == 2
    # A batch reaches its messages' points, but not another operation's, nor the batch of the other kind.
    assert run_crashing(db, "claim_many", count=2, now=1000, point="complete.after_read", capture=True) == 2
    assert run_crashing(db, "claim_many", count=2, now=1000, point="complete_many.after_begin", capture=True) == 2
    assert run_crashing(db, "claim", now=1000, point="claim_many.after_begin", capture=True) == 2
    with Store(db) as store:
        assert store.message("E0001").state == "ready"
    assert points_of("claim") == {p for p in PROBE_POINTS if p.startswith("claim.")}
    assert points_of("claim_many") == points_of("claim") | {
        "claim_many.after_begin", "claim_many.before_commit", "claim_many.after_commit"}
    assert points_of("complete_many") == {p for p in PROBE_POINTS if p.startswith("complete.")} | {
        "complete_many.after_begin", "complete_many.before_commit", "complete_many.after_commit"}


def test_the_batch_child_takes_its_count_and_its_leases(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    events = {f"E000{n}": {"category": "pen", "amount_cents": n} for n in range(1, 5)}
    with Store(db, clock=ModelClock(1000)) as store:
        ledger.install(store)
        store.enqueue(batch_text(events))
    with pytest.raises(ValueError, match="count"):
        child_command(db, "claim_many", now=1000, trace=True)
    with pytest.raises(ValueError, match="leases"):
        child_command(db, "complete_many", now=1000, trace=True)
    claimed = subprocess.run(child_command(db, "claim_many", count=3, lease_seconds=5, now=1000, trace=True),
                             capture_output=True, text=True, check=False)
    assert claimed.returncode == 0, claimed.stderr
    # One statement leases the three.
    assert claimed.stdout.split() == ["claim_many.after_begin"] + ["claim.after_update"] * 3 + [
        "claim_many.before_commit", "claim_many.after_commit"]
    # the leases as the child's claim made them: with the token it stored (one per claim)
    with closing(sqlite3.connect(db)) as conn:
        leases = [Lease(*row) for row in conn.execute(
            "SELECT event_id, generation, attempts, lease_until, lease_token FROM messages"
            " WHERE state = 'leased' ORDER BY event_id")]
    assert [(lease.event_id, lease.lease_until) for lease in leases] == [
        ("E0001", 1005), ("E0002", 1005), ("E0003", 1005)]
    token = leases[0].token
    assert token != 0 and {lease.token for lease in leases} == {token}
    assert [(again, again.token) for again in map(parse_lease_argument, map(lease_argument, leases))] == [
        (lease, token) for lease in leases]
    command = child_command(db, "complete_many", leases=leases[::-1], now=1001, trace=True)
    assert command.count("--lease") == 3 and command[command.index("--lease") + 1] == f"E0003:1:1:1005:{token}"
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split().count("complete.after_update") == 3
    state = read_file(db)
    assert [(m.event_id, m.state) for m in state.messages] == [
        ("E0001", "done"), ("E0002", "done"), ("E0003", "done"), ("E0004", "ready")]
    assert check_invariants(state, events=events, expected_total=6, finished=False) == []
    # A malformed lease, a count the store refuses: usage errors (2), the file untouched.
    for bad in (["complete_many", str(db), "--lease", "E0004:1:1", "--now", "1001", "--trace"],
                ["complete_many", str(db), "--lease", "E0004:1:1:9", "--now", "1001", "--trace"],
                ["complete_many", str(db), "--lease", "E0004:x:1:9:5", "--now", "1001", "--trace"],
                ["claim_many", str(db), "--count", "0", "--now", "1001", "--trace"],
                ["claim_many", str(db), "--count", "1001", "--now", "1001", "--trace"]):
        result = subprocess.run([*child_command(db, "claim", now=0, trace=True)[:3], *bad],
                                capture_output=True, text=True, check=False)
        assert result.returncode == 2, (bad, result.stderr)
    assert read_file(db).rows() == state.rows()


def naive_file(tmp_path: Path, sql: str) -> Path:
    """A finished queue file, then broken on purpose by raw SQL (as a buggy client would)."""
    tmp_path.mkdir(exist_ok=True)
    db = tmp_path / "q.sqlite3"
    with Store(db, clock=ModelClock(1000)) as store:
        store.enqueue(batch_text(DEMO_EVENTS))
    finish_queue(db, 1000)  # closes its store too: everything is in the main file now
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA ignore_check_constraints = ON")
    conn.executescript(sql)
    conn.close()
    return db


BROKEN = {
    "done without its effect": ("DELETE FROM effects WHERE event_id = 'E0001'", "E0001 is done with 0 effects"),
    "effect without done": ("UPDATE messages SET state = 'leased', lease_until = 9 WHERE event_id = 'E0002'",
                            "effect of E0002 without a done message"),
    "effect differs from the payload": ("UPDATE effects SET amount_cents = 1 WHERE event_id = 'E0003'",
                                        "effect of E0003 is book 1"),
    "dead without a reason": ("UPDATE messages SET last_error = NULL WHERE event_id = 'E0004'",
                              "E0004 is dead without a recorded reason"),
    "generation behind attempts": ("UPDATE messages SET generation = 0 WHERE event_id = 'E0001'",
                                   "E0001: generation 0 < attempts 1"),
    "left unfinished": ("UPDATE messages SET state = 'ready' WHERE event_id = 'E0004'",
                        "E0004 is still ready after the final pass"),
    "an event never stored": ("DELETE FROM messages WHERE event_id = 'E0004'", "E0004 was sent but is not stored"),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_the_checker_finds_each_kind_of_violation(tmp_path: Path, case: str) -> None:
    sql, expected = BROKEN[case]
    healthy = naive_file(tmp_path / "healthy", "")
    assert check_invariants(healthy, events=DEMO_EVENTS, expected_total=17000) == []
    broken = naive_file(tmp_path / "broken", sql)
    found = check_invariants(broken, events=DEMO_EVENTS)
    assert any(expected in v for v in found), found


def receipt_file(tmp_path: Path, sql: str) -> Path:
    """A queue finished under receipts (E0002 ACKed on E0001's receipt), then broken by raw SQL."""
    tmp_path.mkdir(exist_ok=True)
    db = tmp_path / "q.sqlite3"
    with Store(db, clock=ModelClock(1000)) as store:
        store.enqueue(batch_text(RECEIPT_EVENTS))
    finish_queue(db, 1000, receipts=True)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA ignore_check_constraints = ON")
    conn.executescript(sql)
    conn.close()
    return db


NORTH_7 = "north/order-7:charge"
BROKEN_RECEIPTS = {
    "a receipt names no effect": (
        "UPDATE receipts SET effect = 'E0009' WHERE tenant = 'south'",
        "receipt south/order-7:charge names E0009, which has no effect", (0, 1)),
    "an effect with two receipts": (
        "INSERT INTO receipts (scope, tenant, operation, payload, effect, effect_queue) "
        "VALUES ('default', 'north', 'order-9:charge', '{}', 'E0003', 'default')",
        "effect of E0003 has 2 receipts", (0, 0)),
    "done without effect or receipt": (
        "DELETE FROM receipts WHERE tenant = 'north'",
        "E0002 is done with 0 effects and no receipt of its operation (lost)", (1, 0)),
    "a receipt of another operation is no proof": (
        "UPDATE receipts SET operation = 'order-9:charge' WHERE tenant = 'north'",
        "E0002 is done with 0 effects and no receipt of its operation (lost)", (1, 0)),
    "a receipt whose effect is gone is no proof": (
        "DELETE FROM effects WHERE event_id = 'E0001'",
        f"E0002 is done with 0 effects and the receipt of {NORTH_7} is no proof (effect E0001 missing)", (2, 0)),
    "a receipt of another payload is no proof": (
        "UPDATE receipts SET payload = json_set(payload, '$.amount_cents', 1) WHERE tenant = 'north'",
        f"E0002 is done with 0 effects and the receipt of {NORTH_7} is no proof (effect E0001 of another payload)",
        (1, 0)),
    "the operation doubled under another event id": (
        "INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0002', 'book', 10000)",
        f"E0002 has an effect of its own, but the receipt of its operation {NORTH_7} names E0001", (0, 1)),
}


@pytest.mark.parametrize("case", BROKEN_RECEIPTS, ids=list(BROKEN_RECEIPTS))
def test_the_checker_finds_each_kind_of_receipt_violation(tmp_path: Path, case: str) -> None:
    sql, expected, lost_doubled = BROKEN_RECEIPTS[case]
    healthy = receipt_file(tmp_path / "healthy", "")
    assert check_invariants(healthy, events=RECEIPT_EVENTS, expected_total=12000) == []
    state = read_file(healthy)
    assert [(r[0], r[1], r[3]) for r in state.receipts] == [
        ("north", "order-7:charge", "E0001"), ("south", "order-7:charge", "E0003")]
    assert [e for e, _, _ in state.effects] == ["E0001", "E0003"]  # E0002 is done on E0001's receipt
    valid = {"E0001", "E0002", "E0003"}
    assert losses_and_doubles(state, RECEIPT_EVENTS, valid) == (0, 0)
    broken = receipt_file(tmp_path / "broken", sql)
    found = check_invariants(broken, events=RECEIPT_EVENTS)
    assert any(expected in v for v in found), found
    assert losses_and_doubles(read_file(broken), RECEIPT_EVENTS, valid) == lost_doubled


def test_without_receipts_a_done_message_needs_its_own_effect(tmp_path: Path) -> None:
    # The same file finished by a plain handler: both E0001 and E0002 have an effect and no receipt
    # exists; the receipt rules stay silent and the money counts the operation twice, as it was done.
    db = tmp_path / "q.sqlite3"
    with Store(db, clock=ModelClock(1000)) as store:
        store.enqueue(batch_text(RECEIPT_EVENTS))
    finish_queue(db, 1000)
    assert read_file(db).receipts == ()
    assert check_invariants(db, events=RECEIPT_EVENTS, expected_total=22000) == []


def test_the_checker_finds_doubled_money_and_a_damaged_file(tmp_path: Path) -> None:
    db = naive_file(tmp_path, "")
    assert not (tmp_path / "q.sqlite3-wal").exists()  # every connection closed: the main file holds it all
    assert check_invariants(db, expected_total=27000) == ["money: effects add up to 17000, expected 27000"]
    state = read_file(db)
    doubled = FileState(state.integrity, 0, state.messages, state.effects + (state.effects[0],))
    assert any("with 2 effects (doubled)" in v for v in check_invariants(doubled))
    with closing(sqlite3.connect(db)) as conn:  # a page in use: a free page's bytes are never read
        root, size = conn.execute("SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master"
                                  " WHERE name = 'messages'").fetchone()
    data = bytearray(db.read_bytes())
    start = (root - 1) * size
    data[start + 8: start + 64] = b"\xff" * 56  # overwrite the cell pointers of the messages table's root
    db.write_bytes(bytes(data))
    assert check_invariants(db) != []


def test_the_checker_only_reads(tmp_path: Path) -> None:
    db = naive_file(tmp_path, "")
    before = db.read_bytes()
    check_invariants(db, events=DEMO_EVENTS, expected_total=17000)
    assert db.read_bytes() == before
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            conn.execute("DELETE FROM effects")
        finally:
            conn.close()


# ------------------------------------------- probe points cost nothing without a probe


def calls_made(reach: Callable[[str], None]) -> list[str]:
    """Every function, Python or C, that one call of ``reach`` at a point makes (sys.setprofile)."""
    made: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            made.append(frame.f_code.co_qualname)
        elif event == "c_call":
            made.append(getattr(arg, "__qualname__", repr(arg)))

    sys.setprofile(profile)
    try:
        reach("complete.after_effect")
    finally:
        sys.setprofile(None)
    return [name for name in made if name != "setprofile"]


def test_a_point_without_a_probe_does_nothing_but_look(tmp_path: Path) -> None:
    """What a fault point costs where nothing is armed, counted rather than timed: the point's
    own call, then at most one dictionary lookup; no I/O, no clock, no lock, no logging."""
    with Store(tmp_path / "q.sqlite3") as store:  # no probe: what the CLI and every application run
        assert calls_made(store._scope.at) == ["Scope.at"]
        assert calls_made(FaultPlan()) == ["FaultPlan.__call__", "dict.get"]  # a probe with nothing armed

    # Negative control: a point that did any work beyond the lookup would be seen.
    def noisy(point: str) -> None:
        time.monotonic()

    assert calls_made(noisy) == ["test_a_point_without_a_probe_does_nothing_but_look.<locals>.noisy",
                                 "monotonic"]


def test_nothing_in_queue_core_arms_a_fault_point_except_the_crash_child() -> None:
    arming = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "arm":
                arming.add(path.relative_to(PACKAGE).as_posix())
    assert arming == {"app/crash_child.py"}
    faults_source = (PACKAGE / "testing" / "faults.py").read_text(encoding="utf-8")
    assert "environ" not in faults_source and "getenv" not in faults_source  # no switch from outside
    # The protocol, its applications and the CLI never import the proof machinery: a probe comes only
    # from whoever opens a Store (the demo, which shows a real crash, runs the crashing child).
    for path in PACKAGE.glob("*.py"):
        if path.name == "demo.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert "testing" not in (node.module or "").split("."), (path.name, node.module)
                assert all(alias.name != "testing" for alias in node.names), path.name


def test_the_cli_offers_no_way_to_a_fault_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modules = sorted((PACKAGE / "cli").glob("*.py"))
    assert len(modules) > 3, modules  # the CLI's package: every module of it is read
    for module in modules:
        cli_source = module.read_text(encoding="utf-8")
        # (words, not parts of words: the table speaks of "defaults")
        found = re.findall(r"\b(?:testing|probe|faults|evidence)\b|_child", cli_source)
        assert found == [], (module.name, found)
    parser = cli.build_parser()
    texts = [parser.format_help()]
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]  # every command's own help
        texts += [sub.format_help() for sub in action.choices.values()]  # type: ignore[union-attr]
    for text in texts:
        assert not re.search(r"\bfault|\bprobe|--point|--how|--hit|_child", text), text
    # The CLI's own process never gives a store a probe, whatever it runs.
    probes: list[object] = []
    opened = Store.__init__

    def recording(self: Store, *args: object, **kwargs: object) -> None:
        probes.append(kwargs.get("probe"))
        opened(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "__init__", recording)
    db = tmp_path / "q.sqlite3"
    batch = tmp_path / "b.jsonl"
    batch.write_text(batch_text(DEMO_EVENTS), encoding="utf-8")
    for argv in (["enqueue", str(batch)], ["work"], ["status"], ["dead"]):
        assert cli.main(["--db", str(db), "--now", "1000", *argv]) == 0
    assert len(probes) >= 4 and set(probes) == {None}
    # The module that can arm points is not a command of queue-core.
    for name in ("_child", "child", "testing"):
        result = subprocess.run([*QUEUE_CORE, name, "--help"], capture_output=True, text=True)
        assert result.returncode == 2 and "invalid choice" in result.stderr


def test_the_completion_helper_builds_the_same_crash(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    with Store(db, clock=ModelClock(1000)) as store:  # open beside the child, as another worker would be
        ledger.install(store)
        store.enqueue('{"event_id": "E0001", "payload": {"category": "pen", "amount_cents": 1}}\n')
        lease = store.claim(2)
        assert lease is not None
        assert child_command(db, "complete", lease=lease, now=1000, point="complete.after_effect")[3:6] == [
            "complete", str(db), "E0001"]
        from queue_core.app.crash_child import run_crashing_completion
        assert run_crashing_completion(db, lease, 1000) == CRASH_EXIT_CODE  # dies at complete.after_effect
        assert ledger.effects(store) == []
        assert store.complete(lease, Handler()).outcome.value == "done"
        assert ledger.effects(store) == [("E0001", "pen", 1)]


def test_the_page_uses_a_record_only_for_the_same_code_and_parameters(tmp_path: Path) -> None:
    runs = []

    def run() -> list[int]:
        runs.append(1)
        return [len(runs)]

    first = records.recorded("x", {"n": 1}, run, by="test", folder=tmp_path)
    again = records.recorded("x", {"n": 1}, run, by="test", folder=tmp_path)
    assert first.result == again.result == [1] and len(runs) == 1  # fresh: reused
    assert records.load_record("x", {"n": 2}, folder=tmp_path) is None  # other parameters
    assert records.load_record("y", {"n": 1}, folder=tmp_path) is None  # never recorded
    stale = json.loads((tmp_path / "x.json").read_text(encoding="utf-8"))
    stale["fingerprint"] = "0" * 16  # made for other code
    (tmp_path / "x.json").write_text(json.dumps(stale), encoding="utf-8")
    assert records.recorded("x", {"n": 1}, run, by="test", folder=tmp_path).result == [2]


def test_a_record_round_trips_the_rows_of_the_matrix(tmp_path: Path) -> None:
    row = CrashRow("complete", "complete", "complete.after_effect", 1, 1, "sigkill", -9, ROLLED_BACK,
                   "E0001 leased 1/1", "", "E0001 done 2/2", 15000, 15000, 0, 0, ("a violation",))
    saved = records.save_record("rows", {}, [row], by="test", seconds=0.0, folder=tmp_path)
    loaded = records.load_record("rows", {}, folder=tmp_path)
    assert loaded == saved and loaded is not None
    assert crash_rows(loaded) == [row]
    assert loaded.fingerprint == records.fingerprint() and loaded.for_this_code


def test_the_fingerprint_changes_with_the_protocol_the_schemas_and_the_proof_machinery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "queue_core"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    proof_copy = tmp_path / "proof"
    shutil.copytree(records.PROOF, proof_copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(records, "PACKAGE", copy)
    monkeypatch.setattr(records, "PROOF", proof_copy)
    original = records.fingerprint()
    assert original == records.fingerprint()
    for name in ("store.py", "completion.py", "engines/sqlite_queries.sql",
                 "app/ledger_migrations/sqlite/0001_effects.sql",
                 "engines/sqlite_migrations/0002_details_and_receipts.sql",
                 "engines/postgres_migrations/0003_metrics_and_prune.sql", "app/crash_child.py",
                 "../proof/matrix.py", "../proof/invariants.py"):
        path = copy / name
        text = path.read_text(encoding="utf-8")
        path.write_text(text + "\n", encoding="utf-8")
        assert records.fingerprint() != original, name
        path.write_text(text, encoding="utf-8")
    assert records.fingerprint() == original
