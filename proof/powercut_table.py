"""The power-cut table: every subject under drop and torn cuts, run, recorded and printed.

``run_table(LONG)`` makes the long record (``scripts/powercut.py --long
--record`` commits it as ``evidence/power-cuts.json``): raw SQLite at FULL,
NORMAL and OFF (what SQLite itself promises), the queue at FULL (nothing may
be lost, doubled or corrupted) and the queue forced to NORMAL (its own
negative control). ``table_lines(record)`` prints a record as a Markdown
table with the commit and fingerprint it was made for; it imports nothing
that needs FUSE, so a page can print it on any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from proof.records import Record, load_committed

__all__ = ["LONG", "NAME", "QUICK", "committed_table", "page_table", "run_table", "table_lines"]

NAME: Final = "power-cuts"  # evidence/power-cuts.json

# cuts per subject and mode
LONG: Final[Mapping[str, int]] = {"raw_cuts": 25, "queue_cuts": 100, "normal_cuts": 15, "seed": 2026}
QUICK: Final[Mapping[str, int]] = {"raw_cuts": 3, "queue_cuts": 3, "normal_cuts": 2, "seed": 1}


def run_table(
    params: Mapping[str, int], workdir: Path, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Every row of the table (``CutRun.to_dict()``), in order."""
    from proof.powercut import queue_cuts, raw_sqlite

    rows: list[dict[str, Any]] = []
    seed = params["seed"]
    for mode in ("drop", "torn"):
        for synchronous in ("FULL", "NORMAL", "OFF"):
            run = raw_sqlite(workdir / f"raw-{synchronous}-{mode}", synchronous=synchronous,
                             mode=mode, cuts=params["raw_cuts"], seed=seed)
            rows.append(run.to_dict())
            if progress:
                progress(f"sqlite {synchronous} {mode}: lost {run.lost} in {run.cuts} cuts")
        for normal, cuts in ((False, params["queue_cuts"]), (True, params["normal_cuts"])):
            run = queue_cuts(workdir / f"queue-{normal}-{mode}", mode=mode, cuts=cuts, seed=seed,
                             normal=normal, progress=progress)
            rows.append(run.to_dict())
    return rows


def table_lines(record: Record) -> list[str]:
    """The record as Markdown: where it comes from, then one row per subject and mode."""
    code = ("this code" if record.for_this_code
            else "not this code: the queue or the proof machinery changed since")
    lines = [
        f"Recorded {record.recorded_at} by `{record.by}` in {record.seconds:.0f} s, on commit "
        f"`{(record.commit or 'unknown')[:12]}`, fingerprint `{record.fingerprint}` ({code}); "
        f"{record.machine}.",
        "",
        "| subject | cut | cuts | acknowledged | lost | lost per cut | doubled | corrupt files |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in record.result:
        lines.append(
            f"| {row['subject']} | {row['mode']} | {row['cuts']} | {row['acknowledged']:,} "
            f"| {row['lost']:,} | {row['lost_per_cut']:,.1f} | {row['doubles']} "
            f"| {row['corruptions']} |"
        )
    return lines


def page_table(record: Record | None) -> str:
    """What a page prints for ``record``: its table, or, without one, that none exists yet."""
    if record is None:
        return ("No long power-cut record is committed yet (`evidence/power-cuts.json`): "
                "nothing is claimed here until `python scripts/powercut.py --long --record` "
                "has been run and its record committed. The quick cuts of the test suite run "
                "in `make test` (`tests/test_power_cuts.py`).")
    return "\n".join(table_lines(record))


def committed_table() -> str:
    """The committed long record, as ``page_table`` prints it."""
    return page_table(load_committed(NAME))
