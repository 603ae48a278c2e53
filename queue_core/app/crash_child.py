"""A real child process that dies inside a protocol transaction.

Part of the reference application, since ``queue-core demo`` shows a real
crash with it; also used by the crash tests, the crash matrix
(``proof.matrix``) and your own experiments:
``python -m queue_core.app.crash_child OPERATION DB ...`` opens the database with
a ``FaultPlan`` probe armed at one point, runs one write operation (enqueue,
claim, complete, fail, redrive, or a batch: claim_many, complete_many) and
dies there with ``os._exit(CODE)`` (no ``finally``, no ROLLBACK, no COMMIT) or
with SIGKILL. It is not part of the ``queue-core`` CLI, so no user reaches it
by accident. ``complete`` and ``complete_many`` run the reference
application's handler (``queue_core.ledger``).

    python -m queue_core.app.crash_child OPERATION DB ... --now T --point POINT [--hit N]

    OPERATION and its arguments, for example with POINT:
    enqueue       DB BATCH_FILE                         enqueue.after_insert
    claim         DB [--lease-seconds S]                claim.after_update
    complete      DB ID GEN ATTEMPT UNTIL [--category NAME]... [--receipts]
    fail          DB ID GEN ATTEMPT UNTIL --code CODE [--permanent]
    redrive       DB ID [ID...]                         redrive.after_update
    claim_many    DB --count K [--lease-seconds S]
    complete_many DB --lease ID:GEN:ATTEMPT:UNTIL [--lease ...]...
                  [--category NAME]... [--receipts]

A batch operation reaches its own points (``claim_many.after_begin``, ...) and,
inside its one transaction, the points of its messages' operation once per
message (``claim.after_update``, ``complete.after_effect``, ...): those are its
points too, and ``--hit N`` picks the N-th message that reaches one. The
leases of ``complete_many`` are completed in the order given.

``--trace`` (instead of ``--point``) runs the operation to its end and prints
every fault point of the operation it reached, in order: the crash matrix
learns from it where a child can die. ``--hit N`` dies at the N-th time the
point is reached (a batch reaches its messages' points once per message);
``--how sigkill`` sends SIGKILL to itself instead of calling ``os._exit``.
``complete --receipts`` (and ``complete_many --receipts``) completes under a
``receipts.ReceiptHandler`` (the operation is named by the payload's
``tenant`` and ``operation``: ``receipts.key_from_payload``).

Exit status: ``CRASH_EXIT_CODE`` when it died at the point by ``os._exit``
(the parent sees ``-SIGKILL`` for SIGKILL), ``NOT_REACHED_EXIT_CODE`` if the
operation finished without reaching the point (a wrong case, never a pass),
0 after ``--trace``, 2 for a usage error or a refused operation.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypedDict, Unpack

from ..clock import ModelClock
from ..errors import QueueError
from ..receipts import ReceiptHandler
from ..store import (
    BATCH_OPERATIONS,
    DEFAULT_LEASE_SECONDS,
    OPERATIONS,
    PROBE_POINTS,
    Store,
)
from ..testing.faults import FaultPlan, Tracer
from ..values import Lease
from .ledger import Handler, has_effect

CRASH_EXIT_CODE = 86
# the operation ran to its end: the point was never reached (a wrong case)
NOT_REACHED_EXIT_CODE = 3
HOWS = ("exit", "sigkill")


def points_of(operation: str) -> frozenset[str]:
    """The probe points ``operation`` may reach.

    Its own, and for a batch also those of its messages' operation.
    """
    if operation not in OPERATIONS:
        raise ValueError(
            f"unknown operation {operation!r}; known: {', '.join(OPERATIONS)}"
        )
    prefixes: tuple[str, ...] = (f"{operation}.",)
    if operation in BATCH_OPERATIONS:
        prefixes += (f"{operation.removesuffix('_many')}.",)
    return frozenset(point for point in PROBE_POINTS if point.startswith(prefixes))


def lease_argument(lease: Lease) -> str:
    """A lease as the child's ``--lease`` takes it: ``ID:GEN:ATTEMPT:UNTIL:TOKEN``."""
    return (
        f"{lease.event_id}:{lease.generation}:{lease.attempt}:{lease.lease_until}"
        f":{lease.token}"
    )


def parse_lease_argument(text: str) -> Lease:
    """``ID:GEN:ATTEMPT:UNTIL:TOKEN`` back into a Lease (the ``type=`` of ``--lease``)."""
    parts = text.split(":")
    if len(parts) != 5 or not parts[0]:
        raise argparse.ArgumentTypeError(
            f"a lease is ID:GEN:ATTEMPT:UNTIL:TOKEN, got {text!r}"
        )
    try:
        generation, attempt, lease_until, token = (int(part) for part in parts[1:])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a lease's GEN, ATTEMPT, UNTIL and TOKEN are integers, got {text!r}"
        ) from None
    return Lease(parts[0], generation, attempt, lease_until, token)


@dataclass(frozen=True)
class ChildOptions:
    """What a crashing child does besides its operation, each field checked once.

    :param now: the model time the child runs at, in whole seconds (0 or more).
    :param point: the fault point to die at (``None`` only with ``trace``).
    :param how: ``"exit"`` (``os._exit``) or ``"sigkill"``.
    :param hit: die at the N-th time the point is reached (1 or more).
    :param trace: do not die: print the fault points reached, in order.
    :param batch: ``enqueue``'s batch file.
    :param lease: the lease of ``complete``, ``fail``, ``extend`` or ``release``.
    :param leases: ``complete_many``'s leases, completed in that order.
    :param count: ``claim_many``'s count.
    :param lease_seconds: the lease length of ``claim``, ``claim_many`` and
        ``extend``.
    :param code: ``fail``'s code; ``permanent`` makes it a permanent failure.
    :param event_ids: ``redrive``'s event ids.
    :param categories: categories the ledger's handler also accepts.
    :param receipts: ``complete`` or ``complete_many`` under a ``ReceiptHandler``.
    """

    now: int
    point: str | None = None
    how: str = "exit"
    hit: int = 1
    trace: bool = False
    batch: str | Path | None = None
    lease: Lease | None = None
    leases: Iterable[Lease] = ()
    count: int | None = None
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    code: str | None = None
    permanent: bool = False
    event_ids: Iterable[str] = ()
    categories: Iterable[str] = ()
    receipts: bool = False

    def __post_init__(self) -> None:
        for name in ("now", "hit", "count", "lease_seconds"):
            value = getattr(self, name)
            if name == "count" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
            if value < (0 if name == "now" else 1):
                least = 0 if name == "now" else 1
                raise ValueError(f"{name} must be {least} or more, got {value}")
        if self.how not in HOWS:
            raise ValueError(f"how must be one of {', '.join(HOWS)}, got {self.how!r}")
        for name in ("leases", "event_ids", "categories"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"{name} must be a collection, got the string {value!r}")
            object.__setattr__(self, name, tuple(value))  # frozen: a tuple of its own
        if self.lease is not None and not isinstance(self.lease, Lease):
            raise TypeError(f"lease must be a Lease, got {type(self.lease).__name__}")
        if not all(isinstance(one, Lease) for one in self.leases):
            raise TypeError("leases must hold Lease values")


class ChildFields(TypedDict, total=False):
    """``ChildOptions``' fields, as keyword arguments of ``child_command``."""

    now: int
    point: str | None
    how: str
    hit: int
    trace: bool
    batch: str | Path | None
    lease: Lease | None
    leases: Iterable[Lease]
    count: int | None
    lease_seconds: int
    code: str | None
    permanent: bool
    event_ids: Iterable[str]
    categories: Iterable[str]
    receipts: bool


def child_options(options: ChildOptions | None, given: ChildFields) -> ChildOptions:
    """``options``, or the ``ChildOptions`` that its fields given as keywords make."""
    unknown = sorted(set(given) - {f.name for f in fields(ChildOptions)})
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    if options is None:
        if "now" not in given:
            raise TypeError("a child needs now= (its model time, in seconds)")
        return ChildOptions(**given)
    if not isinstance(options, ChildOptions):
        raise TypeError(f"options must be ChildOptions, got {type(options).__name__}")
    if given:
        raise TypeError(
            f"give options or its fields as keywords, not both: got {', '.join(given)}"
        )
    return options


def child_command(
    db: str | Path,
    operation: str,
    options: ChildOptions | None = None,
    **given: Unpack[ChildFields],
) -> list[str]:
    """The command line of a child that runs ``operation`` and dies at ``point``.

    ``options`` is a ``ChildOptions``, or give its fields as keywords
    (``now=1000, point="complete.after_effect", lease=lease``). With
    ``trace=True`` instead of a point, the child runs the operation to its
    end and prints the fault points it reached, one per line, in order.
    With ``receipts=True``, ``complete`` (or ``complete_many``) runs under a
    ``ReceiptHandler``. ``claim_many`` needs ``count``, ``complete_many`` its
    ``leases`` (completed in that order).
    """
    o = child_options(options, given)
    if operation not in OPERATIONS:
        raise ValueError(
            f"unknown operation {operation!r}; known: {', '.join(OPERATIONS)}"
        )
    if o.receipts and operation not in ("complete", "complete_many"):
        raise ValueError("receipts=True applies only to complete and complete_many")
    command = [sys.executable, "-m", "queue_core.app.crash_child", operation, str(db)]
    command += _operation_arguments(operation, o)
    command += ["--now", str(o.now)]
    if o.trace:
        return command + ["--trace"]
    if o.point is None:
        raise ValueError("a crashing child needs point=...")
    return command + ["--point", o.point, "--hit", str(o.hit), "--how", o.how]


def _operation_arguments(operation: str, o: ChildOptions) -> list[str]:
    """The arguments of ``operation`` on the child's command line."""
    command: list[str] = []
    if operation == "enqueue":
        if o.batch is None:
            raise ValueError("enqueue needs batch=PATH")
        command.append(str(o.batch))
    elif operation == "claim":
        command += ["--lease-seconds", str(o.lease_seconds)]
    elif operation == "claim_many":
        if o.count is None:
            raise ValueError("claim_many needs count=K")
        command += ["--count", str(o.count), "--lease-seconds", str(o.lease_seconds)]
    elif operation == "complete_many":
        batch_leases = list(o.leases)
        if not batch_leases:
            raise ValueError("complete_many needs leases=[Lease(...), ...]")
        for one in batch_leases:
            command += ["--lease", lease_argument(one)]
        for name in o.categories:
            command += ["--category", name]
        if o.receipts:
            command.append("--receipts")
    elif operation in ("complete", "fail", "extend", "release"):
        lease = o.lease
        if lease is None:
            raise ValueError(f"{operation} needs lease=Lease(...)")
        command += [
            lease.event_id,
            str(lease.generation),
            str(lease.attempt),
            str(lease.lease_until),
            "--token",
            str(lease.token),
        ]
        if operation == "extend":
            command += ["--lease-seconds", str(o.lease_seconds)]
        elif operation == "release":
            pass
        elif operation == "complete":
            for name in o.categories:
                command += ["--category", name]
            if o.receipts:
                command.append("--receipts")
        else:
            if not o.code:
                raise ValueError("fail needs code=...")
            command += ["--code", o.code] + (["--permanent"] if o.permanent else [])
    else:  # redrive
        ids = list(o.event_ids)
        if not ids:
            raise ValueError("redrive needs event_ids=[...]")
        command += ids
    return command


def run_crashing(
    db: str | Path,
    operation: str,
    options: ChildOptions | None = None,
    *,
    capture: bool = False,
    **given: Unpack[ChildFields],
) -> int:
    """Run ``operation`` in a child that dies at ``point``; return its exit status.

    ``options`` and ``given`` are those of ``child_command``. The status is ``CRASH_EXIT_CODE``
    for ``how="exit"`` and ``-signal.SIGKILL`` for ``how="sigkill"``.
    With ``capture``, the child's output is swallowed (the crash matrix runs many).
    """
    command = child_command(db, operation, options, **given)
    output = subprocess.DEVNULL if capture else None
    return subprocess.run(command, check=False, stdout=output, stderr=output).returncode


def run_crashing_completion(
    db: str | Path,
    lease: Lease,
    now: int,
    point: str = "complete.after_effect",
    how: str = "exit",
) -> int:
    """Complete ``lease`` in a child that dies at ``point``; return its exit status."""
    return run_crashing(db, "complete", lease=lease, now=now, point=point, how=how)


def _die(how: str) -> None:
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(CRASH_EXIT_CODE)


def _plan(point: str, hit: int, how: str) -> FaultPlan:
    reached = 0

    def action() -> None:
        nonlocal reached
        reached += 1
        if reached == hit:
            _die(how)

    return FaultPlan().arm(point, action)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--now", type=int, required=True, help="model time in whole seconds"
    )
    common.add_argument("--point", help="fault point, e.g. complete.after_effect")
    common.add_argument(
        "--trace",
        action="store_true",
        help="do not die: run it, print the fault points it reached, in order",
    )
    common.add_argument(
        "--hit", type=int, default=1, help="die at the N-th time the point is reached"
    )
    common.add_argument("--how", choices=HOWS, default="exit")

    parser = argparse.ArgumentParser(
        prog="python -m queue_core.app.crash_child",
        description="Run one write operation and die at a fault point.",
    )
    ops = parser.add_subparsers(dest="operation", required=True)
    enqueue = ops.add_parser("enqueue", parents=[common])
    enqueue.add_argument("db", type=Path)
    enqueue.add_argument("batch", type=Path)
    claim = ops.add_parser("claim", parents=[common])
    claim.add_argument("db", type=Path)
    claim.add_argument("--lease-seconds", type=int, default=DEFAULT_LEASE_SECONDS)
    for name in ("complete", "fail", "extend", "release"):
        op = ops.add_parser(name, parents=[common])
        op.add_argument("db", type=Path)
        op.add_argument("event_id")
        op.add_argument("generation", type=int)
        op.add_argument("attempt", type=int)
        op.add_argument("lease_until", type=int)
        op.add_argument("--token", type=int, default=0)
        if name == "extend":
            op.add_argument("--lease-seconds", type=int, default=DEFAULT_LEASE_SECONDS)
        elif name == "release":
            pass
        elif name == "complete":
            op.add_argument(
                "--category",
                action="append",
                default=[],
                help="also accept this category",
            )
            op.add_argument(
                "--receipts",
                action="store_true",
                help="complete under a ReceiptHandler "
                "(tenant and operation from the payload)",
            )
        else:
            op.add_argument("--code", required=True)
            op.add_argument("--permanent", action="store_true")
    redrive = ops.add_parser("redrive", parents=[common])
    redrive.add_argument("db", type=Path)
    redrive.add_argument("event_ids", nargs="+")
    claim_many = ops.add_parser("claim_many", parents=[common])
    claim_many.add_argument("db", type=Path)
    claim_many.add_argument(
        "--count", type=int, required=True, help="lease up to K messages"
    )
    claim_many.add_argument("--lease-seconds", type=int, default=DEFAULT_LEASE_SECONDS)
    complete_many = ops.add_parser("complete_many", parents=[common])
    complete_many.add_argument("db", type=Path)
    complete_many.add_argument(
        "--lease",
        dest="leases",
        action="append",
        type=parse_lease_argument,
        required=True,
        metavar="ID:GEN:ATTEMPT:UNTIL",
        help="a lease to complete (repeatable; completed in this order)",
    )
    complete_many.add_argument(
        "--category", action="append", default=[], help="also accept this category"
    )
    complete_many.add_argument(
        "--receipts",
        action="store_true",
        help="complete under a ReceiptHandler (tenant and operation from the payload)",
    )
    return parser


def _handler(categories: Sequence[str], receipts: bool) -> Handler | ReceiptHandler:
    handler = Handler.with_categories(categories)
    return ReceiptHandler(handler, effect_exists=has_effect) if receipts else handler


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    tracer = Tracer()
    probe: Tracer | FaultPlan
    if args.trace:
        probe = tracer
    elif args.point not in points_of(args.operation):
        print(
            f"{args.point!r} is not a fault point of {args.operation}", file=sys.stderr
        )
        return 2
    elif args.hit < 1:
        print("--hit must be 1 or more", file=sys.stderr)
        return 2
    else:
        probe = _plan(args.point, args.hit, args.how)
    try:
        # Closed at the end of a run that did not die; a child that dies leaves its
        # connection (and its uncheckpointed WAL) behind, as a crashed process does.
        with Store(
            args.db, clock=ModelClock(args.now), create=False, probe=probe
        ) as store:
            _run(store, args)
    # ValueError: a count or lease the store refuses
    except (QueueError, ValueError) as exc:
        print(
            f"{args.operation} refused: "
            f"{getattr(exc, 'code', 'invalid_argument')}: {exc}",
            file=sys.stderr,
        )
        return 2
    if args.trace:
        mine = points_of(args.operation)
        print("\n".join(point for point in tracer.reached if point in mine))
        return 0
    return NOT_REACHED_EXIT_CODE  # reached only if the fault point was never hit


def _run(store: Store, args: argparse.Namespace) -> None:
    if args.operation == "enqueue":
        store.enqueue(args.batch.read_bytes())
    elif args.operation == "claim":
        store.claim(args.lease_seconds)
    elif args.operation == "claim_many":
        store.claim_many(args.count, args.lease_seconds)
    elif args.operation == "complete_many":
        store.complete_many(args.leases, _handler(args.category, args.receipts))
    elif args.operation in ("complete", "fail", "extend", "release"):
        lease = Lease(
            args.event_id, args.generation, args.attempt, args.lease_until, args.token
        )
        if args.operation == "extend":
            store.extend(lease, args.lease_seconds)
        elif args.operation == "release":
            store.release(lease)
        elif args.operation == "complete":
            store.complete(lease, _handler(args.category, args.receipts))
        else:
            store.fail(lease, args.code, permanent=args.permanent)
    else:
        store.redrive(args.event_ids)


if __name__ == "__main__":
    sys.exit(main())
