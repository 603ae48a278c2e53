"""``queue-core``'s parser, made from the command table (``table.COMMANDS``).

The help has a fixed width (``HELP_WIDTH``) so that it reads the same in every
terminal and on the site, which prints it from here. Each command's own
arguments are added to its parser when that command is used (parsed, or its
help shown): ``queue-core status`` builds no other command's options and
reads no other command's constants.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from typing import Any, NoReturn

from .. import __version__
from .facts import LEDGER_CATEGORIES, MAX_AMOUNT_CENTS, MIN_AMOUNT_CENTS
from .spec import DEFAULT_DB, PROG, UsageError
from .spec import Command, OneOf, Option
from .table import COMMANDS, GLOBAL_OPTIONS, OWN_FOLDER

__all__ = ["DEFAULT_DB", "EXAMPLE_LINE", "HELP_WIDTH", "UsageError", "build_parser"]

EXAMPLE_LINE = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 1250}}'
)
HELP_WIDTH = 80  # fixed, so that the help is the same in every terminal and on the site
GLOBAL_NAMES = tuple(option.name for option in GLOBAL_OPTIONS)
# demo and lab: their own temporary folder and model clock
OWN_FOLDER_COMMANDS = tuple(c.name for c in COMMANDS if c.own_folder == OWN_FOLDER)
# the --json that --format replaced, kept as its alias
JSON_ALIAS = "the same as --format json (its name before --format existed)"


def _help_epilog() -> str:
    """What a user needs before the first ``enqueue``.

    The batch format, the handler's rules, the exit status.
    """
    categories = ", ".join(LEDGER_CATEGORIES)
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
        f'{" and ".join(OWN_FOLDER_COMMANDS)} run in a temporary folder of their own '
        f'with a model clock: they take none of {", ".join(GLOBAL_NAMES)}.',
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

    The usage line, then ``queue-core: usage: <problem>``. Every parser has the
    fixed-width formatter, the parents of the global options too: argparse makes
    a formatter for each argument it adds, and its own asks ``shutil`` for the
    terminal's width (importing ``shutil``, and with it ``bz2`` and ``lzma``).
    """

    def __init__(self, *args: Any, **settings: Any) -> None:
        settings.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **settings)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: usage: {message}\n")


class _ProgramParser(_Parser):
    """``queue-core`` itself: its description and epilog are written when its help is."""

    def format_help(self) -> str:
        if self.epilog is None:
            self.description = textwrap.fill(
                "A reliable local message queue on SQLite: lease, fencing, "
                "effect + ACK in one transaction.",
                HELP_WIDTH - 2,
            )
            self.epilog = _help_epilog()
        return super().format_help()


class _CommandParser(_Parser):
    """A command's parser, made at its first use.

    argparse makes every command's parser when the program starts, and each
    costs about a millisecond (its gettext look-ups, its groups, its options):
    more than all the rest of ``queue-core --help``. So ``add_parser`` only
    records what to make; the parser itself and the command's arguments are
    made when it is first used: the first attribute asked of it (to parse, for
    its usage or its help, argparse reads its own attributes first).
    """

    def __init__(
        self,
        *,
        command: Command,
        shared: Callable[[Command], argparse.ArgumentParser],
        **settings: Any,
    ) -> None:
        self.__dict__["_pending"] = (command, shared, settings)

    def _made(self) -> None:
        pending = self.__dict__.pop("_pending", None)
        if pending is not None:
            command, shared, settings = pending
            super().__init__(parents=[shared(command)], **settings)
            add_arguments(self, command)

    def __getattr__(self, name: str) -> Any:
        if "_pending" not in self.__dict__:
            raise AttributeError(name)
        self._made()
        return getattr(self, name)


def _help_text(option: Option) -> str:
    return option.help() if callable(option.help) else option.help


def _add(target: Any, option: Option) -> None:
    """``option`` on a parser or a group, as argparse takes it."""
    settings: dict[str, Any] = {"help": _help_text(option) or None}
    if option.flag:
        settings["action"] = "store_true"
    elif option.repeat:
        settings["action"] = "append"
    if option.metavar is not None:
        settings["metavar"] = option.metavar
    if option.type is not None:
        settings["type"] = option.type
    if option.choices is not None:
        settings["choices"] = option.choices
    if option.nargs is not None:
        settings["nargs"] = option.nargs
    if option.positional:
        if option.default is not None:
            settings["default"] = option.default
        target.add_argument(option.name, **settings)
        return
    if option.repeat:
        settings["default"] = []
    elif not option.flag:
        settings["default"] = option.default
    if option.required:
        settings["required"] = True
    if option.dest is not None:
        settings["dest"] = option.dest
    target.add_argument(option.name, **settings)


def add_arguments(parser: argparse.ArgumentParser, command: Command) -> None:
    """The command's own arguments, then its output's ``--format`` (and ``--json``)."""
    for argument in command.arguments():
        if isinstance(argument, OneOf):
            group = parser.add_mutually_exclusive_group(required=argument.required)
            for option in argument.options:
                _add(group, option)
        else:
            _add(parser, argument)
    output = command.output
    if output is None or len(output.formats) < 2:
        return
    shown = parser.add_mutually_exclusive_group()
    for option in command.beside_format:
        _add(shown, option)
    formats = " or ".join(output.formats)
    about = f"; {output.about}" if output.about else ""
    shown.add_argument(
        "--format",
        choices=output.formats,
        default=None,
        help=f"print {formats} (default: {output.default}){about}",
    )
    shown.add_argument("--json", action="store_true", help=JSON_ALIAS)


def _global_options(leave_out: frozenset[str] = frozenset()) -> argparse.ArgumentParser:
    """The global options, as a parent parser, but for those in ``leave_out``."""
    made = _Parser(add_help=False)
    for option in GLOBAL_OPTIONS:
        if option.name in leave_out:
            continue
        settings: dict[str, Any] = {
            "metavar": option.metavar,
            "help": _help_text(option),
        }
        if option.type is not None:
            settings["type"] = option.type
        made.add_argument(option.name, default=argparse.SUPPRESS, **settings)
    return made


def build_parser() -> argparse.ArgumentParser:
    # Global options are accepted before or after the command name.
    common = _global_options()

    def shared(command: Command) -> argparse.ArgumentParser:
        """A command's parent: the global options; those it takes as its own (an
        entry may, say a repeatable --queue) are its own alone; and for a command
        with its own folder, or none, the global options only to be refused."""
        if command.own_folder:
            refused = _Parser(add_help=False)
            for name in GLOBAL_NAMES:
                refused.add_argument(
                    name, default=argparse.SUPPRESS, help=argparse.SUPPRESS
                )
            return refused
        own = frozenset(option.name for option in command.options())
        return _global_options(own) if own & set(GLOBAL_NAMES) else common

    parser = _ProgramParser(prog=PROG, parents=[common], formatter_class=_Formatter)
    parser.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {__version__}",
        help="print the version and exit",
    )
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_CommandParser
    )
    for command in COMMANDS:
        commands.add_parser(
            command.name,
            help=command.summary,
            command=command,
            shared=shared,
            formatter_class=_Formatter,
        )
    return parser


def refuse_global_options(command: Command, args: argparse.Namespace) -> None:
    """A command with its own folder (demo, lab) or none (completion) takes no global option.

    One given would be ignored, so it is refused.
    """
    given = [name for name in GLOBAL_NAMES if hasattr(args, name[2:].replace("-", "_"))]
    if command.own_folder and given:
        raise UsageError(
            f"{command.name} does not take {' or '.join(given)}: {command.own_folder}"
        )
