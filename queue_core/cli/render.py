"""What the command line prints: the tables and the JSON forms of each command's
output (``Invocation.show`` writes the one asked for with ``--format``), the
general table of a result that is a JSON object (``fields``), and the worker's
progress line.

Plain text of fixed width (the pages show it), built from the values the
library returns; nothing here touches a database, and nothing here imports the
store or the reference application but to show their results.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TextIO

if TYPE_CHECKING:
    from ..queues import QueueSettings
    from ..values import Message, Metrics, StateCounts
    from ..worker import WorkSummary

PROG = "queue-core"


def fields(value: Any) -> str:
    """A result that is a JSON object, as a table: one line per field, name then value."""
    items = value.items() if isinstance(value, Mapping) else value.to_dict().items()
    width = max((len(str(name)) for name, _ in items), default=0)

    def shown(item: Any) -> str:
        if isinstance(item, list):
            return ", ".join(map(shown, item)) or "none"
        if isinstance(item, Mapping):
            return ", ".join(f"{k}={shown(v)}" for k, v in item.items()) or "none"
        if item is None:
            return "none"
        return str(item).lower() if isinstance(item, bool) else str(item)

    return "".join(f"{name:<{width}}  {shown(item)}\n" for name, item in items)


class Money(Protocol):
    """The reference application's money, as ``status`` shows it (``ledger.Totals``)."""

    @property
    def count(self) -> int: ...
    @property
    def total_cents(self) -> int: ...
    @property
    def by_category(self) -> Mapping[str, int]: ...
    def to_dict(self) -> dict[str, Any]: ...


class Status(NamedTuple):
    """What ``status`` read in one snapshot: the counts, the metrics, the money if any."""

    counts: StateCounts
    metrics: Metrics
    totals: Money | None


def status_json(status: Status) -> dict[str, object]:
    """``status --format json``: the counts, the money where it is, the other metrics."""
    data: dict[str, object] = {"messages": status.counts.to_dict()["messages"]}
    if status.totals is not None:
        data["effects"] = status.totals.to_dict()
    data["metrics"] = {
        k: v for k, v in status.metrics.to_dict().items() if k != "messages"
    }
    return data


def status_text(status: Status) -> str:
    return status_table(status.counts, status.metrics, status.totals)


class Progress:
    """The worker's progress on stderr.

    A line rewritten in place on a terminal, or JSON lines for scripts.
    """

    def __init__(self, stream: TextIO, *, as_json: bool, every: float) -> None:
        self._stream, self._as_json, self._every = stream, as_json, every
        self._started = time.monotonic()
        # a terminal sees the line at once
        self._shown = float("-inf") if not as_json else self._started
        self._drawn = False

    @classmethod
    def for_run(cls, *, quiet: bool, as_json: bool) -> Progress | None:
        if quiet:
            return None
        if as_json:
            return cls(sys.stderr, as_json=True, every=1.0)
        # a person is watching; piped or redirected output stays clean
        if sys.stderr.isatty():
            return cls(sys.stderr, as_json=False, every=0.25)
        return None

    def __call__(self, summary: WorkSummary) -> None:
        now = time.monotonic()
        if now - self._shown >= self._every:
            self._shown = now
            self._show(summary)

    def finish(self, summary: WorkSummary) -> None:
        if self._as_json:
            return  # the summary on stdout is the last word
        if self._drawn:
            self._show(summary)
            self._stream.write("\n")
            self._stream.flush()

    def _show(self, summary: WorkSummary) -> None:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = summary.claimed / elapsed
        if self._as_json:
            import json

            self._stream.write(
                json.dumps(
                    {
                        "progress": summary.to_dict(),
                        "seconds": round(elapsed, 1),
                        "per_second": round(rate, 1),
                    }
                )
                + "\n"
            )
        else:
            self._stream.write(
                f"\r{PROG} work: {summary.claimed:,} claimed, {summary.done:,} done, "
                f"{summary.retried:,} retried, {summary.dead:,} dead, "
                f"{summary.lease_lost:,} lease lost ({rate:,.0f}/s)\x1b[K"
            )
            self._drawn = True
        self._stream.flush()


def wrap(text: str, *, indent: int, width: int = 88) -> str:
    """``text`` in lines of at most ``width``, broken only after a ``;`` or ``:``."""
    lines = [""]
    for part in re.split(r"(?<=[;:]) ", text):
        if lines[-1].strip() and len(lines[-1]) + 1 + len(part) > width:
            lines.append(" " * indent)
        lines[-1] += (" " if lines[-1].strip() else "") + part
    return "\n".join(lines)


def status_table(counts: StateCounts, metrics: Metrics, totals: Money | None) -> str:
    """``queue-core status``: the counts and metrics, then the ledger's money if any.

    ``totals`` is ``None`` where the reference application is not installed:
    the queue's figures alone, with no money lines.
    """
    lines = ["state    messages"]
    # Store.status's own counts: every state, zero where none
    lines += [f"{state:<8} {count:>8}" for state, count in counts.messages.items()]
    lines.append("")
    age = metrics.oldest_ready_age
    lines.append(f"oldest ready: {'none' if age is None else f'{age} s'}")
    latency = metrics.enqueue_to_done
    lines.append(
        f"enqueue to done: p50 {latency.p50} s, p95 {latency.p95} s, "
        f"max {latency.max} s over {latency.count} "
        f"message{'s' if latency.count != 1 else ''}"
        if latency.count
        else "enqueue to done: no timed message yet"
    )
    dead = ", ".join(
        f"{count} after {attempts} attempt{'s' if attempts != 1 else ''}"
        for attempts, count in metrics.dead_attempts.items()
    )
    lines.append(f"dead: {dead or 'none'}")
    lines.append(
        f"expired leases taken over: {metrics.expired_leases}, "
        f"pruned payloads: {metrics.pruned}"
    )
    if totals is not None:
        lines.append("")
        lines.append(f"effects: {totals.count}, total_cents: {totals.total_cents}")
        if totals.by_category:
            lines.append("category  total_cents")
            lines += [
                f"{name:<9} {cents:>11}" for name, cents in totals.by_category.items()
            ]
    return "\n".join(lines) + "\n"


def dead_table(letters: list[Message]) -> str:
    """``queue-core dead``: a row per dead letter, columns as wide as their data."""
    if not letters:
        return "no dead letters\n"
    # the id and last_error as wide as the longest shown, so that a row fits
    width = max(len("last_error"), *(len(m.last_error or "") for m in letters))
    id_width = max(len("event_id"), *(len(m.event_id) for m in letters))
    lines = [
        f"{'event_id':<{id_width}}  attempts  generation  {'last_error':<{width}}  "
        "payload (as stored)"
    ]
    for m in letters:
        lines.append(
            f"{m.event_id:<{id_width}} {m.attempts:>9}  {m.generation:>10}  "
            f"{m.last_error or '':<{width}}  {m.payload}"
        )
        if m.last_detail:
            lines.append(f"{'':<{id_width}}  why: {m.last_detail}")
    return "\n".join(lines) + "\n"


def messages_table(messages: list[Message]) -> str:
    """``queue-core list``: one row per message, the times in the queue's seconds."""
    if not messages:
        return "no messages\n"
    width = max(len("last_error"), *(len(m.last_error or "") for m in messages))
    id_width = max(len("event_id"), *(len(m.event_id) for m in messages))
    lines = [
        f"{'event_id':<{id_width}}  state   attempts  generation  available_at  "
        "lease_until  last_error"
    ]
    for m in messages:
        lease = "" if m.lease_until is None else str(m.lease_until)
        lines.append(
            f"{m.event_id:<{id_width}}  {m.state:<6} {m.attempts:>9}  {m.generation:>10}  "
            f"{m.available_at:>12}  {lease:>11}  {m.last_error or '':<{width}}".rstrip()
        )
    return "\n".join(lines) + "\n"


def queues_table(queues: list[tuple[QueueSettings, StateCounts]]) -> str:
    """``queue-core queues``: one row per queue, its settings and counts by state."""
    from ..values import STATES

    name_width = max(len("queue"), *(len(q.name) for q, _ in queues))
    rule_width = max(len("id rule"), *(len(q.id_pattern) for q, _ in queues))
    lines = [
        f"{'queue':<{name_width}}  {'id rule':<{rule_width}}  attempts  lease s  "
        "max bytes  " + "  ".join(f"{state:>6}" for state in STATES)
    ]
    for q, counts in queues:
        lines.append(
            f"{q.name:<{name_width}}  {q.id_pattern:<{rule_width}}  "
            f"{q.max_attempts:>8}  {q.lease_seconds:>7}  {q.max_payload_bytes:>9}  "
            + "  ".join(f"{counts.count(state):>6}" for state in STATES)
        )
    # the retry policies below: a second table keeps each line within 80 columns
    lines += ["", f"{'queue':<{name_width}}  retry after a temporary failure"]
    for q, _ in queues:
        lines.append(f"{q.name:<{name_width}}  {retry_policy(q)}")
    return "\n".join(lines) + "\n"


def retry_policy(q: QueueSettings) -> str:
    """A queue's retry policy in words: ``1 s doubling, at most 3600 s, jitter 0.2``."""
    jitter = f"jitter {q.backoff_jitter:g}" if q.backoff_jitter else "no jitter"
    return (
        f"{q.backoff_base_seconds} s doubling, at most {q.backoff_max_seconds} s, "
        f"{jitter}"
    )


def dead_json(letters: list[Message]) -> list[dict[str, Any]]:
    """``dead --format json``: each dead letter with its reason and its payload."""
    return [
        {
            "event_id": m.event_id,
            "attempts": m.attempts,
            "generation": m.generation,
            "last_error": m.last_error,
            "detail": m.last_detail,
            "payload": m.payload_object,
        }
        for m in letters
    ]


def messages_json(messages: list[Message]) -> list[dict[str, Any]]:
    return [message_json(m) for m in messages]


def queues_json(
    queues: list[tuple[QueueSettings, StateCounts]],
) -> list[dict[str, Any]]:
    """``queues --format json``: each queue's settings and its counts by state."""
    return [{**q.to_dict(), **counts.to_dict()} for q, counts in queues]


def exposition(by_queue: Mapping[str, Metrics]) -> str:
    """``metrics``: Prometheus' text format (``queue_core.prometheus``)."""
    from ..prometheus import exposition_all

    return exposition_all(by_queue)


def metrics_json(by_queue: Mapping[str, Metrics]) -> dict[str, Any]:
    """``metrics --format json``: each queue's metrics, by name."""
    return {queue: metrics.to_dict() for queue, metrics in by_queue.items()}


def period_line(period: Mapping[str, Any]) -> str:
    """``schedule --format table``: one line per period enqueued."""
    return (
        f"{period['event_id']}  start {period['start']}: accepted {period['accepted']}, "
        f"duplicates {period['duplicates']}\n"
    )


# the demo's snapshots, as its text names them
_SNAPSHOT_LABELS = {
    "after_enqueue": "after enqueue",
    "intermediate": "intermediate",
    "final": "final",
    "after_reenqueue": "after re-enqueue",
    "after_redrive": "after redrive",
}


def demo_text(result: Any) -> str:
    """``demo``: each step at its model time, and the snapshots under the steps that take one."""
    from ..app.demo import format_snapshot

    lines = []
    for step in result.steps:
        lines.append(wrap(f"[t={step.now}] {step.text}", indent=9))
        if step.snapshot:
            # the counts, then the money under them
            label = f"    {_SNAPSHOT_LABELS[step.snapshot]}: "
            counts, money = format_snapshot(result.snapshots[step.snapshot]).split(
                " | "
            )
            lines += [f"{label}{counts}", f"{' ' * len(label)}{money}"]
    return "".join(line + "\n" for line in lines)


def lab_text(results: Any) -> str:
    """``lab``: each story as the lab tells it (``app.lab.format_text``)."""
    from ..app.lab import format_text

    return str(format_text(results))


def lab_json(results: Mapping[str, Any]) -> dict[str, Any]:
    """``lab --format json``: one object keyed by case name, each a list of steps."""
    return {case: [step.to_dict() for step in steps] for case, steps in results.items()}


def message_json(m: Message) -> dict[str, Any]:
    """``queue-core list --json``: one message, as stored."""
    return {
        "event_id": m.event_id,
        "state": m.state,
        "attempts": m.attempts,
        "generation": m.generation,
        "available_at": m.available_at,
        "lease_until": m.lease_until,
        "last_error": m.last_error,
        "detail": m.last_detail,
        "payload": m.payload_object,
    }
