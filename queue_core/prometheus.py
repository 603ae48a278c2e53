"""The metrics in Prometheus' text exposition format, for a scrape or a cron job.

``queue-core metrics`` prints this (``--all``: every queue of the database in
one scrape); node_exporter's textfile collector, or any scraper of the
format (version 0.0.4), reads it as it is. Names follow Prometheus'
conventions: a ``queue_core_`` prefix, base units in the name (seconds),
``_total`` on every counter, and a ``queue`` label on every sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .values import STATES, Metrics

# One family's samples of one queue: (suffix, labels beside queue, value).
Samples = list[tuple[str, str, "int | float"]]

# name, type, HELP text, and how one queue's metrics give its samples; in the
# order of the exposition.
FAMILIES: tuple[tuple[str, str, str, Callable[[Metrics], Samples]], ...] = (
    (
        "queue_core_messages",
        "gauge",
        "Messages by stored state.",
        lambda m: [
            ("", f'state="{state}"', m.messages.get(state, 0)) for state in STATES
        ],
    ),
    (
        "queue_core_oldest_ready_age_seconds",
        "gauge",
        "Age of the oldest ready message (0: none).",
        lambda m: [("", "", m.oldest_ready_age or 0)],
    ),
    (
        "queue_core_dead_messages_by_attempts",
        "gauge",
        "Dead messages by the attempts they spent.",
        lambda m: [("", f'attempts="{a}"', n) for a, n in m.dead_attempts.items()],
    ),
    (
        "queue_core_enqueue_to_done_seconds",
        "summary",
        "From enqueue to done (schema version 3 on).",
        lambda m: [
            ("", f'quantile="{q}"', float("nan") if value is None else value)
            for q, value in (
                ("0.5", m.enqueue_to_done.p50),
                ("0.95", m.enqueue_to_done.p95),
            )
        ]
        + [
            ("_sum", "", m.enqueue_to_done.sum),
            ("_count", "", m.enqueue_to_done.count),
        ],
    ),
    (
        "queue_core_enqueue_to_done_max_seconds",
        "gauge",
        "The longest enqueue to done (0: none yet).",
        lambda m: [("", "", m.enqueue_to_done.max or 0)],
    ),
    (
        "queue_core_messages_processed_total",
        "counter",
        "Messages ACKed (done).",
        lambda m: [("", "", m.counters.processed)],
    ),
    (
        "queue_core_messages_retried_total",
        "counter",
        "Failures that scheduled another attempt.",
        lambda m: [("", "", m.counters.retried)],
    ),
    (
        "queue_core_messages_dead_total",
        "counter",
        "Times a message went dead, redriven ones too.",
        lambda m: [("", "", m.counters.dead)],
    ),
    (
        "queue_core_expired_leases_total",
        "counter",
        "Leases that ran out (taken over, or dead).",
        lambda m: [("", "", m.counters.expired_leases)],
    ),
    (
        "queue_core_pruned_messages",
        "gauge",
        "Done messages whose payload prune removed.",
        lambda m: [("", "", m.pruned)],
    ),
)


def exposition(metrics: Metrics, queue: str = "default") -> str:
    """The text exposition of ``metrics`` of ``queue``, ending with a newline."""
    return exposition_all({queue: metrics})


def exposition_all(by_queue: Mapping[str, Metrics]) -> str:
    """The text exposition of several queues: each family once, every queue in it.

    Each family: its HELP and TYPE lines, then its samples, queue by queue,
    each labelled with its queue (a queue's name needs no escaping: letters,
    digits, _ and -). The format allows one HELP and TYPE per family, so the
    queues share them.
    """
    lines: list[str] = []
    for name, kind, help_text, samples in FAMILIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for queue, metrics in by_queue.items():
            own = f'queue="{queue}"'
            for suffix, label, value in samples(metrics):
                # NaN: no done message to take a quantile of
                shown = "NaN" if value != value else str(value)
                labels = f"{own},{label}" if label else own
                lines.append(f"{name}{suffix}{{{labels}}} {shown}")
    return "\n".join(lines) + "\n"
