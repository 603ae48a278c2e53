"""``queue-core``'s arguments: the parser, the argument types and the help text.

The help has a fixed width (``HELP_WIDTH``) so that it reads the same in every
terminal and on the site, which prints it from here.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import NoReturn

from . import __version__
from .app.lab import CASES as LAB_CASES
from .app.ledger import DEFAULT_CATEGORIES, MAX_AMOUNT_CENTS, MIN_AMOUNT_CENTS
from .claims import REDRIVE_CHUNK
from .cli_output import PROG
from .cli_types import (
    parse_age,
    parse_at,
    parse_busy_seconds,
    parse_count,
    parse_decimal_seconds,
    parse_error_code,
    parse_every,
    parse_fraction,
    parse_lease_seconds,
    parse_poll_seconds,
    parse_priority,
    parse_queue_name,
    parse_seconds,
    whole_number,
)
from .errors import QueueError
from .queues import (
    DEFAULT_QUEUE,
    DEFAULT_SETTINGS,
    NEW_QUEUE_BACKOFF_JITTER,
    SETTING_BOUNDS,
)
from .rules import DEFAULT_PRIORITY, MAX_DELAY_SECONDS, MAX_PRIORITY, MIN_PRIORITY
from .store import BUSY_RETRY_SECONDS, DEFAULT_LEASE_SECONDS, MAX_BATCH, MAX_LEASE_SECONDS
from .values import STATES
from .worker import MAX_CONCURRENCY

DEFAULT_DB = "queue.sqlite3"


class UsageError(QueueError):
    """The command line was used wrongly: exit 2.

    An unknown option, a missing argument, or no command at all.
    """

    code = "usage"
    exit_status = 2


EXAMPLE_LINE = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 1250}}'
)
# their own temporary folder and model clock: GLOBAL_OPTIONS do not apply
SELF_CONTAINED = ("demo", "lab")
# accepted before or after the command's name
GLOBAL_OPTIONS = ("--db", "--queue", "--now", "--busy-timeout")
HELP_WIDTH = 80  # fixed, so that the help is the same in every terminal and on the site


def _help_epilog() -> str:
    """What a user needs before the first ``enqueue``.

    The batch format, the handler's rules, the exit status.
    """
    categories = ", ".join(sorted(DEFAULT_CATEGORIES))
    paragraphs = [
        "A batch (for enqueue) is a JSONL file: one event per line, a JSON object "
        'with exactly the keys "event_id" and "payload", for example',
        "  " + EXAMPLE_LINE,
        "event_id is E and four digits (E0001) in the queue default; a queue "
        "made with create takes ids by its own rule (--id-pattern), and --queue "
        "NAME works on it. payload is a JSON object. An id already stored in the "
        "queue (or earlier in the batch) with the same payload is a duplicate, "
        "stored once; with another payload it rejects the batch. One bad line "
        "rejects the whole batch: nothing is written.",
        "work --handler MODULE:FUNCTION runs your handler: a function of "
        "(tx, message) whose writes commit with each message's ACK, in one "
        "transaction. Without --handler, work runs the reference handler, the "
        f'ledger: "category" is one of {categories} (work --category NAME adds one), '

        f'"amount_cents" an integer {MIN_AMOUNT_CENTS}..{MAX_AMOUNT_CENTS} (true '
        f"and false are not integers). Any other payload is a permanent failure: "
        f"the message becomes a dead letter at once (see dead and redrive).",
        f'{" and ".join(SELF_CONTAINED)} run in a temporary folder of their own '
        f'with a model clock: they take none of {", ".join(GLOBAL_OPTIONS)}.',
        "Exit status: 0 success; 2 rejected input or usage error (nothing "
        "written); 1 anything else; 130 interrupted. An error prints one line on "
        'stderr: "queue-core: <code>: <what is wrong>".',
        "Start with: queue-core demo",
    ]
    width = HELP_WIDTH - 2  # argparse's own margin
    text = "\n\n".join(
        p if p.startswith("  ") else textwrap.fill(p, width, break_on_hyphens=False)
        for p in paragraphs
    )
    return text.replace("\n\n  ", "\n  ")  # the example line joins the sentence above


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=HELP_WIDTH)


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error format.

    The usage line, then ``queue-core: usage: <problem>``.
    """

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: usage: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    # Global options are accepted before or after the command name.
    common = _Parser(add_help=False)
    common.add_argument(
        "--db",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help=f"queue database file (default: {DEFAULT_DB} in the working directory), "
        "or a postgresql:// URL",
    )
    common.add_argument(
        "--queue",
        metavar="NAME",
        type=parse_queue_name,
        default=argparse.SUPPRESS,
        help=f"the queue to work on (default: {DEFAULT_QUEUE}); create makes one",
    )
    common.add_argument(
        "--now",
        metavar="SECONDS",
        type=parse_seconds,
        default=argparse.SUPPRESS,
        help="model time in whole seconds instead of the system clock",
    )
    common.add_argument(
        "--busy-timeout",
        metavar="SECONDS",
        type=parse_busy_seconds,
        default=argparse.SUPPRESS,
        help="how long to wait for a database that another writer holds before "
        f"failing with database_busy (default: {BUSY_RETRY_SECONDS:g}; 0: do not wait)",
    )
    # demo and lab accept these options only to refuse them with a clear message.
    refused = _Parser(add_help=False)
    for option in GLOBAL_OPTIONS:
        refused.add_argument(option, default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    parser = _Parser(
        prog=PROG,
        parents=[common],
        formatter_class=_Formatter,
        description=textwrap.fill(
            "A reliable local message queue on SQLite: lease, fencing, "
            "effect + ACK in one transaction.",
            HELP_WIDTH - 2,
        ),
        epilog=_help_epilog(),
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {__version__}",
        help="print the version and exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, summary: str, options: _Parser = common) -> _Parser:
        return commands.add_parser(
            name, parents=[options], help=summary, formatter_class=_Formatter
        )

    enqueue = command("enqueue", "validate a JSONL batch and store it")
    enqueue.add_argument(
        "file", metavar="FILE", help="JSONL batch; '-' reads standard input"
    )
    when = enqueue.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=whole_number(0, MAX_DELAY_SECONDS),
        default=0,
        metavar="SECONDS",
        help="the new messages can be claimed only this many seconds from now",
    )
    when.add_argument(
        "--at",
        type=parse_at,
        default=None,
        metavar="TIME",
        help="the new messages can be claimed only from TIME: ISO 8601 with a "
        "timezone (2026-12-05T09:00:00Z) or Unix seconds, at most "
        f"{MAX_DELAY_SECONDS} s ahead",
    )
    enqueue.add_argument(
        "--priority",
        type=parse_priority,
        default=DEFAULT_PRIORITY,
        metavar="N",
        help=f"{MIN_PRIORITY}..{MAX_PRIORITY}: among available messages a claim "
        f"takes the highest first (default: {DEFAULT_PRIORITY})",
    )

    schedule = command(
        "schedule", "enqueue NAME-<period start> once per period (--forever: until stopped)"
    )
    schedule.add_argument(
        "name",
        metavar="NAME",
        help="the schedule's name: each period's event id is NAME-<period start, "
        "Unix seconds>, which the queue's id rule must accept",
    )
    schedule.add_argument(
        "--every",
        type=parse_every,
        required=True,
        metavar="PERIOD",
        help="the period: 60, 90s, 15m, 12h or 1d; periods start at multiples of "
        "it since 1970-01-01 UTC",
    )
    schedule.add_argument(
        "--payload",
        required=True,
        metavar="JSON",
        help="the payload of every period's message, a JSON object",
    )
    schedule.add_argument(
        "--priority",
        type=parse_priority,
        default=DEFAULT_PRIORITY,
        metavar="N",
        help=f"the messages' priority (default: {DEFAULT_PRIORITY})",
    )
    schedule.add_argument(
        "--forever",
        action="store_true",
        help="enqueue each period as it starts, until stopped (SIGTERM or Ctrl-C); "
        "without it: the current period once",
    )

    worker = command(
        "work", "process messages until none is available now (--forever: until stopped)"
    )
    worker.add_argument(
        "--lease-seconds",
        type=parse_lease_seconds,
        default=None,
        metavar="S",
        help=f"lease length (default: the queue's; {DEFAULT_LEASE_SECONDS} for "
        f"{DEFAULT_QUEUE})",
    )
    worker.add_argument(
        "--max-messages",
        type=parse_count,
        default=None,
        metavar="N",
        help="stop after N claims",
    )
    worker.add_argument(
        "--batch",
        type=whole_number(1, MAX_BATCH),
        default=1,
        metavar="K",
        help="the batched path: claim and complete up to K messages per transaction "
        "(default: 1, a transaction each)",
    )
    worker.add_argument(
        "--category",
        action="append",
        default=[],
        metavar="NAME",
        help="also accept this category (repeatable)",
    )
    worker.add_argument(
        "--handler",
        metavar="MODULE:FUNCTION",
        help="your handler(tx, message), or a LongHandler object, instead of "
        "the ledger's, imported as Python would (the working directory first); "
        "needed on every queue but default",
    )
    worker.add_argument(
        "--forever",
        action="store_true",
        help="when nothing is available, wait and look again, until stopped "
        "(SIGTERM or Ctrl-C: the message in hand is finished first)",
    )
    worker.add_argument(
        "--poll",
        type=parse_poll_seconds,
        default=None,
        metavar="SECONDS",
        help="with --forever: how long to wait when nothing is available (default: 1)",
    )

    def heartbeat_seconds(text: str) -> float:
        seconds = parse_decimal_seconds(text, MAX_LEASE_SECONDS)
        if seconds == 0:
            raise argparse.ArgumentTypeError("expected more than 0 seconds, got 0")
        return seconds

    worker.add_argument(
        "--heartbeat-every",
        type=heartbeat_seconds,
        default=None,
        metavar="SECONDS",
        help="a two-step handler (LongHandler): extend its lease this often while "
        "its prepare step runs (default: a quarter of the lease)",
    )
    worker.add_argument(
        "--concurrency",
        type=whole_number(1, MAX_CONCURRENCY),
        default=1,
        metavar="N",
        help="N threads in this process, each with a message in hand: two-step "
        "handlers' prepare steps run side by side, writes take turns (default: 1)",
    )
    shown = worker.add_mutually_exclusive_group()
    shown.add_argument(
        "--quiet",
        action="store_true",
        help="no progress line and no summary: the exit status says how it went",
    )
    shown.add_argument(
        "--json",
        action="store_true",
        help="progress as one JSON line a second on stderr "
        "(the summary stays on stdout)",
    )

    status = command(
        "status", "counts by state and the metrics (the ledger's money once work ran it)"
    )
    status.add_argument("--json", action="store_true", help="print JSON")

    metrics = command(
        "metrics", "the metrics in Prometheus' text format (for a scrape or a cron job)"
    )
    metrics.add_argument(
        "--all",
        action="store_true",
        help="every queue of the database in one scrape (a queue label on each "
        "sample), instead of the one --queue names",
    )

    prune = command(
        "prune", "remove the payloads of old done messages (dedup stays exact)"
    )
    prune.add_argument(
        "--older-than",
        type=parse_age,
        required=True,
        metavar="AGE",
        help="done at least this long ago: 3600, 90s, 15m, 12h or 30d",
    )

    dead = command("dead", "list dead letters")
    dead.add_argument("--json", action="store_true", help="print JSON")

    listing = command("list", "the messages, by event id (one state, or all)")
    listing.add_argument("--state", choices=STATES, help="only messages in this state")
    listing.add_argument(
        "--limit", type=parse_count, default=None, metavar="N", help="at most N messages"
    )
    listing.add_argument("--json", action="store_true", help="print JSON")

    purge = command("purge", "remove every ready or every dead message")
    purge.add_argument("--state", choices=("ready", "dead"), required=True)
    purge.add_argument(
        "--yes",
        action="store_true",
        help="do not ask (without it, purge asks on a terminal and refuses otherwise)",
    )

    create = command("create", "create a queue with its own settings")
    create.add_argument("name", metavar="NAME", type=parse_queue_name)
    create.add_argument(
        "--id-pattern",
        metavar="REGEX",
        default=DEFAULT_SETTINGS.id_pattern,
        help="a Python regular expression every event id must match in full "
        f"(default: {DEFAULT_SETTINGS.id_pattern})",
    )
    for option, key, metavar, what in (
        ("--max-attempts", "max_attempts", "N", "claims per cycle before dead: "),
        ("--lease-seconds", "lease_seconds", "N", ""),
        ("--max-payload-bytes", "max_payload_bytes", "N", ""),
        ("--backoff-base", "backoff_base_seconds", "SECONDS",
         "the delay after a first temporary failure, doubled after each next: "),
        ("--backoff-max", "backoff_max_seconds", "SECONDS",
         "no delay is longer, nor a handler's retry_after: "),
    ):
        low, high = SETTING_BOUNDS[key]
        default = getattr(DEFAULT_SETTINGS, key)
        create.add_argument(
            option,
            type=whole_number(low, high),
            default=default,
            metavar=metavar,
            dest=key,
            help=f"{what}{low}..{high} (default: {default})",
        )
    create.add_argument(
        "--backoff-jitter",
        type=parse_fraction,
        default=None,
        metavar="FRACTION",
        dest="backoff_jitter",
        help="the part of each delay taken off at random, so that messages "
        f"failed together come back apart: 0..1 (default: {NEW_QUEUE_BACKOFF_JITTER}; "
        f"{DEFAULT_SETTINGS.backoff_jitter:g} for {DEFAULT_QUEUE})",
    )
    queues = command("queues", "every queue: its settings and counts by state")
    queues.add_argument("--json", action="store_true", help="print JSON")

    redrive = command("redrive", "give dead messages a new cycle (these ids, or --all)")
    which = redrive.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "event_ids",
        nargs="*",
        default=[],
        metavar="EVENT_ID",
        help="dead messages to redrive",
    )
    which.add_argument(
        "--all",
        action="store_true",
        help="every dead message of the queue, in chunks of "
        f"{REDRIVE_CHUNK} (a transaction each)",
    )
    redrive.add_argument(
        "--code",
        metavar="CODE",
        type=parse_error_code,
        help="with --all: only the dead messages whose last_error is CODE",
    )

    demo = command("demo", "run the reference demo in a temporary folder", refused)
    demo.add_argument(
        "--json", action="store_true", help="print the five snapshots as JSON"
    )

    lab = command(
        "lab",
        "the delivery lab: one job on an at-least-once broker, step by step",
        refused,
    )
    lab.add_argument(
        "case",
        nargs="?",
        choices=LAB_CASES,
        metavar="CASE",
        help=f"one story ({', '.join(LAB_CASES)}); default: the four delivery stories",
    )
    lab.add_argument(
        "--json", action="store_true", help="print one JSON object keyed by case name"
    )
    return parser


