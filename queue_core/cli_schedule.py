"""``queue-core schedule``: a periodic job from the command line, once or ``--forever``.

Each period's message is printed as one JSON line as it is enqueued
(``accepted`` 1 when this scheduler stored it, ``duplicates`` 1 when another
had). SIGTERM and Ctrl-C stop it between two periods, as they stop
``work --forever``.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from .cli_parser import UsageError
from .cli_work import stopping_on_signals
from .schedules import Period, Schedule, run_schedule
from .store import Store


def check_options(args: argparse.Namespace) -> None:
    """Refuse options that cannot go together, before any database is opened."""
    if args.forever and getattr(args, "now", None) is not None:
        raise UsageError(
            "--forever waits on the system clock; --now enqueues one period at that time"
        )


def schedule_command(store: Store, args: argparse.Namespace, out: TextIO) -> int:
    """Run ``queue-core schedule`` on ``store``; the exit status."""
    schedule = Schedule(args.name, args.every, args.payload, args.priority)

    def show(period: Period) -> None:
        out.write(json.dumps(period.to_dict(), sort_keys=True) + "\n")
        out.flush()  # a service's log sees each period as it happens

    with stopping_on_signals() as stopping:
        run_schedule(
            store, schedule, forever=args.forever, stop=stopping.stop, on_period=show
        )
    return stopping.exit_status
