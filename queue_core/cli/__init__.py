"""``queue-core``: the command line over the queue (``python -m queue_core`` is the same).

Every command is one entry of ``table.COMMANDS``: its arguments, its library
call (``calls``) and its output, printed through one renderer (``render``:
``--format table|json``). The parser (``parser``), the shell completion
(``completion``) and the CLI reference are made from that table. ``run.main``
runs a command and turns the library's coded errors into
``queue-core: <code>: <message>`` and the exit status.
"""

from __future__ import annotations

from .spec import DEFAULT_DB, UsageError
from .parser import EXAMPLE_LINE, HELP_WIDTH, build_parser
from .run import main

__all__ = [
    "DEFAULT_DB",
    "EXAMPLE_LINE",
    "HELP_WIDTH",
    "UsageError",
    "build_parser",
    "main",
]
