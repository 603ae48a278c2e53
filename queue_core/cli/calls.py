"""Each command's library call: what it opens, what it asks the library, what it shows.

A call receives the ``Invocation`` (the arguments, ``open`` for the store,
``show`` for the output) and returns the exit status. Each imports what it
uses, when it runs: ``queue-core status`` never loads the worker, and nothing
but ``work``, ``status``, ``demo`` and ``lab`` loads the reference
application. What the library refuses it raises with its code; ``run.main``
prints it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .spec import PROG, Invocation, UsageError

if TYPE_CHECKING:
    from ..envelope import Batch
    from ..errors import QueueError
    from ..rules import MessageHandler
    from ..worker import LongHandler, WorkerConfig


def enqueue(inv: Invocation) -> int:
    from ..envelope import parse_batch
    from ..queues import DEFAULT_QUEUE

    data = _read_batch(inv["file"])  # refused before any database is opened
    queue = inv.queue
    # the default queue's rules are known: validated before the database is opened
    batch: Batch | None = parse_batch(data) if queue == DEFAULT_QUEUE else None
    # only the default queue is created with the database
    with inv.open(create=queue == DEFAULT_QUEUE) as store:
        if batch is None:
            batch = parse_batch(data, store.settings)
        result = store.enqueue(
            batch, delay=inv["delay"], at=inv["at"], priority=inv["priority"]
        )
        inv.show(result.to_dict())
    return 0


def _read_batch(name: str) -> bytes:
    from ..envelope import MAX_FILE_BYTES

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


def schedule(inv: Invocation) -> int:
    """Each period's message, shown as it is enqueued; SIGTERM and Ctrl-C stop it
    between two periods, as they stop ``work --forever``."""
    from ..schedules import Period, Schedule, run_schedule
    from .service import stopping_on_signals

    def show(period: Period) -> None:
        inv.show(period.to_dict())

    with inv.open() as store:
        plan = Schedule(inv["name"], inv["every"], inv["payload"], inv["priority"])
        with stopping_on_signals() as stopping:
            run_schedule(
                store, plan, forever=inv["forever"], stop=stopping.stop, on_period=show
            )
    return stopping.exit_status


def work(inv: Invocation) -> int:
    from ..worker import WorkInterrupted, work as run_work
    from .render import Progress
    from .service import HandlerNotFound, refuse_missing_handler, stopping_on_signals

    try:  # before the database is opened: nothing is written for a refused run
        refuse_missing_handler(inv.queue, inv["handler"])
    except HandlerNotFound as exc:
        raise UsageError(str(exc)) from None
    with inv.open() as store:
        handler = _worker_handler(inv)  # refused before anything is written
        lease_seconds = store.lease_seconds_for(inv["lease_seconds"])
        every = inv["heartbeat_every"]
        if every is not None and not every < lease_seconds:
            raise UsageError(
                f"--heartbeat-every {every:g} must be below the "
                f"lease ({lease_seconds} s; --lease-seconds sets it)"
            )
        config = _worker_config(inv, handler)
        if inv["handler"] is None:
            from ..app import ledger

            ledger.install(store)  # the ledger's table, beside the queue
        # --format json also streams the progress as JSON lines; by default the
        # progress is a line drawn on a terminal only
        progress = Progress.for_run(
            quiet=inv["quiet"], as_json=inv.format_given and inv.format == "json"
        )
        with stopping_on_signals() as stopping:
            try:
                summary = run_work(
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
                print(
                    f"{PROG}: interrupted; gave back {given_back} (ready again)",
                    file=sys.stderr,
                )
                if interrupted.kept:
                    print(
                        f"{PROG}: still held by a thread that did not stop: "
                        f"{', '.join(interrupted.kept)} (its lease runs out)",
                        file=sys.stderr,
                    )
        if progress is not None:
            progress.finish(summary)
        if not inv["quiet"]:
            inv.show(summary.to_dict())
    return stopping.exit_status


def _worker_handler(inv: Invocation) -> MessageHandler | LongHandler[Any]:
    """The handler ``work`` runs: the caller's (``--handler``), or the ledger's."""
    if inv["handler"] is None:
        from ..app.ledger import Handler

        return Handler.with_categories(inv["category"])
    from .service import HandlerNotFound, load_handler

    try:
        # a plain handler(tx, message), or a LongHandler object (two steps)
        return load_handler(inv["handler"])
    except HandlerNotFound as exc:
        raise UsageError(str(exc)) from None


def _worker_config(
    inv: Invocation, handler: MessageHandler | LongHandler[Any]
) -> WorkerConfig:
    """The options as a WorkerConfig; what only a two-step handler takes is refused by name."""
    from ..worker import LongHandler, WorkerConfig

    two_steps = isinstance(handler, LongHandler)
    if inv["heartbeat_every"] is not None and not two_steps:
        raise UsageError(
            "--heartbeat-every needs a two-step handler (a LongHandler): a plain "
            "handler runs inside its transaction, where no extension can commit"
        )
    if two_steps and inv["batch"] != 1:
        raise UsageError(
            f"--batch {inv['batch']}: a two-step handler (a LongHandler) takes one "
            "message at a time per thread; use --concurrency for more at once"
        )
    return WorkerConfig(
        lease_seconds=inv["lease_seconds"],
        max_messages=inv["max_messages"],
        batch=inv["batch"],
        heartbeat_every=inv["heartbeat_every"],
        forever=inv["forever"],
        poll_seconds=1.0 if inv["poll"] is None else inv["poll"],
        concurrency=inv["concurrency"],
    )


def _waiting_out(error: QueueError, pause: float) -> None:
    """A --forever worker's passing storage error, on stderr: it goes on after the pause."""
    print(
        f"{PROG}: {error.code}: {error.message}; trying again in {pause:g} s",
        file=sys.stderr,
        flush=True,
    )


def status(inv: Invocation) -> int:
    """The counts, the money and the metrics from one snapshot: they agree. The
    money is the reference application's: shown only where it is installed
    (``queue-core work`` with the ledger's handler); elsewhere the queue's alone."""
    from ..app import ledger
    from .render import Status

    with inv.open() as store:
        inv.show(
            store.read(
                lambda view: Status(
                    store.status_tx(view),
                    store.metrics_tx(view),
                    (
                        ledger.totals_tx(view, store.queue)
                        if ledger.installed_tx(view)
                        else None
                    ),
                )
            )
        )
    return 0


def metrics(inv: Invocation) -> int:
    with inv.open() as store:
        inv.show(store.metrics_all() if inv["all"] else {store.queue: store.metrics()})
    return 0


def prune(inv: Invocation) -> int:
    with inv.open() as store:
        inv.show(store.prune(inv["older_than"]).to_dict())
    return 0


def dead(inv: Invocation) -> int:
    with inv.open() as store:
        inv.show(store.dead_letters())
    return 0


def listing(inv: Invocation) -> int:
    with inv.open() as store:
        inv.show(store.messages(inv["state"], limit=inv["limit"]))
    return 0


def purge(inv: Invocation) -> int:
    with inv.open() as store:
        state = inv["state"]
        # ask on a terminal; anywhere else refuse (a script says --yes)
        if not inv["yes"]:
            count = store.status().count(state)
            if not sys.stdin.isatty():
                raise UsageError(
                    f"purge would remove {count} {state} message(s); add --yes "
                    "(it asks only on a terminal)"
                )
            answer = input(
                f"remove {count} {state} message(s) from {store.where}? [y/N] "
            )
            if answer.strip().lower() not in ("y", "yes"):
                raise UsageError("purge: not confirmed; nothing was removed")
        inv.show({"purged": store.purge(state)})
    return 0


def create(inv: Invocation) -> int:
    from ..errors import InvalidQueue
    from ..queues import DEFAULT_QUEUE, settings

    # create's options are the queue's settings, each under the library's name
    given = {o.key: inv[o.key] for o in inv.command.options() if not o.positional}
    jitter = given["backoff_jitter"]
    try:  # the library's own checks, before the database is opened (or created)
        settings(
            inv["name"],
            # a jitter not given is the library's to choose: any valid one stands in
            **{**given, "backoff_jitter": jitter if jitter is not None else 0.0},
        )
    except InvalidQueue as exc:
        if exc.code != "invalid_setting":
            raise
        # one value the parser let through, refused with another: a usage error,
        # in the command line's words (the option for each setting it names)
        raise UsageError(inv.in_option_words(exc.message)) from None
    with inv.open(create=True, on=DEFAULT_QUEUE) as store:
        existed = store.queue_settings(inv["name"]) is not None
        made = store.create_queue(inv["name"], **given)
        inv.show({"created": not existed, **made.to_dict()})
    return 0


def queues(inv: Invocation) -> int:
    from ..queues import DEFAULT_QUEUE

    with inv.open(on=DEFAULT_QUEUE) as store:
        inv.show(store.queues())
    return 0


def redrive_chunk() -> int:
    """How many dead messages ``redrive --all`` moves per transaction (the library's)."""
    from ..claims import REDRIVE_CHUNK

    return REDRIVE_CHUNK


def redrive(inv: Invocation) -> int:
    with inv.open() as store:
        if inv["all"]:
            redriven = store.redrive_all(inv["code"])
        else:
            redriven = store.redrive(inv["event_ids"])
        inv.show({"redriven": redriven, "count": len(redriven)})
    return 0


def demo(inv: Invocation) -> int:
    from ..app.demo import run_demo

    inv.show(run_demo())
    return 0


def lab(inv: Invocation) -> int:
    from ..app.lab import STORIES, run_lab

    inv.show(run_lab([inv["case"]] if inv["case"] else STORIES))
    return 0
