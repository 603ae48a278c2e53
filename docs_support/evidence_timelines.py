"""The crash matrix and the random kills as timelines: the data, and the HTML the page prints.

``docs/evidence-timelines.md`` prints, from the records committed in
``evidence/`` (whatever code they were made for, which the page says):

* every case of the crash matrix as a path: the points its operation passes
  in order, the one where the child died, what the next worker found, and
  what a fresh worker left (the money, which must count once);
* the sample of kills that a random-kill run keeps (``proof/kill_sample.py``)
  as marks on a time line, one lane per worker place and one for the
  producer, and as a list.

Each item carries its filter values as ``data-`` attributes;
``assets/javascripts/evidence-timelines.js`` builds the filters from them
(``tests/test_evidence_page.py``), and ``tests/test_evidence_timelines.py``
checks the data drawn here.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CrashCase",
    "Kill",
    "crash_cases",
    "crash_list",
    "kill_timeline",
    "kills",
    "record_line",
]

HOWS: Final = {"exit": "os._exit", "sigkill": "SIGKILL"}


@dataclass(frozen=True)
class CrashCase:
    """One case of the crash matrix, as the page draws it."""

    scenario: str
    title: str
    operation: str
    path: tuple[
        str, ...
    ]  # the points the operation reaches, in order ("#2": a second hit)
    died: int  # the index in ``path`` of the point where the child died
    how: str
    exit_status: int
    outcome: str  # "rolled back", "committed", or "partial" (a violation)
    found: str  # what the next worker found
    resent: str  # what the caller then did ("" if nothing)
    final: str  # after a fresh worker
    money: int
    expected: int
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations and self.money == self.expected


def _label(row: Mapping[str, Any]) -> str:
    """A point as its case's path names it: without its operation's name, with its hit if repeated.

    A batch reaches the points of its messages' operation (``claim.after_update``
    inside ``claim_many``): those keep their operation's name.
    """
    operation, _, name = str(row["point"]).partition(".")
    point = name if operation == row["operation"] else str(row["point"])
    return point if row["repeats"] == 1 else f"{point} #{row['hit']}"


def crash_cases(
    rows: Sequence[Mapping[str, Any]], titles: Mapping[str, str]
) -> list[CrashCase]:
    """The record's rows as cases, each with its operation's path (the order the rows reached it)."""
    paths: dict[str, list[str]] = {}
    for row in rows:
        path = paths.setdefault(str(row["scenario"]), [])
        if _label(row) not in path:
            path.append(_label(row))
    return [
        CrashCase(
            scenario=str(row["scenario"]),
            title=titles.get(str(row["scenario"]), str(row["scenario"])),
            operation=str(row["operation"]),
            path=tuple(paths[str(row["scenario"])]),
            died=paths[str(row["scenario"])].index(_label(row)),
            how=HOWS.get(str(row["how"]), str(row["how"])),
            exit_status=int(row["exit_status"]),
            outcome=str(row["after_crash"]),
            found=str(row["shown_after_crash"]),
            resent=str(row["resent"]),
            final=str(row["shown_final"]),
            money=int(row["total_cents"]),
            expected=int(row["expected_total"]),
            violations=tuple(row["violations"]),
        )
        for row in rows
    ]


def _attrs(values: Mapping[str, str]) -> str:
    return " ".join(f'data-{k}="{html.escape(v)}"' for k, v in values.items())


def crash_list(cases: Sequence[CrashCase]) -> str:
    """The cases as an HTML list: each a path of points, the death marked, then what followed."""
    items = []
    for case in cases:
        steps = []
        for index, point in enumerate(case.path):
            kind = (
                "passed"
                if index < case.died
                else "died" if index == case.died else "never"
            )
            said = {"passed": "passed", "died": "died here", "never": "not reached"}[
                kind
            ]
            steps.append(
                f'<li class="qc-evidence__point qc-evidence__point--{kind}">'
                f'<span class="qc-evidence__name">{html.escape(point)}</span>'
                f'<span class="qc-evidence__said">{said}</span></li>'
            )
        verdict = "ok" if case.ok else "VIOLATION"
        filters = {
            "operation": case.operation,
            "outcome": case.outcome if case.ok else "violation",
            "how": case.how,
        }
        then = f"; the caller then: {html.escape(case.resent)}" if case.resent else ""
        violations = "".join(f"<li>{html.escape(v)}</li>" for v in case.violations)
        items.append(
            f'<li class="qc-evidence__item" {_attrs(filters)}>'
            f'<p class="qc-evidence__head"><strong>{html.escape(case.title)}</strong>: '
            f"killed by {case.how} at <code>{html.escape(case.path[case.died])}</code> "
            f"(exit status {case.exit_status}): {html.escape(case.outcome)}, {verdict}</p>"
            f'<ol class="qc-evidence__path" aria-label="the points of {html.escape(case.operation)}'
            f' in order">{"".join(steps)}</ol>'
            f'<p class="qc-evidence__then">The next worker found: {html.escape(case.found)}'
            f"{then}. After a fresh worker: {html.escape(case.final)}; "
            f"money {case.money} of {case.expected}.</p>"
            + (
                f'<ul class="qc-evidence__violations">{violations}</ul>'
                if violations
                else ""
            )
            + "</li>"
        )
    return '<ol class="qc-evidence__items">' + "".join(items) + "</ol>"


@dataclass(frozen=True)
class Kill:
    """One kill of a random-kill run's sample, as the page draws it."""

    t: float
    round: int
    who: str
    lane: str  # "producer", or "worker N" (its place in the round's crowd)
    process: int
    now: int
    doing: str
    next: str


def kills(sample: Sequence[Mapping[str, Any]]) -> list[Kill]:
    """The sample's events in the order they happened, each on its lane."""
    found = [
        Kill(
            t=float(e["t"]),
            round=int(e["round"]),
            who=str(e["who"]),
            lane="producer" if e["slot"] is None else f"worker {int(e['slot']) + 1}",
            process=int(e["process"]),
            now=int(e["now"]),
            doing=str(e["doing"]),
            next=str(e["next"]),
        )
        for e in sample
    ]
    return sorted(found, key=lambda k: (k.t, k.process))


def lanes(found: Sequence[Kill]) -> list[str]:
    """The timeline's lanes, top to bottom: the producer, then each worker place."""
    workers = sorted(
        {k.lane for k in found if k.who == "worker"}, key=lambda n: int(n.split()[1])
    )
    return ["producer", *workers]


def kill_timeline(
    found: Sequence[Kill], seconds: float, doing: Mapping[str, str]
) -> str:
    """An SVG of the kills on a time line (one lane each), then the kills as a list."""
    rows = lanes(found)
    left, width, lane_height, top = 80, 720, 26, 28
    height = top + lane_height * len(rows) + 8
    span = max(seconds, max((k.t for k in found), default=0.0), 1.0)

    def x(t: float) -> float:
        return left + (width - left - 10) * t / span

    marks, ticks = [], []
    for index, name in enumerate(rows):
        y = top + lane_height * index + lane_height // 2
        ticks.append(
            f'<text x="4" y="{y + 4}" class="qc-tl__lane">{html.escape(name)}</text>'
            f'<line x1="{left}" x2="{width - 10}" y1="{y}" y2="{y}" class="qc-tl__track"/>'
        )
    for step in range(0, 11):
        t = span * step / 10
        ticks.append(
            f'<text x="{x(t):.1f}" y="14" text-anchor="middle" class="qc-tl__small">{t:.0f} s</text>'
        )
    for k in found:
        y = top + lane_height * rows.index(k.lane) + lane_height // 2
        shape = (
            f'<circle cx="{x(k.t):.1f}" cy="{y}" r="5" class="qc-tl__mark qc-tl__mark--ok"/>'
            if k.doing in ("processing", "in a transaction", "after commit")
            else f'<circle cx="{x(k.t):.1f}" cy="{y}" r="5" class="qc-tl__mark"/>'
        )
        marks.append(
            f'<g class="qc-evidence__item" {_attrs({"who": k.who, "doing": k.doing})}>'
            f"<title>{k.t} s, round {k.round}: {html.escape(k.lane)} killed, "
            f"{html.escape(doing.get(k.doing, k.doing))}</title>{shape}</g>"
        )
    picture = (
        f'<svg class="qc-evidence__svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{len(found)} kills on a time line'
        f" of {span:.0f} seconds, one lane per worker place and one for the producer;"
        ' the list below says the same">' + "".join(ticks) + "".join(marks) + "</svg>"
    )
    items = "".join(
        f'<li class="qc-evidence__item" {_attrs({"who": k.who, "doing": k.doing})}>'
        f"<strong>{k.t} s</strong>, round {k.round}, model second {k.now}: "
        f"{html.escape(k.lane)} (process {k.process}) killed, "
        f"{html.escape(doing.get(k.doing, k.doing))}. Then: {html.escape(k.next)}.</li>"
        for k in found
    )
    return (
        f'<div class="qc-evidence__scroll" role="region" tabindex="0" aria-label="The kills on '
        f'a time line (it may scroll sideways)">{picture}</div>'
        f'<ol class="qc-evidence__items qc-evidence__kills">{items}</ol>'
    )


def record_line(record: Any, command: str, fresh: bool) -> str:
    """When and for which code a record was made, as the pages about evidence say it."""
    if record is None:
        return f"No record is committed yet: `{command}` makes it."
    commit = record.commit.removesuffix("-dirty")[:10] or "?"
    if record.commit.endswith("-dirty"):
        commit += " (and uncommitted changes)"
    status = (
        "made for this code"
        if fresh
        else f"**stale**: made for other code (`{record.fingerprint}`); its cases are"
        " evidence about that code, until someone runs it again"
    )
    return (
        f"Record made by `{record.by}` on {record.recorded_at}, commit `{commit}`, "
        f"in {record.seconds} s on {record.machine}: {status}."
    )
