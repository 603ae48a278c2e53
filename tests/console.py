"""Execute the shell sessions shown in README and on the site.

A session is a fenced block of type ``console``: lines starting with ``$ ``
are commands, the lines after them are what the command prints (stdout, then
stderr), and ``[exit N]`` closes the output of a command that exits non-zero.

Two kinds of command may appear, so that nothing shown goes unexecuted:

* ``queue-core ...``, run as ``python -m queue_core ...`` in the session's folder;
* a here-document that creates a file, exactly of the form::

      $ cat > NAME <<'EOF'
      the file's lines
      EOF

  ``NAME`` a plain file name (no folder, no path), the content the lines up
  to the line ``EOF``, written as bash would write them (each line ending in
  a newline). It prints nothing.

Anything else (another program, a pipe, a redirection, another here-document
form) is refused with an error naming the line.
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
# Anything that looks like a here-document is read as one (its lines are not
# output); only HEREDOC itself is then accepted by run().
HEREDOC_LIKE = re.compile(r"^cat\b.*<<")
HEREDOC = re.compile(r"^cat > (?P<name>\S+) <<'EOF'$")
HEREDOC_END = "EOF"
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
ALLOWED = "only `queue-core ...` and `cat > NAME <<'EOF'` may be shown in a session"


@dataclass(frozen=True)
class Command:
    line: str
    expected: str
    expected_status: int
    content: str | None = None  # a here-document's lines, each ending in "\n"
    error: str | None = None  # what is wrong with how the command is written


def sessions(markdown: str) -> list[list[Command]]:
    """Every console block of a markdown text, parsed into commands."""
    found = []
    for match in FENCE.finditer(markdown):
        indent = len(match.group("indent"))
        body = [raw[indent:] for raw in match.group("body").splitlines()]
        found.append(_commands(body))
    return found


def _commands(body: list[str]) -> list[Command]:
    commands: list[Command] = []
    index = 0
    while index < len(body):
        text = body[index]
        index += 1
        if not text.startswith("$ "):
            continue  # text before the first command: not part of any command's output
        line, content, error = text[2:], None, None
        if HEREDOC_LIKE.match(line):
            try:
                end = body.index(HEREDOC_END, index)
            except ValueError:
                end, error = len(body), f"the here-document of {line!r} has no closing line {HEREDOC_END!r}"
            content = "".join(part + "\n" for part in body[index:end])
            index = end + 1
        output: list[str] = []
        status = 0
        while index < len(body) and not body[index].startswith("$ "):
            if (exit_line := EXIT.match(body[index])) is not None:
                status = int(exit_line.group(1))
            else:
                output.append(body[index])
            index += 1
        commands.append(Command(line, "\n".join(output), status, content, error))
    return commands


def run(command: Command, cwd: Path) -> tuple[str, int]:
    """Run one command in ``cwd``; what it printed (stdout, then stderr) and its exit status."""
    if command.error is not None:
        raise AssertionError(command.error)
    heredoc = HEREDOC.match(command.line)
    if heredoc is not None and command.content is not None:
        return _write_here_document(heredoc.group("name"), command.content, cwd)
    if command.content is not None or HEREDOC_LIKE.match(command.line):
        raise AssertionError(f"a here-document must be written exactly `cat > NAME <<'EOF'`: {command.line!r}")
    try:
        argv = shlex.split(command.line)
    except ValueError as exc:
        raise AssertionError(f"{ALLOWED}; cannot read {command.line!r}: {exc}") from None
    if not argv or argv[0] != "queue-core":
        raise AssertionError(f"{ALLOWED}: {command.line!r}")
    if _shell_syntax(command.line):
        raise AssertionError(f"{ALLOWED}, without pipes, redirections, lists or expansions: {command.line!r}")
    result = subprocess.run([sys.executable, "-m", "queue_core", *argv[1:]], cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    return (result.stdout + result.stderr).rstrip("\n"), result.returncode


def _shell_syntax(line: str) -> bool:
    """Whether a shell would read ``line`` as more than one program and its arguments."""
    if "$" in line or "`" in line:
        return True
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return any(token and set(token) <= set("();<>|&") for token in lexer)


def _write_here_document(name: str, content: str, cwd: Path) -> tuple[str, int]:
    if not PLAIN_NAME.fullmatch(name):
        raise AssertionError(f"a here-document writes a plain file name in the session's folder, not {name!r}")
    (cwd / name).write_text(content, encoding="utf-8", newline="\n")
    return "", 0
