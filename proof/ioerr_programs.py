"""The Python-API programs of an I/O-error run: ``python -m proof.ioerr_programs ...``.

* ``enqueue DB NOW BATCH``: ``Store.enqueue`` of a JSONL file; prints
  ``enqueued`` once the call returned;
* ``work DB NOW LEASE``: ``Store.claim`` and ``Store.complete`` with the
  ledger's handler until nothing is ready; prints each event id once its
  completion returned ``done``.

Either prints ``CODE: MESSAGE`` on stderr and exits 1 when a ``QueueError``
comes: the error ends the program, which closes its store (its connection
was already discarded by the store). ``--ignore`` (after the program's
name) is the negative control: a careless wrapper that catches
``StorageError``, says the operation succeeded and goes on.
"""

from __future__ import annotations

import sys
from pathlib import Path

from queue_core import ledger
from queue_core.clock import ModelClock
from queue_core.errors import QueueError, StorageError
from queue_core.store import Store
from queue_core.values import Outcome


def enqueue(db: str, now: int, batch: str, *, ignore: bool) -> int:
    with Store(Path(db), clock=ModelClock(now), create=False) as store:
        try:
            store.enqueue(Path(batch).read_text(encoding="utf-8"))
        except StorageError:
            if not ignore:
                raise
        print("enqueued", flush=True)
    return 0


def work(db: str, now: int, lease_seconds: int, *, ignore: bool) -> int:
    handler = ledger.Handler()
    with Store(Path(db), clock=ModelClock(now), create=False) as store:
        while True:
            try:
                lease = store.claim(lease_seconds)
            except QueueError as exc:
                raise Failed(exc, "a claim") from exc
            if lease is None:
                return 0
            try:
                done = store.complete(lease, handler).outcome == Outcome.DONE
            except StorageError as exc:
                if not ignore:
                    raise Failed(exc, f"the completion of {lease.event_id}") from exc
                done = True  # the careless wrapper: the error is swallowed
            if done:
                print(lease.event_id, flush=True)


class Failed(Exception):
    """A ``QueueError`` and the step it came from (said on stderr)."""

    def __init__(self, error: QueueError, step: str) -> None:
        super().__init__(f"{error.code}: {error.message} (during {step})")


def main(argv: list[str]) -> int:
    ignore = argv[1:2] == ["--ignore"]
    args = [argv[0], *argv[2:]] if ignore else argv
    try:
        if args[:1] == ["enqueue"] and len(args) == 4:
            return enqueue(args[1], int(args[2]), args[3], ignore=ignore)
        if args[:1] == ["work"] and len(args) == 4:
            return work(args[1], int(args[2]), int(args[3]), ignore=ignore)
    except QueueError as exc:
        print(f"{exc.code}: {exc.message}", file=sys.stderr, flush=True)
        return 1
    except Failed as exc:
        print(exc, file=sys.stderr, flush=True)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
