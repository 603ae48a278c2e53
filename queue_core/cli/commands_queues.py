"""The commands that read a queue or set one up, entries of the command table
(``table``): ``status``, ``metrics``, ``dead``, ``list``, ``create`` and
``queues``.

Each is its arguments (a function, called when the command is used: it reads
the library's defaults and bounds then), its library call (``calls``) and its
output.
"""

from __future__ import annotations

from . import calls, render, types
from .spec import Argument, Command, Excludes, Needs, OneOf, Option, Output


def _setting(option: str, key: str, metavar: str, what: str) -> Option:
    """A queue setting of ``create``, with the library's bounds and default."""
    from ..queues import DEFAULT_SETTINGS, SETTING_BOUNDS

    low, high = SETTING_BOUNDS[key]
    default = getattr(DEFAULT_SETTINGS, key)
    return Option(
        option,
        type=types.whole_number(low, high),
        default=default,
        metavar=metavar,
        dest=key,
        help=f"{what}{low}..{high} (default: {default})",
    )


STATUS = Command(
    "status",
    "counts by state and the metrics (the ledger's money once work ran it)",
    about="counts by state and the metrics (`Store.metrics`), and the money in "
    "effects where `work` ran the ledger, read in one snapshot",
    run=calls.status,
    output=Output(("table", "json"), table=render.status_text, json=render.status_json),
    reads_only=True,
    see="operating.md",
)


METRICS = Command(
    "metrics",
    "the metrics in Prometheus' text format (for a scrape or a cron job)",
    about="the metrics in Prometheus' text format, of one queue or (`--all`) of every "
    "queue in one scrape",
    run=calls.metrics,
    arguments=lambda: (
        Option(
            "--all",
            flag=True,
            help="every queue of the database in one scrape (a queue label on each "
            "sample), instead of the one --queue names",
        ),
    ),
    rules=(
        Excludes(
            "--all", "--queue", "metrics --all covers every queue; it takes no --queue"
        ),
    ),
    output=Output(
        ("prometheus", "json"), text=render.exposition, json=render.metrics_json
    ),
    reads_only=True,
    see="operating.md#scraping-the-metrics",
)


DEAD = Command(
    "dead",
    "list dead letters",
    about="dead letters with attempts, last error code, the reason in words (`why:`) "
    "and the stored payload",
    run=calls.dead,
    output=Output(("table", "json"), table=render.dead_table, json=render.dead_json),
    reads_only=True,
    see="dead-letters.md",
)


def _listing() -> tuple[Argument, ...]:
    from ..values import STATES

    return (
        Option("--state", choices=STATES, help="only messages in this state"),
        Option(
            "--limit", type=types.parse_count, metavar="N", help="at most N messages"
        ),
    )


LIST = Command(
    "list",
    "the messages, by event id (one state, or all)",
    about="the messages by event id: state, attempts, generation, available and lease "
    "times, last error",
    run=calls.listing,
    arguments=_listing,
    output=Output(
        ("table", "json"), table=render.messages_table, json=render.messages_json
    ),
    reads_only=True,
    see="your-program.md#seeing-and-cleaning-a-queue",
)


def _create() -> tuple[Argument, ...]:
    from ..queues import DEFAULT_QUEUE, DEFAULT_SETTINGS, NEW_QUEUE_BACKOFF_JITTER

    return (
        Option("name", metavar="NAME", type=types.parse_queue_name, help=""),
        Option(
            "--id-pattern",
            metavar="REGEX",
            default=DEFAULT_SETTINGS.id_pattern,
            help="a Python regular expression every event id must match in full "
            f"(default: {DEFAULT_SETTINGS.id_pattern})",
        ),
        _setting(
            "--max-attempts", "max_attempts", "N", "claims per cycle before dead: "
        ),
        _setting("--lease-seconds", "lease_seconds", "N", ""),
        _setting("--max-payload-bytes", "max_payload_bytes", "N", ""),
        _setting(
            "--backoff-base",
            "backoff_base_seconds",
            "SECONDS",
            "the delay after a first temporary failure, doubled after each next: ",
        ),
        _setting(
            "--backoff-max",
            "backoff_max_seconds",
            "SECONDS",
            "no delay is longer, nor a handler's retry_after: ",
        ),
        Option(
            "--backoff-jitter",
            type=types.parse_fraction,
            metavar="FRACTION",
            dest="backoff_jitter",
            help="the part of each delay taken off at random, so that messages "
            "failed together come back apart: 0..1 (default: "
            f"{NEW_QUEUE_BACKOFF_JITTER}; {DEFAULT_SETTINGS.backoff_jitter:g} for "
            f"{DEFAULT_QUEUE})",
        ),
    )


CREATE = Command(
    "create",
    "create a queue with its own settings",
    about="create a named queue with its id rule, attempts, lease, payload limit and "
    'retry policy; prints its settings and `"created"` (false when it was there with '
    "the same settings)",
    run=calls.create,
    arguments=_create,
    output=Output(("json", "table")),
    see="your-program.md#named-queues",
)

QUEUES = Command(
    "queues",
    "every queue: its settings and counts by state",
    about="every queue of the database: its settings, its counts by state, and its "
    "retry policy in words",
    run=calls.queues,
    output=Output(
        ("table", "json"), table=render.queues_table, json=render.queues_json
    ),
    reads_only=True,
    see="retry-policy.md",
)
