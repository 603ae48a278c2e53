"""``queue-core``: the command line over the queue.

Exit status: 0 success, 2 rejected input or usage error, 1 anything else, 130
interrupted. An expected error prints one line ``queue-core: <code>: <what is
wrong>`` on stderr and never a traceback; a usage error has the code ``usage``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, TextIO

from .app import ledger
from .app.demo import format_snapshot, run_demo
from .app.lab import (
    STORIES as LAB_STORIES,
    format_text as format_lab,
    run_lab,
    to_json as lab_json,
)
from .app.ledger import Handler
from .cli_output import (
    PROG,
    Progress,
    dead_table,
    message_json,
    messages_table,
    print_json,
    queues_table,
    status_table,
    wrap,
)
from .cli_parser import (  # the parser's names stay importable from here
    DEFAULT_DB,
    EXAMPLE_LINE,
    GLOBAL_OPTIONS,
    HELP_WIDTH,
    SELF_CONTAINED,
    UsageError,
    build_parser,
)
from .cli_schedule import check_options as check_schedule_options, schedule_command
from .cli_work import (
    HandlerNotFound,
    load_handler,
    refuse_missing_handler,
    stopping_on_signals,
)
from .clock import Clock, ModelClock
from .engines import read_only_reason
from .envelope import MAX_FILE_BYTES, parse_batch
from .errors import BatchRejected, QueueError, UnknownQueue, WrongPath
from .queues import DEFAULT_QUEUE
from .prometheus import exposition, exposition_all
from .rules import MessageHandler
from .store import BUSY_RETRY_SECONDS, BUSY_TIMEOUT_MS, Store
from .worker import LongHandler, WorkerConfig, WorkInterrupted, work

# The commands that only read: on a database this process may not write, they
# open it read-only (Store.open_read_only) instead of failing.
READ_ONLY_COMMANDS = frozenset({"status", "list", "metrics", "dead", "queues"})

__all__ = ["DEFAULT_DB", "EXAMPLE_LINE", "HELP_WIDTH", "UsageError", "build_parser", "main"]

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
    queue: str = getattr(args, "queue", DEFAULT_QUEUE)

    def open_store(create: bool, on: str = queue) -> Store:
        # SQLite's own wait per attempt is never longer than the whole wait asked for.
        try:
            reason = read_only_reason(db) if args.command in READ_ONLY_COMMANDS else None
            if reason is not None:  # it may only read: it reads, and says so
                print(f"{PROG}: read-only: {reason}; reading without writing",
                      file=sys.stderr)
                return Store.open_read_only(
                    db,
                    clock=clock,
                    queue=on,
                    busy_timeout_ms=min(BUSY_TIMEOUT_MS, round(busy * 1000)),
                    busy_retry_seconds=busy,
                )
            return Store(
                db,
                clock=clock,
                create=create,
                queue=on,
                busy_timeout_ms=min(BUSY_TIMEOUT_MS, round(busy * 1000)),
                busy_retry_seconds=busy,
            )
        except WrongPath as exc:
            if exc.code == "no_database" and on != DEFAULT_QUEUE:
                raise UnknownQueue(
                    f"no queue {on!r}: {exc.message}; create it first "
                    f"(queue-core create {on})"
                ) from None
            raise

    if args.command == "schedule":
        check_schedule_options(args)
    if args.command == "work":
        try:  # before the database is opened: nothing is written for a refused run
            refuse_missing_handler(queue, args.handler)
        except HandlerNotFound as exc:
            raise UsageError(str(exc)) from None
    if args.command == "demo":
        return _demo(args.json, out)
    if args.command == "lab":
        results = run_lab([args.case] if args.case else LAB_STORIES)
        out.write(lab_json(results) + "\n" if args.json else format_lab(results))
        return 0
    if args.command == "enqueue":
        data = _read_batch(args.file)
        # the default queue's rules are known: validated before the database is opened
        batch = parse_batch(data) if queue == DEFAULT_QUEUE else None
        # only the default queue is created with the database
        with open_store(create=queue == DEFAULT_QUEUE) as store:
            if batch is None:
                batch = parse_batch(data, store.settings)
            result = store.enqueue(
                batch, delay=args.delay, at=args.at, priority=args.priority
            )
            print_json(result.to_dict(), out)
        return 0
    if args.command == "create":
        if args.backoff_base_seconds > args.backoff_max_seconds:
            raise UsageError(
                f"--backoff-base {args.backoff_base_seconds} is above "
                f"--backoff-max {args.backoff_max_seconds}"
            )
        with open_store(create=True, on=DEFAULT_QUEUE) as store:
            existed = store.queue_settings(args.name) is not None
            made = store.create_queue(
                args.name,
                id_pattern=args.id_pattern,
                max_attempts=args.max_attempts,
                lease_seconds=args.lease_seconds,
                max_payload_bytes=args.max_payload_bytes,
                backoff_base_seconds=args.backoff_base_seconds,
                backoff_max_seconds=args.backoff_max_seconds,
                backoff_jitter=args.backoff_jitter,
            )
            print_json({"created": not existed, **made.to_dict()}, out)
        return 0
    if args.command == "queues":
        with open_store(create=False, on=DEFAULT_QUEUE) as store:
            found = store.queues()
        if args.json:
            print_json(
                [{**q.to_dict(), **counts.to_dict()} for q, counts in found], out
            )
        else:
            out.write(queues_table(found))
        return 0
    if args.command == "redrive":
        _check_redrive(args)  # refused before the database is opened
    if args.command == "metrics" and args.all:
        if hasattr(args, "queue"):
            raise UsageError("metrics --all covers every queue; it takes no --queue")
    # One store (one connection) for the whole command, closed explicitly.
    with open_store(create=False) as store:
        return _run_on(store, args, out)


def _worker_handler(args: argparse.Namespace) -> MessageHandler | LongHandler[Any]:
    """The handler ``work`` runs: the caller's (``--handler``), or the ledger's."""
    if args.poll is not None and not args.forever:
        raise UsageError("--poll needs --forever")
    if args.handler is None:
        return Handler.with_categories(args.category)
    if args.category:
        raise UsageError("--category adds categories to the ledger's handler; "
                         "it cannot go with --handler")
    try:
        # a plain handler(tx, message), or a LongHandler object (two steps)
        handler: MessageHandler | LongHandler[Any] = load_handler(args.handler)
    except HandlerNotFound as exc:
        raise UsageError(str(exc)) from None
    return handler


def _worker_config(
    args: argparse.Namespace, handler: MessageHandler | LongHandler[Any]
) -> WorkerConfig:
    """The options as a WorkerConfig; what only a two-step handler takes is refused by name."""
    two_steps = isinstance(handler, LongHandler)
    if args.heartbeat_every is not None and not two_steps:
        raise UsageError(
            "--heartbeat-every needs a two-step handler (a LongHandler): a plain "
            "handler runs inside its transaction, where no extension can commit"
        )
    if two_steps and args.batch != 1:
        raise UsageError(
            f"--batch {args.batch}: a two-step handler (a LongHandler) takes one "
            "message at a time per thread; use --concurrency for more at once"
        )
    return WorkerConfig(
        lease_seconds=args.lease_seconds,
        max_messages=args.max_messages,
        batch=args.batch,
        heartbeat_every=args.heartbeat_every,
        forever=args.forever,
        poll_seconds=1.0 if args.poll is None else args.poll,
        concurrency=args.concurrency,
    )


def _work(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    handler = _worker_handler(args)  # refused before anything is written
    lease_seconds = store.lease_seconds_for(args.lease_seconds)
    if args.heartbeat_every is not None and not args.heartbeat_every < lease_seconds:
        raise UsageError(
            f"--heartbeat-every {args.heartbeat_every:g} must be below the "
            f"lease ({lease_seconds} s; --lease-seconds sets it)"
        )
    config = _worker_config(args, handler)
    if args.handler is None:
        ledger.install(store)  # the ledger's table, beside the queue
    progress = Progress.for_run(quiet=args.quiet, as_json=args.json)
    with stopping_on_signals() as stopping:
        try:
            summary = work(
                store,
                handler,
                config,
                progress=progress,
                stop=stopping.stop,
                on_error=_waiting_out,
            )
        except WorkInterrupted as interrupted:
            summary = interrupted.summary
            given_back = ", ".join(interrupted.released) or "nothing"
            print(f"{PROG}: interrupted; gave back {given_back} (ready again)",
                  file=sys.stderr)
            if interrupted.kept:
                print(f"{PROG}: still held by a thread that did not stop: "
                      f"{', '.join(interrupted.kept)} (its lease runs out)", file=sys.stderr)
    if progress is not None:
        progress.finish(summary)
    if not args.quiet:
        print_json(summary.to_dict(), out)
    return stopping.exit_status


def _waiting_out(error: QueueError, pause: float) -> None:
    """A --forever worker's passing storage error, on stderr: it goes on after the pause."""
    print(f"{PROG}: {error.code}: {error.message}; trying again in {pause:g} s",
          file=sys.stderr, flush=True)


def _run_on(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "work":
        return _work(store, args, out)
    if args.command == "schedule":
        return schedule_command(store, args, out)
    if args.command == "metrics":
        if args.all:
            out.write(exposition_all(store.metrics_all()))
        else:
            out.write(exposition(store.metrics(), store.queue))
    elif args.command == "prune":
        print_json(store.prune(args.older_than).to_dict(), out)
    elif args.command == "status":
        # The counts, the money and the metrics from one snapshot: they agree. The
        # money is the reference application's: shown only where it is installed
        # (``queue-core work`` with the ledger's handler); elsewhere the queue's alone.
        counts, totals, metrics = store.read(
            lambda view: (
                store.status_tx(view),
                (
                    ledger.totals_tx(view, store.queue)
                    if ledger.installed_tx(view)
                    else None
                ),
                store.metrics_tx(view),
            )
        )
        if args.json:
            data: dict[str, object] = {"messages": counts.to_dict()["messages"]}
            if totals is not None:
                data["effects"] = totals.to_dict()
            data["metrics"] = {
                k: v for k, v in metrics.to_dict().items() if k != "messages"
            }
            print_json(data, out)
        else:
            out.write(status_table(counts, metrics, totals))
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
        redriven = _redrive(store, args)
        print_json({"redriven": redriven, "count": len(redriven)}, out)
    elif args.command == "list":
        found = store.messages(args.state, limit=args.limit)
        if args.json:
            print_json([message_json(m) for m in found], out)
        else:
            out.write(messages_table(found))
    elif args.command == "purge":
        _confirm_purge(store, args.state, args.yes)
        print_json({"purged": store.purge(args.state)}, out)
    return 0


def _check_redrive(args: argparse.Namespace) -> None:
    """--code only with --all (the parser takes ids or --all, one of them)."""
    if not args.all and args.code is not None:
        raise UsageError("--code filters --all: redrive --all --code CODE")


def _redrive(store: Store, args: argparse.Namespace) -> list[str]:
    """The ids named, or with --all every dead message (of --code)."""
    if args.all:
        return store.redrive_all(args.code)
    return store.redrive(args.event_ids)


def _confirm_purge(store: Store, state: str, yes: bool) -> None:
    """Without --yes, ask on a terminal; anywhere else refuse (a script must say --yes)."""
    if yes:
        return
    count = store.status().count(state)
    if not sys.stdin.isatty():
        raise UsageError(
            f"purge would remove {count} {state} message(s); add --yes "
            "(it asks only on a terminal)"
        )
    answer = input(f"remove {count} {state} message(s) from {store.where}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise UsageError("purge: not confirmed; nothing was removed")


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
