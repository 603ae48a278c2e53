"""Shell completion for ``queue-core``, written from the command table.

``queue-core completion bash|zsh`` prints the script::

    source <(queue-core completion bash)   # in ~/.bashrc, or saved as
    # ~/.local/share/bash-completion/completions/queue-core
    source <(queue-core completion zsh)    # in ~/.zshrc after compinit, or
    # saved as _queue-core in a folder of $fpath

Both scripts complete the same things: the command names (in zsh with their
summaries), each command's options and the global ones, an option's choices
(``list --state``), a file where a file is asked for (``enqueue FILE``,
``--db``), and a positional argument's choices (``lab CASE``). A value to
be typed (a number, a time, a name) is left to the user.
"""

from __future__ import annotations

from collections.abc import Sequence

from .spec import Command, Option

PROGRAM = "queue-core"
FUNCTION = "_queue_core"
HELP = ("-h", "--help")


def _quote(text: str) -> str:
    """``text`` as one word for both shells (single quotes)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _options(command: Command | None, globals_: Sequence[Option]) -> list[str]:
    """The options a shell offers after ``command`` (None: before any command)."""
    if command is None:
        return [o.name for o in globals_] + ["--version", *HELP]
    names = [o.name for o in command.options() if not o.positional]
    names += [o.name for o in command.beside_format]
    if command.output is not None and len(command.output.formats) > 1:
        names += ["--format", "--json"]
    if not command.own_folder:
        names += [o.name for o in globals_]
    return names + list(HELP)


def _values(option: Option) -> tuple[str, tuple[str, ...]]:
    """What may follow ``option``: a file, words (its choices), or a value typed."""
    if option.complete == "file":
        return "file", ()
    if option.choices is not None:
        return "words", option.choices
    return "type", ()


def _value_cases(command: Command) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(option, kind, words)`` for each option of ``command`` that takes a value."""
    cases = []
    for option in command.options():
        if not option.positional and not option.flag:
            kind, words = _values(option)
            cases.append((option.name, kind, words))
    if command.output is not None and len(command.output.formats) > 1:
        cases.append(("--format", "words", command.output.formats))
    return cases


def _positional(command: Command) -> tuple[str, tuple[str, ...]]:
    """What a word that is not an option completes to after ``command``."""
    for option in command.options():
        if option.positional and option.complete is not None:
            return _values(option)
    return "type", ()


def bash(commands: Sequence[Command], globals_: Sequence[Option]) -> str:
    """The bash script: a function for ``complete -F``, and its registration."""
    skip = "|".join(o.name for o in globals_)
    lines = [
        f"# bash completion for {PROGRAM}, written from its command table by",
        f"# `{PROGRAM} completion bash`. Load it with:",
        f"#     source <({PROGRAM} completion bash)",
        f"{FUNCTION}() {{",
        "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
        '    local command="" i',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        "        case ${COMP_WORDS[i]} in",
        f"            {skip}) ((i++)) ;;",
        "            -*) ;;",
        "            *) command=${COMP_WORDS[i]}; break ;;",
        "        esac",
        "    done",
        "    COMPREPLY=()",
        '    case "$prev" in',
    ]
    for option in globals_:
        kind, words = _values(option)
        lines.append(f"        {option.name}) {_bash_reply(kind, words)}; return ;;")
    lines += ["    esac", '    case "$command $prev" in']
    for command in commands:
        for name, kind, words in _value_cases(command):
            reply = _bash_reply(kind, words)
            lines.append(f'        "{command.name} {name}") {reply}; return ;;')
    lines += ["    esac", "    if [[ $cur == -* ]]; then", "        case $command in"]
    lines.append(
        f'            "") {_bash_reply("words", tuple(_options(None, globals_)))} ;;'
    )
    for command in commands:
        reply = _bash_reply("words", tuple(_options(command, globals_)))
        lines.append(f"            {command.name}) {reply} ;;")
    lines += ["        esac", "        return", "    fi", "    case $command in"]
    names = tuple(command.name for command in commands)
    lines.append(f'        "") {_bash_reply("words", names)} ;;')
    for command in commands:
        kind, words = _positional(command)
        if kind != "type":
            lines.append(f"        {command.name}) {_bash_reply(kind, words)} ;;")
    lines += ["    esac", "}", f"complete -o filenames -F {FUNCTION} {PROGRAM}", ""]
    return "\n".join(lines)


def _bash_reply(kind: str, words: tuple[str, ...]) -> str:
    if kind == "file":
        return 'COMPREPLY=($(compgen -f -- "$cur"))'
    if kind == "words":
        return f'COMPREPLY=($(compgen -W {_quote(" ".join(words))} -- "$cur"))'
    return "COMPREPLY=()"  # a value the user types


def zsh(commands: Sequence[Command], globals_: Sequence[Option]) -> str:
    """The zsh script: a completion function, registered with ``compdef`` (or
    autoloaded from ``$fpath`` as ``_queue-core``)."""
    skip = "|".join(o.name for o in globals_)
    lines = [
        f"#compdef {PROGRAM}",
        f"# zsh completion for {PROGRAM}, written from its command table by",
        f"# `{PROGRAM} completion zsh`. Load it after compinit with: "
        f"source <({PROGRAM} completion zsh)",
        f"{FUNCTION}() {{",
        "    local cur=${words[CURRENT]} prev=${words[CURRENT-1]}",
        '    local command="" i',
        "    for ((i = 2; i < CURRENT; i++)); do",
        "        case ${words[i]} in",
        f"            ({skip}) ((i++)) ;;",
        "            (-*) ;;",
        "            (*) command=${words[i]}; break ;;",
        "        esac",
        "    done",
        '    case "$prev" in',
    ]
    for option in globals_:
        kind, words = _values(option)
        lines.append(f"        ({option.name}) {_zsh_reply(kind, words)}; return ;;")
    lines += ["    esac", '    case "$command $prev" in']
    for command in commands:
        for name, kind, words in _value_cases(command):
            reply = _zsh_reply(kind, words)
            lines.append(f'        ("{command.name} {name}") {reply}; return ;;')
    lines += ["    esac", "    if [[ $cur == -* ]]; then", "        case $command in"]
    lines.append(
        f'            ("") {_zsh_reply("words", tuple(_options(None, globals_)))} ;;'
    )
    for command in commands:
        reply = _zsh_reply("words", tuple(_options(command, globals_)))
        lines.append(f"            ({command.name}) {reply} ;;")
    lines += ["        esac", "        return", "    fi", "    case $command in"]
    width = max(len(command.name) for command in commands)
    shown = " ".join(_quote(f"{c.name:<{width}}  -- {c.summary}") for c in commands)
    names = " ".join(command.name for command in commands)
    lines.append(
        f'        ("") local -a shown=({shown}); compadd -l -d shown -- {names} ;;'
    )
    for command in commands:
        kind, words = _positional(command)
        if kind != "type":
            lines.append(f"        ({command.name}) {_zsh_reply(kind, words)} ;;")
    lines += [
        "    esac",
        "}",
        f'if [[ $funcstack[1] == "_{PROGRAM}" ]]; then',
        f'    {FUNCTION} "$@"  # autoloaded from $fpath',
        "else",
        f"    compdef {FUNCTION} {PROGRAM}",
        "fi",
        "",
    ]
    return "\n".join(lines)


def _zsh_reply(kind: str, words: tuple[str, ...]) -> str:
    if kind == "file":
        return "_files"
    if kind == "words":
        return "compadd -- " + " ".join(words)
    return "return 1"  # a value the user types


SCRIPTS = {"bash": bash, "zsh": zsh}


def script(shell: str, commands: Sequence[Command], globals_: Sequence[Option]) -> str:
    """The completion script for ``shell`` (``bash`` or ``zsh``) that completes
    ``commands`` and the global options ``globals_`` (the command table's)."""
    return SCRIPTS[shell](commands, globals_)
