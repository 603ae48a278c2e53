"""``queue-core``: the command line over the queue, run from the command table.

Exit status: 0 success, 2 rejected input or usage error, 1 anything else, 130
interrupted. An expected error prints one line ``queue-core: <code>: <what is
wrong>`` on stderr and never a traceback; a usage error has the code ``usage``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from ..errors import BatchRejected, QueueError
from .spec import PROG, Invocation, UsageError
from .parser import build_parser, refuse_global_options
from .spec import Needs
from .table import BY_NAME


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
        command = BY_NAME[args.command]
        refuse_global_options(command, args)
        invocation = Invocation(command, args, out)
        check_rules(invocation)  # before any database is opened
        return command.run(invocation)
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
            import traceback

            traceback.print_exc(file=err)
        else:
            print(f"{PROG}: set QUEUE_CORE_DEBUG=1 to see the traceback", file=err)
        return 1


def check_rules(invocation: Invocation) -> None:
    """The command's rules between two options (``Needs``, ``Excludes``), in their order."""
    for rule in invocation.command.rules:
        if isinstance(rule, Needs):
            broken = invocation.given(rule.option) and not invocation.given(rule.needs)
        else:
            broken = invocation.given(rule.option) and invocation.given(rule.other)
        if broken:
            raise UsageError(rule.message)
