"""The lab's engine (docs_support/lab_engine.py) under CPython: every scenario, every step.

The page ``docs/lab.md`` runs this same module in the reader's browser
(``tests/test_lab_page.py`` drives it there). Here each scenario is replayed
under every ACK on a real SQLite file, and after every step the rows and
effects the step reports are compared with what the file itself holds, read
by the test on a connection of its own.
"""

from __future__ import annotations

import ast
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from docs_support import lab_engine, lab_story
from docs_support.lab_engine import ACKS, LEASE_SECONDS, Lab, LabError
from docs_support.lab_story import SCENARIOS, replay, verdict
from queue_core.store import PROBE_POINTS


def brief(step: dict[str, Any]) -> str:
    """One step as a line: the action, its outcome, the clock, the rows and the effects."""
    rows = " ".join(
        f"{r['event_id']} {r['state']} {r['attempts']}/{r['generation']}"
        + (f" until {r['lease_until']}" if r["lease_until"] else "")
        + (f" {r['last_error']}" if r["last_error"] else "")
        for r in step["rows"]
    )
    effects = ", ".join(f"{e['event_id']} by {e['worker']} g{e['generation']}"
                        for e in step["effects"]) or "none"
    return f"{step['actor']}.{step['action']} {step['outcome']} @{step['at']} | {rows} | effects: {effects}"


def file_holds(db: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The messages and effects as the test reads them from the file, on its own connection."""
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA query_only = 1")
        rows = conn.execute("SELECT event_id, state, attempts, generation, lease_until, available_at,"
                            " last_error FROM messages ORDER BY event_id").fetchall()
        effects = conn.execute("SELECT n, event_id, worker, generation, amount_cents, at"
                               " FROM lab_effects ORDER BY n").fetchall()
    return rows, effects


def shown(step: dict[str, Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The same, as the step reported them."""
    rows = [(r["event_id"], r["state"], r["attempts"], r["generation"], r["lease_until"],
             r["available_at"], r["last_error"]) for r in step["rows"]]
    effects = [(e["n"], e["event_id"], e["worker"], e["generation"], e["amount_cents"], e["at"])
               for e in step["effects"]]
    return rows, effects


def run(tmp_path: Path, scenario: str, ack: str) -> Lab:
    """The scenario step by step, each step's report checked against the file right after it."""
    lab = replay(tmp_path, scenario, ack, [])
    assert shown(lab.steps[0]) == file_holds(lab.db)
    for action, _caption in SCENARIOS[scenario].steps:
        step = lab.act(action)
        assert shown(step) == file_holds(lab.db), (scenario, ack, action)
    return lab


# Under queue_core's fence, each scenario's every step (checked by hand against the chapters).
FENCED = {
    "gc-pause": [
        "lab.start ok @1000 | E0001 ready 0/0 | effects: none",
        "A.claim ok @1000 | E0001 leased 1/1 until 1003 | effects: none",
        "A.pause ok @1000 | E0001 leased 1/1 until 1003 | effects: none",
        # the lease has ended, and nothing in the row says so: no sweeper
        "clock.lease ok @1003 | E0001 leased 1/1 until 1003 | effects: none",
        "B.claim ok @1003 | E0001 leased 2/2 until 1006 | effects: none",
        "clock.1 ok @1004 | E0001 leased 2/2 until 1006 | effects: none",
        "A.wake ok @1004 | E0001 leased 2/2 until 1006 | effects: none",
        "A.complete refused @1004 | E0001 leased 2/2 until 1006 | effects: none",
        "B.complete ok @1004 | E0001 done 2/2 | effects: E0001 by B g2",
    ],
    "lost-claim": [
        "lab.start ok @1000 | E0001 ready 0/0 | effects: none",
        "db.copy ok @1000 | E0001 ready 0/0 | effects: none",
        "A.claim ok @1000 | E0001 leased 1/1 until 1003 | effects: none",
        # the copy from before the claim takes over: the claim is forgotten
        "db.restore ok @1000 | E0001 ready 0/0 | effects: none",
        "B.claim ok @1000 | E0001 leased 1/1 until 1003 | effects: none",
        "A.complete refused @1000 | E0001 leased 1/1 until 1003 | effects: none",
        "B.complete ok @1000 | E0001 done 1/1 | effects: E0001 by B g1",
    ],
    "crash": [
        "lab.start ok @1000 | E0001 ready 0/0 | effects: none",
        "A.claim ok @1000 | E0001 leased 1/1 until 1003 | effects: none",
        "A.crash crashed @1000 | E0001 leased 1/1 until 1003 | effects: none",
        "clock.lease ok @1003 | E0001 leased 1/1 until 1003 | effects: none",
        "B.claim ok @1003 | E0001 leased 2/2 until 1006 | effects: none",
        "B.complete ok @1003 | E0001 done 2/2 | effects: E0001 by B g2",
    ],
    "poison": [
        "lab.start ok @1000 | E0001 ready 0/0 E0002 ready 0/0 | effects: none",
        "A.claim ok @1000 | E0001 leased 1/1 until 1003 E0002 ready 0/0 | effects: none",
        "A.complete crashed @1000 | E0001 leased 1/1 until 1003 E0002 ready 0/0 | effects: none",
        "clock.lease ok @1003 | E0001 leased 1/1 until 1003 E0002 ready 0/0 | effects: none",
        "B.claim ok @1003 | E0001 leased 2/2 until 1006 E0002 ready 0/0 | effects: none",
        "B.complete crashed @1003 | E0001 leased 2/2 until 1006 E0002 ready 0/0 | effects: none",
        "clock.lease ok @1006 | E0001 leased 2/2 until 1006 E0002 ready 0/0 | effects: none",
        "A.claim ok @1006 | E0001 leased 3/3 until 1009 E0002 ready 0/0 | effects: none",
        "A.complete crashed @1006 | E0001 leased 3/3 until 1009 E0002 ready 0/0 | effects: none",
        "clock.lease ok @1009 | E0001 leased 3/3 until 1009 E0002 ready 0/0 | effects: none",
        "B.claim ok @1009 | E0001 dead 3/3 lease_expired E0002 leased 1/1 until 1012 | effects: none",
        "B.complete ok @1009 | E0001 dead 3/3 lease_expired E0002 done 1/1 | effects: E0002 by B g1",
    ],
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_step_of_every_scenario_under_the_fence(tmp_path: Path, scenario: str) -> None:
    lab = run(tmp_path, scenario, "fenced")
    try:
        assert [brief(step) for step in lab.steps] == FENCED[scenario]
        assert all(v["kind"] in ("once", "none") for v in verdict(lab))
        assert len(SCENARIOS[scenario].steps) + 1 == len(lab.steps)
    finally:
        lab.close()


# (scenario, ACK) -> the outcomes of the scenario's completions, and each message's verdict.
COMPLETIONS = {
    ("gc-pause", "fenced"): (["refused", "ok"], {"E0001": ("once", 1)}),
    ("gc-pause", "generation"): (["refused", "ok"], {"E0001": ("once", 1)}),
    # the stale worker's ACK passes (B's lease is valid), B's then finds the message done
    ("gc-pause", "time"): (["ok", "refused"], {"E0001": ("stale", 1)}),
    ("gc-pause", "none"): (["ok", "ok"], {"E0001": ("doubled", 2)}),
    ("lost-claim", "fenced"): (["refused", "ok"], {"E0001": ("once", 1)}),
    # the same generation twice: only the claim token tells A from B
    ("lost-claim", "generation"): (["ok", "refused"], {"E0001": ("stale", 1)}),
    ("lost-claim", "time"): (["ok", "refused"], {"E0001": ("stale", 1)}),
    ("lost-claim", "none"): (["ok", "ok"], {"E0001": ("doubled", 2)}),
}


@pytest.mark.parametrize("scenario, ack", list(COMPLETIONS))
def test_the_naive_acks_fail_where_the_chapters_say(tmp_path: Path, scenario: str, ack: str) -> None:
    lab = run(tmp_path, scenario, ack)
    try:
        outcomes = [s["outcome"] for s in lab.steps if s["action"] == "complete"]
        judged = {v["event_id"]: (v["kind"], v["effects"]) for v in verdict(lab)}
        assert (outcomes, judged) == COMPLETIONS[(scenario, ack)]
        # the claims are the same under every ACK: only the ACK differs
        claims = [brief(s) for s in lab.steps if s["action"] in ("claim", "copy", "restore")]
        assert claims == [line for line in FENCED[scenario] if ".claim " in line or "db." in line]
        stale = [e for e in lab.effects() if not e["fence_held"]]
        assert (judged["E0001"][0] == "once") == (stale == [])
    finally:
        lab.close()


@pytest.mark.parametrize("scenario", ["crash", "poison"])
@pytest.mark.parametrize("ack", list(ACKS))
def test_a_crash_is_the_same_under_every_ack(tmp_path: Path, scenario: str, ack: str) -> None:
    """A crash is about one transaction, not about the fence: every ACK ends as the fenced one."""
    lab = run(tmp_path, scenario, ack)
    try:
        assert [brief(s) for s in lab.steps] == FENCED[scenario]
    finally:
        lab.close()


def test_the_doubled_effect_is_seen_only_without_the_fence(tmp_path: Path) -> None:
    """The negative control: the same steps double the money unfenced, and not fenced."""
    actions = [action for action, _ in SCENARIOS["gc-pause"].steps]
    unfenced = replay(tmp_path / "none", "gc-pause", "none", actions)
    fenced = replay(tmp_path / "fenced", "gc-pause", "fenced", actions)
    try:
        assert [e["worker"] for e in unfenced.effects()] == ["A", "B"]
        assert sum(e["amount_cents"] for e in unfenced.effects()) == 20000
        assert [e["worker"] for e in fenced.effects()] == ["B"]
        assert sum(e["amount_cents"] for e in fenced.effects()) == 10000
    finally:
        unfenced.close()
        fenced.close()


def test_the_row_holds_the_claim_token_of_the_current_lease(tmp_path: Path) -> None:
    lab = replay(tmp_path, "lost-claim", "fenced", ["db.copy", "A.claim", "db.restore", "B.claim"])
    try:
        a, b = (lab.steps[-1]["workers"][name]["lease"] for name in "AB")
        (row,) = lab.steps[-1]["rows"]
        assert a["generation"] == b["generation"] == row["generation"] == 1
        assert row["token"] == b["token"] != a["token"]
        # the token shown is the one the file holds
        (stored,) = lab.query("SELECT lease_token FROM messages")
        assert row["token"] == "#" + f"{stored[0]:016x}"[:6]
    finally:
        lab.close()


def test_a_crash_leaves_a_sound_file_without_the_effect_and_the_worker_gone(tmp_path: Path) -> None:
    assert "complete.after_effect" in PROBE_POINTS  # the point the crash matrix names
    lab = replay(tmp_path, "crash", "fenced", ["A.claim", "A.crash"])
    try:
        with closing(sqlite3.connect(lab.db)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert lab.effects() == []
        worker = lab.workers["A"]
        assert (worker.store, worker.claimed, worker.crashed) == (None, None, True)
        assert lab.steps[-1]["workers"]["A"] == {"state": "crashed", "lease": None}
        assert lab.leases[-1].how == "crashed" and lab.leases[-1].ended == 1000
        # a crashed worker can only start again by claiming
        allowed = [a for a, why in lab.allowed().items() if a.startswith("A.") and why is None]
        assert allowed == ["A.claim"]
    finally:
        lab.close()


def test_the_crash_is_a_real_one_the_effect_was_written_before_it(tmp_path: Path) -> None:
    """Negative control for the crash: without dying, the same completion commits the effect it wrote."""
    lab = replay(tmp_path, "crash", "fenced", ["A.claim", "A.complete"])
    try:
        assert [(e["worker"], e["generation"]) for e in lab.effects()] == [("A", 1)]
    finally:
        lab.close()


def test_a_paused_worker_can_only_wake_and_a_refused_action_is_a_clear_error(tmp_path: Path) -> None:
    lab = replay(tmp_path, None, "fenced", ["A.claim", "A.pause"])
    try:
        mine = {a: why for a, why in lab.allowed().items() if a.startswith("A.")}
        assert [a for a, why in mine.items() if why is None] == ["A.wake"]
        assert mine["A.complete"] == "A is paused: wake it first"
        with pytest.raises(LabError) as refused:
            lab.act("A.complete")
        assert refused.value.code == "not_allowed"
        with pytest.raises(LabError) as unknown:
            lab.act("C.claim")
        assert unknown.value.code == "not_allowed"
        assert lab.steps[-1]["workers"]["A"]["state"] == "paused"
    finally:
        lab.close()


def test_fail_and_release_take_the_lease_back(tmp_path: Path) -> None:
    lab = replay(tmp_path, None, "fenced", ["A.claim", "A.fail", "clock.1", "B.claim", "B.release"])
    try:
        failed, _, claimed, released = lab.steps[2:]
        assert brief(failed) == ("A.fail ok @1000 | E0001 ready 1/1 downstream_unavailable"
                                 " E0002 ready 0/0 | effects: none")
        assert "ready again at 1001" in failed["said"]
        # the claim order: E0002 has been available since 1000, E0001 since 1001
        assert claimed["said"].startswith("B claims E0002: generation 1")
        # released: ready at once, and that claim did not count as an attempt
        assert brief(released) == ("B.release ok @1001 | E0001 ready 1/1 downstream_unavailable"
                                   " E0002 ready 0/1 | effects: none")
        assert [lease.how for lease in lab.leases] == ["failed", "released"]
    finally:
        lab.close()


def test_back_is_a_replay_of_the_steps_before(tmp_path: Path) -> None:
    actions = [action for action, _ in SCENARIOS["gc-pause"].steps]
    whole = replay(tmp_path / "whole", "gc-pause", "fenced", actions)
    back = replay(tmp_path / "back", "gc-pause", "fenced", actions[:-1])
    try:
        assert [brief(s) for s in back.steps] == [brief(s) for s in whole.steps[:-1]]
    finally:
        whole.close()
        back.close()


def test_the_page_entry_answers_json_and_refuses_with_a_code(tmp_path: Path) -> None:
    started = json.loads(lab_story.call(json.dumps({"do": "start", "scenario": "gc-pause",
                                                     "ack": "none", "actions": ["A.claim"]})))
    assert started["ack"] == "none" and started["lease_seconds"] == LEASE_SECONDS
    assert [s["action"] for s in started["steps"]] == ["start", "claim"]
    assert started["allowed"]["A.claim"] == "A holds a lease already"
    stepped = json.loads(lab_story.call(json.dumps({"do": "act", "action": "clock.lease"})))
    assert stepped["clock"] == 1003
    rows = json.loads(lab_story.call(json.dumps({"do": "query", "sql": "SELECT state FROM messages"})))
    assert rows == {"rows": [["leased"]]}
    for request, code in [({"do": "act", "action": "A.claim"}, "not_allowed"),
                          ({"do": "query", "sql": "DELETE FROM messages"}, "not_a_select"),
                          ({"do": "start", "scenario": "nope"}, "unknown_scenario"),
                          ({"do": "start", "ack": "nope"}, "unknown_ack")]:
        assert json.loads(lab_story.call(json.dumps(request)))["error"] == code


@pytest.mark.parametrize("module", [lab_engine, lab_story])
def test_the_lab_imports_only_the_standard_library_queue_core_and_itself(module: Any) -> None:
    """What the browser has: the standard library, queue_core, and the lab's two modules."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] if node.level == 0 else f".{node.module}"
                 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    allowed = set(sys.stdlib_module_names) | {"queue_core", "__future__", ".lab_engine"}
    assert imported <= allowed, imported - allowed
