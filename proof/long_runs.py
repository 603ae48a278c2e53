"""The committed records of the long random-kill runs, and what the page "How we know" prints of them.

``scripts/chaos.py --long --record`` (``--postgres`` for PostgreSQL) writes
``evidence/chaos-long-<engine>.json``; the page prints one row per engine with
the run's figures, the commit and fingerprint it was made for, and whether
that is this code. A missing record is said to be missing, a record of other
code or other parameters is said to be stale: its figures are evidence about
that code, not this one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proof import records
from proof.chaos import LONG, ChaosResult

__all__ = [
    "ENGINES",
    "MIN_KILLS",
    "LongRun",
    "long_runs",
    "record_name",
    "table",
]

ENGINES: Final = ("sqlite", "postgresql")
# A long run that killed fewer processes than this is too shallow to be the deeper evidence.
MIN_KILLS: Final = 1_000

Loader = Callable[[str], records.Record | None]


def record_name(engine: str) -> str:
    """The name of the committed record of the long run on ``engine``."""
    if engine not in ENGINES:
        raise ValueError(f"engine is one of {ENGINES}, got {engine!r}")
    return f"chaos-long-{engine}"


@dataclass(frozen=True)
class LongRun:
    """One engine's committed long run, or its absence."""

    engine: str
    record: records.Record | None

    @property
    def result(self) -> ChaosResult | None:
        return None if self.record is None else ChaosResult.from_dict(self.record.result)

    @property
    def fresh(self) -> bool:
        """Made for this code, with the long run's parameters of this code."""
        return (
            self.record is not None
            and self.record.for_this_code
            and dict(self.record.params) == dict(LONG)
        )

    def problems(self) -> list[str]:
        """Why this record does not show what the long run must show (empty: it does)."""
        if self.record is None:
            return [f"no committed record {record_name(self.engine)}"]
        found = []
        c = self.result
        assert c is not None
        if c.engine != self.engine:
            found.append(f"the record of {self.engine} is a run on {c.engine}")
        if c.kills < MIN_KILLS:
            found.append(f"{c.kills} SIGKILLs, fewer than {MIN_KILLS:,}")
        if c.losses or c.doubles or c.violations:
            found.append(
                f"{c.losses} losses, {c.doubles} doubles, {len(c.violations)} violations"
            )
        return found

    def status(self) -> str:
        """For the page: whether the record is for this code, and if not, why not."""
        if self.record is None:
            return "no record"
        if not self.record.for_this_code:
            return f"**stale**: made for other code (`{self.record.fingerprint}`)"
        if not self.fresh:
            return f"**stale**: made with other parameters ({dict(self.record.params)})"
        return "this code"


def long_runs(load: Loader = records.load_committed) -> list[LongRun]:
    """Each engine's committed long run (``load`` reads a record by name)."""
    return [LongRun(engine, load(record_name(engine))) for engine in ENGINES]


def _cells(run: LongRun) -> Sequence[Any]:
    r, c = run.record, run.result
    if r is None or c is None:
        return (run.engine, *("-",) * 6, run.status())
    commit = r.commit.removesuffix("-dirty")[:10] or "?"
    if r.commit.endswith("-dirty"):
        commit += " (and uncommitted changes)"
    return (
        run.engine,
        f"{c.rounds}; {c.events:,}",
        f"**{c.kills:,}** ({c.worker_kills:,}; {c.producer_kills})",
        f"**{c.losses} / {c.doubles} / {len(c.violations)}**",
        f"{r.seconds:,.0f}",
        f"{r.recorded_at}; `{commit}`",
        f"`{r.fingerprint}`",
        run.status(),
    )


def table(runs: Sequence[LongRun]) -> str:
    """The page's table of the long runs (Markdown), then a sentence for each problem found."""
    lines = [
        "`LONG` = " + ", ".join(f"{k} {v:,}" for k, v in LONG.items()) + ".",
        "",
        "| engine | rounds; events | SIGKILLs delivered (workers; producers) "
        "| losses / doubles / violations | seconds | made; commit | fingerprint "
        "| for this code |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in _cells(run)) + " |" for run in runs]
    notes = [f"{run.engine}: {problem}." for run in runs for problem in run.problems()]
    if notes:
        lines += ["", "Not shown by these records: " + " ".join(notes)]
    return "\n".join(lines) + "\n"
