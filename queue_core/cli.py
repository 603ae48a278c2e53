"""``queue-core``: the command line over the queue.

Exit status: 0 success, 2 rejected input or usage error, 1 anything else, 130
interrupted. An expected error prints one line ``queue-core: <code>: <what is
wrong>`` on stderr and never a traceback; a usage error has the code ``usage``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import textwrap
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

from . import __version__
from .app import ledger
from .clock import MAX_SECONDS, Clock, ModelClock
from .app.demo import format_snapshot, run_demo
from .envelope import MAX_FILE_BYTES, parse_batch
from .errors import BatchRejected, QueueError
from .app.lab import (
    CASES as LAB_CASES,
    STORIES as LAB_STORIES,
    format_text as format_lab,
    run_lab,
    to_json as lab_json,
)
from .app.ledger import (
    DEFAULT_CATEGORIES,
    MAX_AMOUNT_CENTS,
    MIN_AMOUNT_CENTS,
    Handler,
    Report,
)
from .store import (
    BUSY_RETRY_SECONDS,
    BUSY_TIMEOUT_MS,
    DEFAULT_LEASE_SECONDS,
    MAX_BATCH,
    MAX_LEASE_SECONDS,
    Store,
)
from .cli_output import PROG, Progress, dead_table, print_json, status_table, wrap
from .prometheus import exposition
from .cli_work import HandlerNotFound, load_handler, stopping_on_signals
from .rules import MessageHandler
from .worker import WorkInterrupted, work

DEFAULT_DB = "queue.sqlite3"
MAX_BUSY_SECONDS = 3600  # --busy-timeout: an hour is already a hung database


class UsageError(QueueError):
    """The command line was used wrongly: exit 2.

    An unknown option, a missing argument, or no command at all.
    """

    code = "usage"
    exit_status = 2


def _whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: ASCII digits only, within [low, high]."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"[0-9]+", text):
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected a number in {low}..{high}, got {text}"
            )
        return value

    return parse


_seconds = _whole_number(0, MAX_SECONDS)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def _age(text: str) -> int:
    """An argparse type: an age such as 3600, 90s, 15m, 12h or 30d, in whole seconds."""
    found = re.fullmatch(r"([0-9]+)([smhd]?)", text)
    if not found:
        raise argparse.ArgumentTypeError(
            f"expected an age such as 3600, 90s, 15m, 12h or 30d, got {text!r}"
        )
    seconds = int(found.group(1)) * _UNITS[found.group(2) or "s"]
    if seconds > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text} is longer than the clock's range ({MAX_SECONDS} s)"
        )
    return seconds


def _busy_seconds(text: str) -> float:
    """An argparse type: seconds to wait for a busy database, 0 to an hour."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        raise argparse.ArgumentTypeError(
            f"expected seconds such as 0, 0.5 or 30, got {text!r}"
        )
    seconds = float(text)
    if seconds > MAX_BUSY_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_BUSY_SECONDS} seconds, got {text}"
        )
    return seconds


def _poll_seconds(text: str) -> float:
    """An argparse type: seconds a --forever worker waits, above 0, at most an hour."""
    seconds = _busy_seconds(text)
    if seconds == 0:
        raise argparse.ArgumentTypeError("expected more than 0 seconds, got 0")
    return seconds


_lease_seconds = _whole_number(1, MAX_LEASE_SECONDS)
_count = _whole_number(0, 10**9)


# The one example line of the help text; tests check that it is a valid line the
# handler accepts.
EXAMPLE_LINE = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 1250}}'
)
# their own temporary folder and model clock: GLOBAL_OPTIONS do not apply
SELF_CONTAINED = ("demo", "lab")
# accepted before or after the command's name
GLOBAL_OPTIONS = ("--db", "--now", "--busy-timeout")
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
        "event_id is E and four digits (E0001); payload is a JSON object. An id "
        "already stored (or earlier in the batch) with the same payload is a "
        "duplicate, stored once; with another payload it rejects the batch. One "
        "bad line rejects the whole batch: nothing is written.",
        f'The command line runs the reference handler, the ledger: "category" is '
        f"one of {categories} (work --category NAME adds one), "
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
        "--now",
        metavar="SECONDS",
        type=_seconds,
        default=argparse.SUPPRESS,
        help="model time in whole seconds instead of the system clock",
    )
    common.add_argument(
        "--busy-timeout",
        metavar="SECONDS",
        type=_busy_seconds,
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

    worker = command(
        "work", "process messages until none is available now (--forever: until stopped)"
    )
    worker.add_argument(
        "--lease-seconds",
        type=_lease_seconds,
        default=DEFAULT_LEASE_SECONDS,
        metavar="S",
        help=f"lease length (default: {DEFAULT_LEASE_SECONDS})",
    )
    worker.add_argument(
        "--max-messages",
        type=_count,
        default=None,
        metavar="N",
        help="stop after N claims",
    )
    worker.add_argument(
        "--batch",
        type=_whole_number(1, MAX_BATCH),
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
        help="your handler(tx, message) instead of the ledger's, imported as "
        "Python would (the working directory first)",
    )
    worker.add_argument(
        "--forever",
        action="store_true",
        help="when nothing is available, wait and look again, until stopped "
        "(SIGTERM or Ctrl-C: the message in hand is finished first)",
    )
    worker.add_argument(
        "--poll",
        type=_poll_seconds,
        default=None,
        metavar="SECONDS",
        help="with --forever: how long to wait when nothing is available (default: 1)",
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

    status = command("status", "counts by state and the money")
    status.add_argument("--json", action="store_true", help="print JSON")

    command(
        "metrics", "the metrics in Prometheus' text format (for a scrape or a cron job)"
    )

    prune = command(
        "prune", "remove the payloads of old done messages (dedup stays exact)"
    )
    prune.add_argument(
        "--older-than",
        type=_age,
        required=True,
        metavar="AGE",
        help="done at least this long ago: 3600, 90s, 15m, 12h or 30d",
    )

    dead = command("dead", "list dead letters")
    dead.add_argument("--json", action="store_true", help="print JSON")

    redrive = command("redrive", "give dead messages a new cycle")
    redrive.add_argument("event_ids", nargs="+", metavar="EVENT_ID")

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


def main(
    argv: Sequence[str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the CLI; returns the exit status."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = build_parser()
    try:
        # argparse writes to sys.*
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    # argparse already printed the help, the version, or usage and the problem
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if args.command is None:  # no command: the whole help, as a usage error
        err.write(parser.format_help())
        print(f"{PROG}: usage: no command given", file=err)
        return UsageError.exit_status
    try:
        _refuse_global_options(args)
        return _dispatch(args, out)
    except BatchRejected as exc:
        print(f"{PROG}: batch rejected, nothing written: {exc}", file=err)
        return exc.exit_status
    except QueueError as exc:
        print(f"{PROG}: {exc.code}: {exc.message}", file=err)
        return exc.exit_status
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=err)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # a bug: say so plainly, traceback only on request
        print(f"{PROG}: unexpected error: {type(exc).__name__}: {exc}", file=err)
        if os.environ.get("QUEUE_CORE_DEBUG"):
            traceback.print_exc(file=err)
        else:
            print(f"{PROG}: set QUEUE_CORE_DEBUG=1 to see the traceback", file=err)
        return 1


def _refuse_global_options(args: argparse.Namespace) -> None:
    """demo and lab make their own folder and clock.

    A --db, --now or --busy-timeout would be ignored, so it is refused.
    """
    given = [
        option
        for option in GLOBAL_OPTIONS
        if hasattr(args, option[2:].replace("-", "_"))
    ]
    if args.command in SELF_CONTAINED and given:
        raise UsageError(
            f"{args.command} does not take {' or '.join(given)}: "
            "it makes its own temporary folder and model clock"
        )


def _dispatch(args: argparse.Namespace, out: TextIO) -> int:
    # an SQLite file, or a postgresql:// URL: Store chooses the engine
    db: str = getattr(args, "db", DEFAULT_DB)
    now = getattr(args, "now", None)
    # Without --now the store takes the system clock (on PostgreSQL: the
    # server's, one clock for every host).
    clock: Clock | None = ModelClock(now) if now is not None else None
    busy: float = getattr(args, "busy_timeout", BUSY_RETRY_SECONDS)

    def open_store(create: bool) -> Store:
        # SQLite's own wait per attempt is never longer than the whole wait asked for.
        return Store(
            db,
            clock=clock,
            create=create,
            busy_timeout_ms=min(BUSY_TIMEOUT_MS, round(busy * 1000)),
            busy_retry_seconds=busy,
        )

    if args.command == "demo":
        return _demo(args.json, out)
    if args.command == "lab":
        results = run_lab([args.case] if args.case else LAB_STORIES)
        out.write(lab_json(results) + "\n" if args.json else format_lab(results))
        return 0
    if args.command == "enqueue":
        # validated before the file is even opened
        batch = parse_batch(_read_batch(args.file))
        with open_store(create=True) as store:
            # the CLI runs the reference application: its table lives beside the queue
            ledger.install(store)
            print_json(store.enqueue(batch).to_dict(), out)
        return 0
    # One store (one connection) for the whole command, closed explicitly.
    with open_store(create=False) as store:
        return _run_on(store, args, out)


def _worker_handler(args: argparse.Namespace) -> MessageHandler:
    """The handler ``work`` runs: the caller's (``--handler``), or the ledger's."""
    if args.poll is not None and not args.forever:
        raise UsageError("--poll needs --forever")
    if args.handler is None:
        return Handler.with_categories(args.category)
    if args.category:
        raise UsageError("--category adds categories to the ledger's handler; "
                         "it cannot go with --handler")
    try:
        return load_handler(args.handler)
    except HandlerNotFound as exc:
        raise UsageError(str(exc)) from None


def _work(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    handler = _worker_handler(args)  # refused before anything is written
    if args.handler is None:
        ledger.install(store)  # the ledger's table, beside the queue
    progress = Progress.for_run(quiet=args.quiet, as_json=args.json)
    with stopping_on_signals() as stopping:
        try:
            summary = work(
                store,
                handler,
                lease_seconds=args.lease_seconds,
                max_messages=args.max_messages,
                batch=args.batch,
                progress=progress,
                forever=args.forever,
                poll_seconds=1.0 if args.poll is None else args.poll,
                stop=stopping.stop,
            )
        except WorkInterrupted as interrupted:
            summary = interrupted.summary
            given_back = ", ".join(interrupted.released) or "nothing"
            print(f"{PROG}: interrupted; gave back {given_back} (ready again)",
                  file=sys.stderr)
    if progress is not None:
        progress.finish(summary)
    if not args.quiet:
        print_json(summary.to_dict(), out)
    return stopping.exit_status


def _run_on(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "work":
        return _work(store, args, out)
    if args.command == "metrics":
        out.write(exposition(store.metrics()))
    elif args.command == "prune":
        print_json(store.prune(args.older_than).to_dict(), out)
    elif args.command == "status":
        # The counts, the money and the metrics from one snapshot: they agree.
        snapshot, metrics = store.read(
            lambda view: (
                Report(store.status_tx(view), ledger.totals_tx(view)),
                store.metrics_tx(view),
            )
        )
        if args.json:
            data = snapshot.to_dict()
            data["metrics"] = {
                k: v for k, v in metrics.to_dict().items() if k != "messages"
            }
            print_json(data, out)
        else:
            out.write(status_table(snapshot, metrics))
    elif args.command == "dead":
        letters = store.dead_letters()
        if args.json:
            print_json(
                [
                    {
                        "event_id": m.event_id,
                        "attempts": m.attempts,
                        "generation": m.generation,
                        "last_error": m.last_error,
                        "detail": m.last_detail,
                        "payload": m.payload_object,
                    }
                    for m in letters
                ],
                out,
            )
        else:
            out.write(dead_table(letters))
    elif args.command == "redrive":
        print_json({"redriven": store.redrive(args.event_ids)}, out)
    return 0


def _read_batch(name: str) -> bytes:
    # Read one byte past the limit: enough to reject a huge file without loading it.
    if name == "-":
        return sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    try:
        with open(name, "rb") as fh:
            return fh.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise UsageError(
            f"{name} is a directory, not a JSONL file", code="cannot_read"
        ) from None
    except OSError as exc:
        raise UsageError(
            f"cannot read {name}: {exc.strerror}", code="cannot_read"
        ) from None


def _demo(as_json: bool, out: TextIO) -> int:
    result = run_demo()
    if as_json:
        print_json(result.to_dict(), out)
        return 0
    labels = {
        "after_enqueue": "after enqueue",
        "intermediate": "intermediate",
        "final": "final",
        "after_reenqueue": "after re-enqueue",
        "after_redrive": "after redrive",
    }
    for step in result.steps:
        out.write(wrap(f"[t={step.now}] {step.text}", indent=9) + "\n")
        if step.snapshot:
            # the counts, then the money under them
            label = f"    {labels[step.snapshot]}: "
            snapshot = result.snapshots[step.snapshot]
            counts, money = format_snapshot(snapshot).split(" | ")
            out.write(f"{label}{counts}\n{' ' * len(label)}{money}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
