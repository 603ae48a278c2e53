"""The command table: every command of ``queue-core``, one entry each (its
arguments, its library call, its output), and the global options.

The parser, the shell completion, the CLI reference page and README's table of
commands are made from ``COMMANDS``. The entries are written beside the
commands like them (``commands_messages``: what moves messages;
``commands_queues``: what reads or sets up a queue; here: what runs in its own
folder, and ``completion``). Rules between two options (``Needs``, ``Excludes``)
are checked before any database is opened; what the library refuses it refuses
itself, with its code. A command's arguments are a function, called when the
command is used: it reads the library's defaults and bounds then, so importing
the table (and ``queue-core --help``) imports none of the library's modules;
each call (``calls``) imports what it uses when it runs.
"""

from __future__ import annotations

from typing import Final

from . import calls, render, types
from .commands_messages import ENQUEUE, PRUNE, PURGE, REDRIVE, SCHEDULE, WORK
from .commands_queues import CREATE, DEAD, LIST, METRICS, QUEUES, STATUS
from .facts import BUSY_RETRY_SECONDS, DEFAULT_QUEUE, LAB_CASES
from .spec import DEFAULT_DB, Command, Invocation, Option, Output

# Accepted before or after the command's name, by every command that opens a queue.
GLOBAL_OPTIONS: Final = (
    Option(
        "--db",
        metavar="PATH",
        help=f"queue database file (default: {DEFAULT_DB} in the working directory), "
        "or a postgresql:// URL",
        complete="file",
    ),
    Option(
        "--queue",
        metavar="NAME",
        type=types.parse_queue_name,
        help=f"the queue to work on (default: {DEFAULT_QUEUE}); create makes one",
    ),
    Option(
        "--now",
        metavar="SECONDS",
        type=types.parse_seconds,
        help="model time in whole seconds instead of the system clock",
    ),
    Option(
        "--busy-timeout",
        metavar="SECONDS",
        type=types.parse_busy_seconds,
        help="how long to wait for a database that another writer holds before "
        f"failing with database_busy (default: {BUSY_RETRY_SECONDS:g}; 0: do not wait)",
    ),
)
# demo and lab: the global options would be ignored, so they are refused
OWN_FOLDER: Final = "it makes its own temporary folder and model clock"


DEMO = Command(
    "demo",
    "run the reference demo in a temporary folder",
    about="the reference demo in a temporary folder, including a real child process "
    "that dies between INSERT and COMMIT",
    run=calls.demo,
    output=Output(
        ("table", "json"), table=render.demo_text, json=lambda result: result.to_dict()
    ),
    own_folder=OWN_FOLDER,
    see="demo.md",
)


LAB = Command(
    "lab",
    "the delivery lab: one job on an at-least-once broker, step by step",
    about="the delivery lab: "
    + ", ".join(f"`{case}`" for case in LAB_CASES[:-1])
    + f" (and `{LAB_CASES[-1]}`), the state after every step",
    run=calls.lab,
    arguments=lambda: (
        Option(
            "case",
            nargs="?",
            choices=LAB_CASES,
            metavar="CASE",
            help=f"one story ({', '.join(LAB_CASES)}); "
            "default: the four delivery stories",
            complete="choices",
        ),
    ),
    output=Output(("table", "json"), table=render.lab_text, json=render.lab_json),
    own_folder=OWN_FOLDER,
    see="lab.md",
)


def _print_completion(inv: Invocation) -> int:
    """``completion``'s call: the script for the shell named, from this table."""
    from .completion import script

    inv.out.write(script(inv["shell"], COMMANDS, GLOBAL_OPTIONS))
    return 0


COMPLETION = Command(
    "completion",
    "print the shell completion script for bash or zsh",
    about="print a script that completes `queue-core`'s commands and options in bash "
    "or zsh: `source <(queue-core completion bash)`",
    run=_print_completion,
    arguments=lambda: (
        Option(
            "shell",
            choices=("bash", "zsh"),
            metavar="SHELL",
            help="bash or zsh",
            complete="choices",
        ),
    ),
    own_folder="it prints a script and opens no database",
    see="reference/cli.md#shell-completion",
)


# In the order of queue-core --help.
COMMANDS: Final = (
    ENQUEUE,
    SCHEDULE,
    WORK,
    STATUS,
    METRICS,
    PRUNE,
    DEAD,
    LIST,
    PURGE,
    CREATE,
    QUEUES,
    REDRIVE,
    DEMO,
    LAB,
    COMPLETION,
)
BY_NAME: Final = {command.name: command for command in COMMANDS}
