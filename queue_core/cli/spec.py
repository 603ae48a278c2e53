"""The words the command table is written in: an option, a choice of options, a rule
between two options, a command's output, the command itself, and one run of it.

A ``Command`` is one entry of ``table.COMMANDS``: its arguments, the library
call that runs it (``run``, given an ``Invocation``) and its output (the
formats it prints in). An ``Invocation`` is what the call receives: the
arguments given, the store it opens when it needs one and not before (what
is refused without a database is refused before one is opened, or created),
and ``show``, the one way a command prints. The parser (``parser``), the
shell completion (``completion``) and the reference documentation are made
from the entries alone. They are named tuples, not dataclasses: every start of
``queue-core`` defines them, and a dataclass costs several times more to
define.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO, Union

from ..errors import QueueError
from .render import PROG as PROG  # the program's name, as it prints it

if TYPE_CHECKING:
    from ..clock import Clock
    from ..store import Store

DEFAULT_DB = "queue.sqlite3"


class UsageError(QueueError):
    """The command line was used wrongly: exit 2.

    An unknown option, a missing argument, or no command at all.
    """

    code = "usage"
    exit_status = 2


class Option(NamedTuple):
    """One argument: ``--name`` (an option) or ``name`` (a positional argument).

    ``dest`` is the name the library gives the value, where it differs from
    the option's (``--backoff-base`` is ``backoff_base_seconds``).
    ``complete`` says what a shell may offer for its value: ``"file"``,
    ``"choices"``, or nothing.
    """

    name: str
    help: str | Callable[[], str]  # a function: text read only when the help is shown
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    default: Any = None
    dest: str | None = None
    flag: bool = False  # takes no value: true when given
    repeat: bool = False  # may be given again; the values in a list
    choices: tuple[str, ...] | None = None
    required: bool = False
    nargs: str | None = None  # a positional's count: "?" or "*"
    complete: str | None = None

    @property
    def positional(self) -> bool:
        return not self.name.startswith("-")

    @property
    def key(self) -> str:
        """Where the parsed value is kept (argparse's ``dest``)."""
        if self.dest is not None:
            return self.dest
        return self.name.lstrip("-").replace("-", "_")


class OneOf(NamedTuple):
    """Options of which at most one may be given (exactly one when ``required``)."""

    options: tuple[Option, ...]
    required: bool = False


Argument = Union[Option, OneOf]


class Needs(NamedTuple):
    """``option`` means something only with ``needs`` given too; otherwise ``message``."""

    option: str
    needs: str
    message: str


class Excludes(NamedTuple):
    """``option`` cannot go with ``other``; both given is ``message``."""

    option: str
    other: str
    message: str


Rule = Union[Needs, Excludes]


class Output(NamedTuple):
    """The formats a command prints in, the first the default (what it printed
    before ``--format`` existed).

    ``table`` and ``json`` turn the value the command shows into text and into
    a JSON value; either may be left to the renderer's general form
    (``render.fields`` and the value itself). ``text`` is a format of its own
    (Prometheus' exposition for ``metrics``). ``sorted_ascii_json``: JSON with
    its keys sorted and non-ASCII escaped, as ``schedule`` has always printed it.
    """

    formats: tuple[str, ...]
    table: Callable[[Any], str] | None = None
    json: Callable[[Any], Any] | None = None
    text: Callable[[Any], str] | None = None
    sorted_ascii_json: bool = False
    about: str = ""  # what each format prints, for --format's help

    @property
    def default(self) -> str:
        return self.formats[0]


class Command(NamedTuple):
    """One command of ``queue-core``: its arguments, its library call, its output.

    ``summary`` is the one line of ``queue-core --help``; ``about`` says more
    (what it prints, what it refuses) for the reference page and the README.
    ``reads_only``: the command only reads, so a database this process may not
    write is opened read-only. ``own_folder``: the command makes its own
    temporary folder and clock (or opens nothing), so the global options
    (``--db``, ``--now``...) are refused with ``own_folder`` as the reason.
    A command with an ``output`` of several formats takes ``--format`` (and
    ``--json``, the same as ``--format json``, its name before ``--format``),
    of which at most one goes with each option of ``beside_format``.
    A later option of the command line goes into an entry the same way: a
    repeatable one is ``repeat=True`` (its values a list), a new command a new
    entry with its call.
    """

    name: str
    summary: str
    about: str
    run: Callable[[Invocation], int]
    # built when the command is used: its options read the library's constants then
    arguments: Callable[[], tuple[Argument, ...]] = tuple
    rules: tuple[Rule, ...] = ()
    output: Output | None = None
    reads_only: bool = False
    own_folder: str | None = None
    beside_format: tuple[Option, ...] = ()  # in place of the output (work --quiet)
    see: str = ""  # the documentation page that explains it, from docs/

    def options(self) -> tuple[Option, ...]:
        """Every argument of the command, the choices' members included, in order."""
        found: list[Option] = []
        for argument in self.arguments():
            found += argument.options if isinstance(argument, OneOf) else (argument,)
        return tuple(found)


class Invocation:
    """A command and its parsed arguments, with where it prints."""

    def __init__(self, command: Command, args: argparse.Namespace, out: TextIO) -> None:
        self.command, self.args, self.out = command, args, out

    def __getitem__(self, key: str) -> Any:
        """The value of the argument kept under ``key`` (``Option.key``)."""
        return getattr(self.args, key)

    def given(self, name: str) -> bool:
        """Whether the option ``name`` (``--poll``) was given on the command line."""
        key = name.lstrip("-").replace("-", "_")
        for option in self.command.options():
            if option.name == name:
                key = option.key
        return getattr(self.args, key, None) not in (None, False, [])

    def in_option_words(self, message: str) -> str:
        """``message`` of the library with each of its names for a value the command
        takes as an option (``backoff_base_seconds``) written as that option
        (``--backoff-base``)."""
        for option in self.command.options():
            if option.dest is not None and not option.positional:
                message = re.sub(rf"\b{option.dest}\b", option.name, message)
        return message

    @property
    def target(self) -> str:
        """An SQLite file, or a postgresql:// URL: the store chooses the engine."""
        return str(getattr(self.args, "db", DEFAULT_DB))

    @property
    def queue(self) -> str:
        from ..queues import DEFAULT_QUEUE

        return str(getattr(self.args, "queue", DEFAULT_QUEUE))

    @property
    def clock(self) -> Clock | None:
        """``--now``'s model clock; without it the store takes the system clock (on
        PostgreSQL: the server's, one clock for every host)."""
        now = getattr(self.args, "now", None)
        if now is None:
            return None
        from ..clock import ModelClock

        return ModelClock(now)

    @property
    def format(self) -> str:
        """The format asked for (``--format``, or ``--json``), else the command's default."""
        output = self.command.output
        assert output is not None, f"{self.command.name} prints nothing"
        chosen = getattr(self.args, "format", None)
        if chosen is None and getattr(self.args, "json", False):
            chosen = "json"
        return chosen or output.default

    @property
    def format_given(self) -> bool:
        return getattr(self.args, "format", None) is not None or bool(
            getattr(self.args, "json", False)
        )

    def show(self, value: Any) -> None:
        """Print ``value``, what the command returns, in the format asked for: the one
        place a command's output is written (at once: a service's log sees it)."""
        output = self.command.output
        assert output is not None, f"{self.command.name} prints nothing"
        fmt = self.format
        if fmt == "json":
            import json

            shown = value if output.json is None else output.json(value)
            if output.sorted_ascii_json:
                text = json.dumps(shown, sort_keys=True) + "\n"
            else:
                text = json.dumps(shown, ensure_ascii=False) + "\n"
        elif fmt == "table":
            from .render import fields

            text = fields(value) if output.table is None else output.table(value)
        else:
            assert output.text is not None and fmt in output.formats, fmt
            text = output.text(value)
        self.out.write(text)
        self.out.flush()

    def open(self, create: bool = False, on: str | None = None) -> Store:
        """The store at ``--db`` on queue ``on`` (default: ``--queue``'s).

        A command that only reads opens a database this process may not write
        read-only, and says so on stderr. SQLite's own wait per attempt is never
        longer than the whole wait asked for (``--busy-timeout``).
        """
        # The command line runs the queue with its reference application: the
        # ledger's migration line is known before any database opens, so that an
        # older file moves the ledger's table along with the queue's own.
        from ..app import ledger  # noqa: F401  (registers its migration line)
        from ..engines import read_only_reason
        from ..errors import UnknownQueue, WrongPath
        from ..queues import DEFAULT_QUEUE
        from ..store import BUSY_RETRY_SECONDS, BUSY_TIMEOUT_MS, Store

        queue = self.queue if on is None else on
        busy: float = getattr(self.args, "busy_timeout", BUSY_RETRY_SECONDS)
        wait_ms = min(BUSY_TIMEOUT_MS, round(busy * 1000))
        try:
            reason = read_only_reason(self.target) if self.command.reads_only else None
            if reason is not None:  # it may only read: it reads, and says so
                print(
                    f"{PROG}: read-only: {reason}; reading without writing",
                    file=sys.stderr,
                )
                return Store.open_read_only(
                    self.target,
                    clock=self.clock,
                    queue=queue,
                    busy_timeout_ms=wait_ms,
                    busy_retry_seconds=busy,
                )
            return Store(
                self.target,
                clock=self.clock,
                create=create,
                queue=queue,
                busy_timeout_ms=wait_ms,
                busy_retry_seconds=busy,
            )
        except WrongPath as exc:
            if exc.code == "no_database" and queue != DEFAULT_QUEUE:
                raise UnknownQueue(
                    f"no queue {queue!r}: {exc.message}; create it first "
                    f"(queue-core create {queue})"
                ) from None
            raise
