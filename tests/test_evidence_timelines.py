"""What the page "Crashes, as timelines" draws (docs_support/evidence_timelines.py).

The crash matrix's committed record (evidence/crash-matrix.json) is drawn case
by case; synthetic rows show that a violation is drawn as one, and synthetic
kills that the random kills are drawn in time order on their lanes.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from typing import Any

import pytest

from docs_support.evidence_timelines import crash_cases, crash_list, kill_timeline, kills, lanes
from proof import matrix, records
from proof.kill_sample import DOING, KillEvent
from queue_core.store import PROBE_POINTS

TITLES = {s.key: s.title for s in matrix.SCENARIOS}


def committed() -> list[dict[str, Any]]:
    record = records.load_committed("crash-matrix")
    assert record is not None, "evidence/crash-matrix.json is missing: python scripts/crash_matrix.py --record"
    return list(record.result)


def test_every_committed_case_is_drawn_with_its_death_on_its_path() -> None:
    rows = committed()
    cases = crash_cases(rows, TITLES)
    assert len(cases) == len(rows) >= 2 * len(PROBE_POINTS)
    def full(operation: str, label: str) -> str:
        point = label.split(" #")[0]
        return point if "." in point else f"{operation}.{point}"

    for row, case in zip(rows, cases):
        assert full(case.operation, case.path[case.died]) == row["point"]
        point = row["point"].split(".", 1)[1]
        assert case.operation == row["operation"] and case.title == TITLES[row["scenario"]]
        # the path is the order the operation reached its points: a committed crash
        # (after COMMIT) is the last point of its path, any other comes before it
        assert (row["after_crash"] == matrix.COMMITTED) == (case.died == len(case.path) - 1
                                                             and point == "after_commit")
    # every probe point is on some path, and each case's path is its scenario's
    assert {full(c.operation, p) for c in cases for p in c.path} == set(PROBE_POINTS)
    assert len({(c.scenario, c.path) for c in cases}) == len(matrix.SCENARIOS)
    drawn = crash_list(cases)
    assert drawn.count('class="qc-evidence__item"') == len(cases)
    assert drawn.count("died here") == len(cases)
    outcomes = Counter(re.findall(r'data-outcome="([^"]+)"', drawn))
    assert set(outcomes) <= {matrix.ROLLED_BACK, matrix.COMMITTED, "violation"}
    assert sum(outcomes.values()) == len(cases)
    assert set(re.findall(r'data-how="([^"]+)"', drawn)) == {"os._exit", "SIGKILL"}


def test_a_violation_is_drawn_as_one() -> None:
    row = {"scenario": "complete", "operation": "complete", "point": "complete.after_effect", "hit": 1,
           "repeats": 1, "how": "sigkill", "exit_status": -9, "after_crash": "partial",
           "shown_after_crash": "E0001 done 1/1 without effect", "resent": "",
           "shown_final": "E0001 done 1/1 without effect", "total_cents": 0, "expected_total": 10000,
           "losses": 1, "doubles": 0, "violations": ["after the crash the file is partial"]}
    good = {**row, "point": "complete.after_begin", "after_crash": "rolled back", "total_cents": 10000,
            "violations": []}
    cases = crash_cases([good, row], TITLES)
    assert [c.ok for c in cases] == [True, False]
    assert [c.path for c in cases] == [("after_begin", "after_effect")] * 2  # the order met
    drawn = crash_list(cases)
    assert re.findall(r'data-outcome="([^"]+)"', drawn) == ["rolled back", "violation"]
    assert drawn.count("VIOLATION") == 1 and "after the crash the file is partial" in drawn
    # money short of the prediction alone is a violation too
    assert not crash_cases([{**good, "total_cents": 9999}], TITLES)[0].ok


def event(t: float, slot: int | None, doing: str, process: int) -> dict[str, Any]:
    return KillEvent(t, 1, "producer" if slot is None else "worker", slot, process, 1010, True,
                     doing, "next").to_dict()


def test_the_kills_are_in_time_order_on_their_lanes() -> None:
    sample = [event(3.5, 1, "between", 7), event(0.2, None, "after commit", 1),
              event(1.25, 0, "processing", 4), event(1.25, 2, "starting", 3)]
    found = kills(sample)
    assert [(k.t, k.process) for k in found] == [(0.2, 1), (1.25, 3), (1.25, 4), (3.5, 7)]
    assert lanes(found) == ["producer", "worker 1", "worker 2", "worker 3"]
    drawn = kill_timeline(found, 10.0, DOING)
    assert drawn.count("<g ") == len(sample) == drawn.count("<li ")
    # a kill inside a transaction is a filled mark, one outside it an empty one
    assert drawn.count("qc-tl__mark qc-tl__mark--ok") == 2
    assert drawn.count('class="qc-tl__mark"') == 2
    assert all(html.escape(DOING[k.doing]) in drawn for k in found)


def test_the_record_script_writes_what_the_page_reads() -> None:
    """scripts/crash_matrix.py --record writes evidence/crash-matrix.json; its summary fails on a violation."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("crash_matrix_script", records.COMMITTED.parent / "scripts"
                                                  / "crash_matrix.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.RECORD_NAME == "crash-matrix" and records.load_committed(script.RECORD_NAME) is not None
    rows = matrix.crash_rows(committed())
    clean = script.summary(rows)
    assert clean["cases"] == len(rows) and clean["violations"] == [] and clean["points_uncovered"] == []
    broken = [rows[0].__class__(**{**rows[0].to_dict(), "violations": ("a planted violation",)}), *rows[1:]]
    assert script.summary(broken)["violations"] == [f"{rows[0].scenario} {rows[0].label} {rows[0].how}:"
                                                    " a planted violation"]
