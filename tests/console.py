"""Execute the shell sessions shown in README and on the site.

A session is a fenced block of type ``console``: lines starting with ``$ ``
are commands, the lines after them are what the command prints (stdout, then
stderr), and ``[exit N]`` closes the output of a command that exits non-zero.
Only ``queue-core`` commands may appear, so that nothing shown goes unexecuted.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>[ \t]*)```+ *\{?\.?console[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
EXIT = re.compile(r"^\[exit (\d+)\]$")


@dataclass(frozen=True)
class Command:
    line: str
    expected: str
    expected_status: int


def sessions(markdown: str) -> list[list[Command]]:
    """Every console block of a markdown text, parsed into commands."""
    found = []
    for match in FENCE.finditer(markdown):
        indent = len(match.group("indent"))
        body = [raw[indent:] for raw in match.group("body").splitlines()]
        commands: list[Command] = []
        current: str | None = None
        output: list[str] = []
        status = 0
        for text in body + ["$ <end>"]:
            if text.startswith("$ "):
                if current is not None:
                    commands.append(Command(current, "\n".join(output), status))
                current, output, status = text[2:], [], 0
            elif (exit_line := EXIT.match(text)) is not None:
                status = int(exit_line.group(1))
            else:
                output.append(text)
        found.append(commands)
    return found


def run(command: Command, cwd: Path) -> tuple[str, int]:
    argv = shlex.split(command.line)
    if argv[0] != "queue-core":
        raise AssertionError(f"only queue-core commands may be shown in a session: {command.line!r}")
    result = subprocess.run([sys.executable, "-m", "queue_core", *argv[1:]], cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    return (result.stdout + result.stderr).rstrip("\n"), result.returncode
