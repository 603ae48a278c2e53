"""The pause table: the committed record of ``scripts/pause.py --record``, as the pages print it.

It imports nothing that needs a server, so a page prints it on any machine,
saying which commit and fingerprint the record was made for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proof.records import Record, load_committed

__all__ = ["NAME", "committed_table", "page_table", "row", "stall_line"]

NAME: Final = "pause"  # evidence/pause.json
SHAPES: Final = {
    "two_step": "two steps, paused in its slow step",
    "plain": "plain, paused before its effect",
    "plain_after": "plain, paused after its effect",
    "plain_after, guard 1000 ms": "plain, after its effect, the guard at 1 s",
    "plain_first, guard 1000 ms": "plain, its only statement sent with BEGIN, the guard at 1 s",
    "plain, stopped inside COMMIT": "plain, its server backend stopped inside COMMIT",
    "plain_after, held 30 s": "plain, after its effect, stopped 30 s",
}
HELD: Final = 30  # seconds: the long pause whose stall the limits page states
ENGINES: Final = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _worker(ended: Mapping[str, Any]) -> str:
    """What a worker run came to: its error code, or what it completed."""
    summary = ended.get("summary")
    if summary is None:
        said = str(ended.get("stderr", ""))
        return "`" + said.split(": ")[1] + "`" if said.count(": ") else f"exit {ended.get('status')}"
    if summary["lease_lost"]:
        return "`lease_lost`"
    return f"{summary['done']} done"


def row(run: Mapping[str, Any]) -> str:
    """One run as a table row: engine, handler, pause, the others, A's end, effects per message."""
    others = [f"B (E0002): {_worker(run['during'])}"]
    if run.get("retaken"):
        retaken = run["retaken"]["summary"]
        others.append("B2: E0001 taken over" if retaken and retaken["done"]
                      else "B2: E0001 locked, " + _worker(run["retaken"]))
    if run.get("waiter"):
        others.append(f"W waited {run['waiter']['seconds']:.1f} s")
    effects = sorted(set(run["effects"].values()))
    return (f"| {ENGINES[run['engine']]} | {SHAPES.get(run['shape'], run['shape'])} "
            f"| {run['pause_seconds']:.1f} s | {'; '.join(others)} | {_worker(run['paused'])} "
            f"| {', '.join(map(str, effects))} |")


def page_table(record: Record, shapes: Sequence[str] | None = None) -> str:
    """The record as Markdown (the runs of ``shapes``, or all), with where it comes from."""
    code = ("this code" if record.for_this_code
            else "**not this code**: the queue or the proof machinery changed since")
    lines = [
        f"Recorded {record.recorded_at} by `{record.by}` at commit "
        f"`{(record.commit or 'unknown')[:12]}`, fingerprint `{record.fingerprint}` ({code}); "
        f"{record.machine}.",
        "",
        "| engine | worker A's handler | A stopped | the others, meanwhile | A continued | effects |",
        "| --- | --- | ---: | --- | --- | ---: |",
    ]
    lines += [row(run) for run in record.result["runs"] if shapes is None or run["shape"] in shapes]
    if record.result["wrong"]:
        lines += ["", "**This run found something wrong:** " + "; ".join(record.result["wrong"])]
    return "\n".join(lines) + "\n"


def committed_table(shapes: Sequence[str] | None = None) -> str:
    """``evidence/pause.json`` as ``page_table`` prints it, or a sentence saying it is missing."""
    record = load_committed(NAME)
    if record is None:
        return ("No pause record is committed yet: run `.venv/bin/python scripts/pause.py "
                "--record` and commit `evidence/pause.json`.\n")
    return page_table(record, shapes)


def stall_line(record: Record | None = None) -> str:
    """The stall a pause inside a transaction caused, per engine, from the record (committed if not given)."""
    record = record or load_committed(NAME)
    if record is None:
        return "No pause record is committed yet: nothing measured here.\n"
    runs = {(run["engine"], run["shape"]): run for run in record.result["runs"]}
    sqlite, postgres = (runs[(engine, f"plain_after, held {HELD:g} s")]
                        for engine in ("sqlite", "postgresql"))
    return (f"Measured on this machine ({record.recorded_at}, `evidence/pause.json`): on "
            f"SQLite a writer started as the worker stopped ended {sqlite['waiter']['seconds']:.1f} s "
            f"later, after a {sqlite['pause_seconds']:.1f} s pause; on PostgreSQL, during a "
            f"{postgres['pause_seconds']:.1f} s pause, another worker finished another message "
            f"in {postgres['during']['seconds']:.1f} s, and could not take the stopped one's.\n")
