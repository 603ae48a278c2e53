"""The metrics in Prometheus' text exposition format, for a scrape or a cron job.

``queue-core metrics`` prints this; node_exporter's textfile collector, or
any scraper of the format (version 0.0.4), reads it as it is. Names follow
Prometheus' conventions: a ``queue_core_`` prefix, base units (seconds), and
``_total`` on the one counter.
"""

from __future__ import annotations

from .values import STATES, Metrics


def exposition(metrics: Metrics, queue: str = "default") -> str:
    """The text exposition of ``metrics`` of ``queue``, ending with a newline.

    Each family: its HELP and TYPE lines, then its samples, each labelled with
    its queue (a queue's name needs no escaping: letters, digits, _ and -).
    """
    own = f'queue="{queue}"'
    lines: list[str] = []

    def family(
        name: str,
        kind: str,
        help_text: str,
        samples: list[tuple[str, str, int | float]],
    ) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for suffix, label, value in samples:
            # NaN: no done message to take a quantile of
            shown = "NaN" if value != value else str(value)
            labels = f"{own},{label}" if label else own
            lines.append(f"{name}{suffix}{{{labels}}} {shown}")

    family(
        "queue_core_messages",
        "gauge",
        "Messages by stored state.",
        [
            ("", f'state="{state}"', metrics.messages.get(state, 0))
            for state in STATES
        ],
    )
    family(
        "queue_core_oldest_ready_age_seconds",
        "gauge",
        "Age of the oldest ready message (0: none).",
        [("", "", metrics.oldest_ready_age or 0)],
    )
    family(
        "queue_core_dead_messages_by_attempts",
        "gauge",
        "Dead messages by the attempts they spent.",
        [
            ("", f'attempts="{attempts}"', count)
            for attempts, count in metrics.dead_attempts.items()
        ],
    )
    latency = metrics.enqueue_to_done
    quantiles: list[tuple[str, str, int | float]] = [
        ("", f'quantile="{q}"', value if value is not None else float("nan"))
        for q, value in (("0.5", latency.p50), ("0.95", latency.p95))
    ]
    family(
        "queue_core_enqueue_to_done_seconds",
        "summary",
        "From enqueue to done (schema version 3 on).",
        quantiles + [("_sum", "", latency.sum), ("_count", "", latency.count)],
    )
    family(
        "queue_core_enqueue_to_done_max_seconds",
        "gauge",
        "The longest enqueue to done (0: none yet).",
        [("", "", latency.max or 0)],
    )
    family(
        "queue_core_expired_leases_total",
        "counter",
        "Leases that ran out (taken over, or dead).",
        [("", "", metrics.expired_leases)],
    )
    family(
        "queue_core_pruned_messages",
        "gauge",
        "Done messages whose payload prune removed.",
        [("", "", metrics.pruned)],
    )
    return "\n".join(lines) + "\n"
