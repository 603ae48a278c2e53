"""The command line's reference, written from its command table (``queue_core.cli.table``).

Two readers, two ways, one source:

* the site's CLI reference page (``docs/reference/cli.md``) prints
  ``page_sections()`` when it is built, as every generated part of the site
  does: nothing to regenerate, nothing to forget;
* README.md cannot run code (it is read as it is stored, on GitHub or in a
  clone), so it carries a copy of ``readme_table()`` between
  ``<!-- cli:start -->`` and ``<!-- cli:end -->``, written by
  ``scripts/sync_cli.py``; ``tests/test_cli_table.py`` fails when the copy
  differs from what the table gives now.

Standard library and queue_core only (the site's build imports it).
"""

from __future__ import annotations

from queue_core.cli.spec import Command, OneOf, Option
from queue_core.cli.table import COMMANDS, GLOBAL_OPTIONS

README_START = "<!-- cli:start -->"
README_END = "<!-- cli:end -->"
README_NOTE = "<!-- generated from queue_core/cli/table.py by scripts/sync_cli.py -->"


def _value(option: Option) -> str:
    if option.choices is not None and option.metavar is None:
        return "|".join(option.choices)
    return option.metavar or option.name.upper()


def _word(option: Option) -> str:
    """One option as a synopsis writes it: ``--batch K``, ``FILE``, ``--category NAME...``."""
    if option.positional:
        many = option.nargs == "*" or option.repeat
        return _value(option) + ("..." if many else "")
    if option.flag:
        return option.name
    return f"{option.name} {_value(option)}" + ("..." if option.repeat else "")


def _optional(option: Option) -> bool:
    return not option.required and (not option.positional or option.nargs in ("?", "*"))


def synopsis(command: Command) -> str:
    """``enqueue [--delay SECONDS | --at TIME] [--priority N] [--format json|table] FILE``."""
    return " ".join(_synopsis_parts(command))


def wrapped_synopsis(command: Command, width: int = 88) -> str:
    """``queue-core`` and the synopsis, in lines of at most ``width``, broken between
    two arguments (never inside brackets) and indented under the first."""
    first, *rest = _synopsis_parts(command)
    lines = [f"queue-core {first}"]
    indent = " " * len(lines[0])
    for part in rest:
        if len(lines[-1]) + 1 + len(part) > width:
            lines.append(indent)
        lines[-1] += " " + part
    return "\n".join(lines)


def _synopsis_parts(command: Command) -> list[str]:
    parts = [command.name]
    for argument in command.arguments():  # in the table's order
        if isinstance(argument, OneOf):
            inner = " | ".join(_word(option) for option in argument.options)
            parts.append(f"({inner})" if argument.required else f"[{inner}]")
        else:
            word = _word(argument)
            parts.append(f"[{word}]" if _optional(argument) else word)
    output = command.output
    if output is not None and len(output.formats) > 1:
        shown = [_word(option) for option in command.beside_format]
        shown.append("--format " + "|".join(output.formats))
        parts.append("[" + " | ".join(shown) + "]")
    return parts


def _cell(text: str) -> str:
    """Text for a Markdown table's cell: its pipes escaped."""
    return text.replace("|", "\\|")


def readme_table() -> str:
    """README's table of commands: each one's synopsis and what it does."""
    rows = ["| command | what it does |", "| --- | --- |"]
    for command in COMMANDS:
        rows.append(f"| `{_cell(synopsis(command))}` | {_cell(command.about)} |")
    return "\n".join(rows) + "\n"


def _default(option: Option) -> str:
    if option.flag or option.positional and option.nargs is None:
        return ""
    if option.required:
        return "required"
    if option.default in (None, []):
        return ""
    return f"`{option.default}`"


def _help(option: Option) -> str:
    return option.help() if callable(option.help) else option.help


def _text(text: str) -> str:
    """Plain text for a table cell of the page: HTML's brackets and the pipes escaped."""
    for raw, escaped in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|")):
        text = text.replace(raw, escaped)
    return text


def _argument(option: Option) -> str:
    """An argument as the page's table names it: choices in braces, as argparse
    writes them (a pipe inside code cannot be escaped in the site's tables)."""
    if option.choices is not None and option.metavar is None:
        choices = "{" + ",".join(option.choices) + "}"
        return f"`{choices}`" if option.positional else f"`{option.name} {choices}`"
    return f"`{_word(option)}`"


def options_table(command: Command) -> str:
    """A command's arguments: what each takes, its default, what it does."""
    rows = ["| argument | default | what it does |", "| --- | --- | --- |"]
    for option in command.options() + command.beside_format:
        shown = _help(option) or (
            "one of " + ", ".join(option.choices) if option.choices else ""
        )
        rows.append(f"| {_argument(option)} | {_default(option)} | {_text(shown)} |")
    output = command.output
    if output is not None and len(output.formats) > 1:
        about = f"; {output.about}" if output.about else ""
        formats = " or ".join(f"`{name}`" for name in output.formats)
        rows.append(
            f"| `--format {{{','.join(output.formats)}}}` | `{output.default}` | "
            f"print as {formats}{_text(about)} (`--json`: the same as `--format json`) |"
        )
    return "\n".join(rows) + "\n"


def page_sections(link_prefix: str = "../") -> str:
    """The reference page's section per command, in the order of ``queue-core --help``."""
    out = []
    for command in COMMANDS:
        see = f" ([more]({link_prefix}{command.see}))" if command.see else ""
        takes = (
            f"It takes none of the global options: {command.own_folder}."
            if command.own_folder
            else "It takes the global options "
            + ", ".join(f"`{option.name}`" for option in GLOBAL_OPTIONS)
            + "."
        )
        out.append(f"### `{command.name}`\n")
        out.append(f"```text\n{wrapped_synopsis(command)}\n```\n")
        out.append(f"{command.about[0].upper()}{command.about[1:]}{see}. {takes}\n")
        if command.options() or command.output is not None:
            out.append(options_table(command))
    return "\n".join(out)


def global_options_table() -> str:
    rows = ["| option | what it does |", "| --- | --- |"]
    for option in GLOBAL_OPTIONS:
        rows.append(f"| `{_word(option)}` | {_text(_help(option))} |")
    return "\n".join(rows) + "\n"
