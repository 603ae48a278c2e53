"""The commands that move messages, entries of the command table (``table``):
``enqueue``, ``schedule``, ``work``, ``redrive``, ``purge`` and ``prune``.

Each is its arguments (a function, called when the command is used: it reads
the library's defaults and bounds then), its library call (``calls``) and its
output.
"""

from __future__ import annotations

from . import calls, render, types
from .spec import Argument, Command, Excludes, Needs, OneOf, Option, Output


def _enqueue() -> tuple[Argument, ...]:
    from ..rules import DEFAULT_PRIORITY, MAX_DELAY_SECONDS, MAX_PRIORITY, MIN_PRIORITY

    return (
        Option(
            "file",
            metavar="FILE",
            help="JSONL batch; '-' reads standard input",
            complete="file",
        ),
        OneOf(
            (
                Option(
                    "--delay",
                    type=types.parse_delay,
                    default=0,
                    metavar="SECONDS",
                    help="the new messages can be claimed only this many seconds "
                    "from now",
                ),
                Option(
                    "--at",
                    type=types.parse_at,
                    metavar="TIME",
                    help="the new messages can be claimed only from TIME: ISO 8601 "
                    "with a timezone (2026-12-05T09:00:00Z) or Unix seconds, at most "
                    f"{MAX_DELAY_SECONDS} s ahead",
                ),
            )
        ),
        Option(
            "--priority",
            type=types.parse_priority,
            default=DEFAULT_PRIORITY,
            metavar="N",
            help=f"{MIN_PRIORITY}..{MAX_PRIORITY}: among available messages a claim "
            f"takes the highest first (default: {DEFAULT_PRIORITY})",
        ),
    )


ENQUEUE = Command(
    "enqueue",
    "validate a JSONL batch and store it",
    about="validate a JSONL batch (`-` reads standard input) and store it, "
    "claimable now, after `--delay` or from `--at`; one bad line rejects the whole "
    'batch; prints `{"accepted": N, "duplicates": M}`',
    run=calls.enqueue,
    arguments=_enqueue,
    output=Output(("json", "table")),
    see="envelope.md",
)


def _schedule() -> tuple[Argument, ...]:
    from ..rules import DEFAULT_PRIORITY

    return (
        Option(
            "name",
            metavar="NAME",
            help="the schedule's name: each period's event id is NAME-<period start, "
            "Unix seconds>, which the queue's id rule must accept",
        ),
        Option(
            "--every",
            type=types.parse_every,
            required=True,
            metavar="PERIOD",
            help="the period: 60, 90s, 15m, 12h or 1d; periods start at multiples of "
            "it since 1970-01-01 UTC",
        ),
        Option(
            "--payload",
            required=True,
            metavar="JSON",
            help="the payload of every period's message, a JSON object",
        ),
        Option(
            "--priority",
            type=types.parse_priority,
            default=DEFAULT_PRIORITY,
            metavar="N",
            help=f"the messages' priority (default: {DEFAULT_PRIORITY})",
        ),
        Option(
            "--forever",
            flag=True,
            help="enqueue each period as it starts, until stopped (SIGTERM or Ctrl-C); "
            "without it: the current period once",
        ),
    )


SCHEDULE = Command(
    "schedule",
    "enqueue NAME-<period start> once per period (--forever: until stopped)",
    about="enqueue the message `NAME-<period start>` of the current period in a queue "
    "of its own, and with `--forever` each next one as it starts, until SIGTERM or "
    "Ctrl-C; two schedulers enqueue a period once; prints a line per period",
    run=calls.schedule,
    arguments=_schedule,
    rules=(
        Excludes(
            "--forever",
            "--now",
            "--forever waits on the system clock; "
            "--now enqueues one period at that time",
        ),
    ),
    output=Output(
        ("json", "table"),
        table=render.period_line,
        sorted_ascii_json=True,
        about="each period on a line of its own as it is enqueued",
    ),
    see="schedules.md",
)


def _work() -> tuple[Argument, ...]:
    from ..queues import DEFAULT_QUEUE
    from ..rules import DEFAULT_LEASE_SECONDS

    return (
        Option(
            "--lease-seconds",
            type=types.parse_lease_seconds,
            metavar="S",
            help=f"lease length (default: the queue's; {DEFAULT_LEASE_SECONDS} for "
            f"{DEFAULT_QUEUE})",
        ),
        Option(
            "--max-messages",
            type=types.parse_count,
            metavar="N",
            help="stop after N claims",
        ),
        Option(
            "--batch",
            type=types.parse_batch,
            default=1,
            metavar="K",
            help="the batched path: claim and complete up to K messages per "
            "transaction "
            "(default: 1, a transaction each)",
        ),
        Option(
            "--category",
            repeat=True,
            metavar="NAME",
            help="also accept this category (repeatable)",
        ),
        Option(
            "--handler",
            metavar="MODULE:FUNCTION",
            help="your handler(tx, message), or a LongHandler object, instead of "
            "the ledger's, imported as Python would (the working directory first); "
            "needed on every queue but default",
        ),
        Option(
            "--forever",
            flag=True,
            help="when nothing is available, wait and look again, until stopped "
            "(SIGTERM or Ctrl-C: the message in hand is finished first)",
        ),
        Option(
            "--poll",
            type=types.parse_poll_seconds,
            metavar="SECONDS",
            help="with --forever: how long to wait when nothing is available "
            "(default: 1)",
        ),
        Option(
            "--heartbeat-every",
            type=types.parse_heartbeat_seconds,
            metavar="SECONDS",
            help="a two-step handler (LongHandler): extend its lease this often while "
            "its prepare step runs (default: a quarter of the lease)",
        ),
        Option(
            "--concurrency",
            type=types.parse_concurrency,
            default=1,
            metavar="N",
            help="N threads in this process, each with a message in hand: two-step "
            "handlers' prepare steps run side by side, writes take turns (default: 1)",
        ),
    )


WORK = Command(
    "work",
    "process messages until none is available now (--forever: until stopped)",
    about="process messages until none is available now (`--forever`: until "
    "stopped; SIGTERM or Ctrl-C finish the message in hand first, and no signal "
    "cancels a COMMIT in flight), with the ledger's handler or yours (`--handler`), "
    "on `--concurrency` threads; prints a JSON summary",
    run=calls.work,
    arguments=_work,
    rules=(
        Needs("--poll", "--forever", "--poll needs --forever"),
        Excludes(
            "--category",
            "--handler",
            "--category adds categories to the ledger's handler; "
            "it cannot go with --handler",
        ),
    ),
    output=Output(
        ("json", "table"),
        about="json also writes the progress on stderr, as one JSON line a second "
        "(by default a line drawn on a terminal only)",
    ),
    beside_format=(
        Option(
            "--quiet",
            flag=True,
            help="no progress line and no summary: the exit status says how it went",
        ),
    ),
    see="your-program.md",
)

REDRIVE = Command(
    "redrive",
    "give dead messages a new cycle (these ids, or --all)",
    about="give dead messages a new cycle: the ids named (only dead ones; all or "
    "none), or `--all` of them (of one `--code`)",
    run=calls.redrive,
    arguments=lambda: (
        OneOf(
            (
                Option(
                    "event_ids",
                    nargs="*",
                    default=[],
                    metavar="EVENT_ID",
                    help="dead messages to redrive",
                ),
                Option(
                    "--all",
                    flag=True,
                    help=lambda: "every dead message of the queue, in chunks of "
                    f"{calls.redrive_chunk()} (a transaction each)",
                ),
            ),
            required=True,
        ),
        Option(
            "--code",
            metavar="CODE",
            type=types.parse_error_code,
            help="with --all: only the dead messages whose last_error is CODE",
        ),
    ),
    rules=(
        Needs("--code", "--all", "--code filters --all: redrive --all --code CODE"),
    ),
    output=Output(("json", "table")),
    see="operating.md#redriving-in-bulk",
)

PURGE = Command(
    "purge",
    "remove every ready or every dead message",
    about="remove every ready or every dead message (never leased or done ones); asks "
    "on a terminal, refuses elsewhere without `--yes`",
    run=calls.purge,
    arguments=lambda: (
        Option("--state", choices=("ready", "dead"), required=True, help=""),
        Option(
            "--yes",
            flag=True,
            help="do not ask (without it, purge asks on a terminal and refuses "
            "otherwise)",
        ),
    ),
    output=Output(("json", "table")),
    see="your-program.md#seeing-and-cleaning-a-queue",
)


PRUNE = Command(
    "prune",
    "remove the payloads of old done messages (dedup stays exact)",
    about="remove the payloads of done messages older than `--older-than`, keeping "
    "what deduplication needs (their hash)",
    run=calls.prune,
    arguments=lambda: (
        Option(
            "--older-than",
            type=types.parse_age,
            required=True,
            metavar="AGE",
            help="done at least this long ago: 3600, 90s, 15m, 12h or 30d",
        ),
    ),
    output=Output(("json", "table")),
    see="operating.md",
)
