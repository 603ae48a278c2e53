"""The I/O-error sweep: every fault at every counted point, run, recorded and printed.

``run_table(LONG)`` makes the long record (``scripts/ioerr.py --long
--record`` commits it as ``evidence/io-errors.json``): for each fault (fsync
EIO, write EIO, write ENOSPC; once and always), each phase (enqueue, work)
and each way in (CLI, Python API), one run of ``proof.ioerr.fault_run`` per
counted point 1..``points``; then the negative controls: the careless API
wrapper at the same points, and a disk that recovers with no restart.
``table_lines(record)`` prints a record as Markdown; it imports nothing that
needs FUSE, so a page can print it on any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from proof.records import Record, load_committed

if TYPE_CHECKING:
    from proof.ioerr import Fault, Phase, Via
    from proof.powerfs_daemon import FaultKind

__all__ = ["LONG", "NAME", "QUICK", "committed_table", "run_table", "table_lines", "verdict"]

NAME: Final = "io-errors"  # evidence/io-errors.json
LONG: Final[Mapping[str, int]] = {"points": 12, "seed": 2026}
QUICK: Final[Mapping[str, int]] = {"points": 5, "seed": 1}  # 5: the controls reach a completion
FAULTS: Final[tuple[tuple[FaultKind, str], ...]] = (
    ("fsync", "EIO"), ("write", "EIO"), ("write", "ENOSPC"))


def run_table(
    params: Mapping[str, int], workdir: Path, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """One row per fault, phase and way in (counts over the points), then the controls."""
    from proof.ioerr import EVENTS_PER_BATCH, Fault, fault_run

    rows: list[dict[str, Any]] = []
    points, seed = range(1, params["points"] + 1), params["seed"]
    phases: tuple[Phase, ...] = ("enqueue", "work")
    vias: tuple[Via, ...] = ("cli", "api")
    cases: list[tuple[Fault, Phase, Via, bool]] = [
        (Fault(kind, at, error, always), phase, via, False)
        for kind, error in FAULTS for always in (False, True)
        for phase in phases for via in vias for at in points]
    cases += [(Fault("fsync", at, "EIO"), phase, "api", True) for phase in phases for at in points]
    for n, (fault, phase, via, ignore) in enumerate(cases):
        run = fault_run(workdir / f"run-{n}", fault, phase, via, ignore=ignore, seed=seed + n)
        name = f"{fault.kind} {fault.error} {'always' if fault.always else 'once'}"
        _add(rows, name + (" (wrapper ignores it)" if ignore else ""), phase, via,
             {**run.to_dict(), "batch": EVENTS_PER_BATCH})
        if progress and n % 20 == 19:
            progress(f"{n + 1} of {len(cases)} runs")
    for n, at in enumerate(points):
        run = fault_run(workdir / f"recovers-{n}", Fault("fsync", at, "EIO", True), "work", "api",
                        then="work", seed=seed + n)
        _add(rows, "fsync EIO always, then the disk recovers, no restart", "work", "api",
             {**run.to_dict(), "batch": EVENTS_PER_BATCH})
    return rows


def _add(rows: list[dict[str, Any]], fault: str, phase: str, via: str, run: dict[str, Any]) -> None:
    """Count ``run`` into the row of its fault, phase and way in."""
    key = {"fault": fault, "phase": phase, "via": via}
    row = next((r for r in rows if all(r[k] == v for k, v in key.items())), None)
    if row is None:
        row = {**key, "runs": 0, "fired": 0, "errors_said": 0, "acknowledged": 0, "lost": 0,
               "violations": []}
        rows.append(row)
    row["runs"] += 1
    row["fired"] += run["failed_operations"] > 0
    row["errors_said"] += run["exit_status"] != 0 and (
        "io_error: " in run["stderr"] or "disk_full: " in run["stderr"])
    # an acknowledged enqueue counts its batch's events
    row["acknowledged"] += len(run["acknowledged_done"]) + (
        run["batch"] if run["acknowledged_enqueue"] else 0)
    row["lost"] += len(run["lost"])
    row["violations"] += run["violations"][: max(0, 5 - len(row["violations"]))]


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    """What is wrong: a loss where none may be, or a control that lost nothing."""
    wrong = []
    for row in rows:
        name = f"{row['fault']}, {row['phase']} via {row['via']}"
        control = "ignores" in row["fault"] or "recovers" in row["fault"]
        if control and not row["lost"]:
            wrong.append(f"{name}: the negative control lost nothing")
        if not control and (row["lost"] or row["violations"]):
            wrong.append(f"{name}: {row['lost']} lost, violations {row['violations']}")
    return wrong


def table_lines(record: Record) -> list[str]:
    """The record as Markdown: where it comes from, then one row per fault, phase and way in."""
    code = ("this code" if record.for_this_code
            else "not this code: the queue or the proof machinery changed since")
    lines = [
        f"Recorded {record.recorded_at} by `{record.by}` in {record.seconds:.0f} s, on commit "
        f"`{(record.commit or 'unknown')[:12]}`, fingerprint `{record.fingerprint}` ({code}); "
        f"{record.machine}; counted points 1 to {record.params['points']}.",
        "",
        "| fault | phase | via | runs | fault came | error said | done acknowledged | lost "
        "| violations |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in record.result:
        lines.append(
            f"| {row['fault']} | {row['phase']} | {row['via']} | {row['runs']} | {row['fired']} "
            f"| {row['errors_said']} | {row['acknowledged']} | {row['lost']} "
            f"| {len(row['violations'])} |"
        )
    return lines


def committed_table() -> str:
    """The committed long record as Markdown, or a sentence saying there is none yet."""
    record = load_committed(NAME)
    if record is None:
        return ("No long I/O-error record is committed yet (`evidence/io-errors.json`): "
                "`python scripts/ioerr.py --long --record` makes it. The quick cases run "
                "in `make test` (`tests/test_io_errors.py`).")
    return "\n".join(table_lines(record))
