"""The committed records of the long random-kill runs, and what the page "How we know" prints of them.

The long runs themselves take minutes and are made by hand
(``scripts/chaos.py --long --record``, ``--postgres`` for PostgreSQL); their
records are committed in ``evidence/``. Here: a committed record, when there
is one, shows what the long run exists to show (at least ``MIN_KILLS``
SIGKILLs delivered, nothing lost, nothing doubled, no violation); the page's
table tells a record of this code from a stale one and from a missing one;
and the script refuses what it cannot do.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proof import long_runs, records
from proof.chaos import LONG, ChaosResult

ROOT = Path(__file__).resolve().parent.parent


def _result(engine: str = "sqlite", **changes: Any) -> ChaosResult:
    """A long run's result as a record holds it: 1,203 SIGKILLs, nothing lost (change what a test needs)."""
    worker_kills, producer_kills = 1_140, 63
    result = ChaosResult(
        seed=7, engine=engine, rounds=LONG["rounds"], workers_at_once=LONG["workers"], lease_seconds=2,
        clock_stagger_seconds=2, round_step_seconds=10, events=118_800, valid_events=112_900, toys=5_900,
        lines_sent=120_000, producer_kills=producer_kills, producer_resends=producer_kills,
        producer_kills_after_its_commit=20, worker_processes=1_740, worker_kills=worker_kills,
        worker_kills_with_the_file_open=worker_kills, kills=worker_kills + producer_kills,
        clean_worker_exits=600, worker_errors=0, tracebacks=0, lease_lost_reported=3,
        completed_by_a_later_generation=900, lease_expired_redriven=1, done=112_900, dead=5_900,
        total_cents=5_000_000, expected_cents=5_000_000, losses=0, doubles=0, violations=(), seconds=400.0,
        queue="chaos",
    )
    return dataclasses.replace(result, **changes)


def _record(result: ChaosResult, *, fingerprint: str | None = None,
            params: dict[str, int] | None = None) -> records.Record:
    return records.Record(
        name=long_runs.record_name(result.engine), fingerprint=fingerprint or records.fingerprint(),
        params=dict(LONG) if params is None else params, by="scripts/chaos.py --long --record",
        recorded_at="2026-12-04 16:20 UTC", seconds=result.seconds, python="3.11.7", sqlite="3.45.1",
        system="Linux x86_64, 2 CPUs", result=result.to_dict(), commit="0123456789abcdef0123",
    )


def _rows(text: str) -> dict[str, str]:
    """The table's row of each engine."""
    return {line.split(" | ")[0].removeprefix("| "): line for line in text.splitlines()
            if line.startswith(("| sqlite ", "| postgresql "))}


@pytest.mark.parametrize("engine", long_runs.ENGINES)
def test_committed_long_runs_kill_1000_and_lose_nothing(engine: str) -> None:
    record = records.load_committed(long_runs.record_name(engine))
    if record is None:
        pytest.skip(f"no committed record of the long run on {engine} (the page says so)")
    run = long_runs.LongRun(engine, record)
    c = run.result
    assert c is not None
    assert run.problems() == []
    assert c.engine == engine
    assert c.kills >= long_runs.MIN_KILLS and c.kills == c.worker_kills + c.producer_kills
    # a worker kill is counted from the victim's exit status: it can be no more than the processes started
    assert c.worker_kills_with_the_file_open <= c.worker_kills < c.worker_processes
    assert (c.losses, c.doubles, c.violations) == (0, 0, ())
    assert (c.done, c.dead, c.total_cents) == (c.valid_events, c.toys, c.expected_cents)
    assert c.worker_errors == 0 and c.tracebacks == 0


def test_the_page_tells_fresh_stale_and_missing_records_apart() -> None:
    fresh = long_runs.LongRun("sqlite", _record(_result()))
    stale = long_runs.LongRun("postgresql", _record(_result("postgresql"), fingerprint="00000000deadbeef"))
    rows = _rows(long_runs.table([fresh, stale]))
    assert rows["sqlite"].endswith("| this code |") and "**1,203** (1,140; 63)" in rows["sqlite"]
    assert "`0123456789` |" in rows["sqlite"] and f"`{records.fingerprint()}`" in rows["sqlite"]
    assert "**stale**: made for other code (`00000000deadbeef`)" in rows["postgresql"]
    assert "this code" not in rows["postgresql"]
    assert (fresh.fresh, stale.fresh) == (True, False)
    # the same code, but the parameters of another LONG: stale too
    other = long_runs.LongRun("sqlite", _record(_result(), params={**LONG, "rounds": 45}))
    assert "**stale**: made with other parameters" in _rows(long_runs.table([other]))["sqlite"]
    missing = long_runs.table([long_runs.LongRun("sqlite", None)])
    assert _rows(missing)["sqlite"].endswith("| no record |")
    assert "no committed record chaos-long-sqlite" in missing
    # a record made on a tree with uncommitted changes says so
    assert fresh.record is not None
    dirty = dataclasses.replace(fresh.record, commit="0123456789abcdef0123-dirty")
    assert "(and uncommitted changes)" in long_runs.table([long_runs.LongRun("sqlite", dirty)])


@pytest.mark.parametrize("change, problem", [
    ({"worker_kills": 930, "kills": 993}, "993 SIGKILLs, fewer than 1,000"),
    ({"losses": 1}, "1 losses, 0 doubles, 0 violations"),
    ({"doubles": 2}, "0 losses, 2 doubles, 0 violations"),
    ({"violations": ("C000007 is done with 2 effects",)}, "0 losses, 0 doubles, 1 violations"),
    ({"engine": "postgresql"}, "the record of sqlite is a run on postgresql"),
])
def test_a_record_that_falls_short_is_named_on_the_page(change: dict[str, Any], problem: str) -> None:
    # The negative control of the first test: each shortfall is found, and printed under the table.
    run = long_runs.LongRun("sqlite", _record(_result(**change)))
    assert run.problems() == [problem]
    assert f"sqlite: {problem}." in long_runs.table([run])


def test_the_script_and_the_page_agree_on_record_names() -> None:
    assert [long_runs.record_name(e) for e in long_runs.ENGINES] == ["chaos-long-sqlite", "chaos-long-postgresql"]
    with pytest.raises(ValueError, match="engine is one of"):
        long_runs.record_name("mysql")
    loaded = long_runs.long_runs({"chaos-long-sqlite": _record(_result())}.get)
    assert [(run.engine, run.record is not None) for run in loaded] == [("sqlite", True), ("postgresql", False)]


@pytest.mark.parametrize("args, words", [
    (["--record"], "--record writes the record of the long run: add --long"),
    (["--long", "--record", "--contention"], "--record records the random-kill run"),
    (["--postgres", "--db", "postgresql://u@/d"], "--db and --postgres exclude each other"),
    (["--postgres", "--contention"], "--contention runs on SQLite only"),
])
def test_the_script_refuses_what_it_cannot_do(args: list[str], words: str) -> None:
    out = subprocess.run([sys.executable, "scripts/chaos.py", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and words in out.stderr, out.stderr
