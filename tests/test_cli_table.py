"""The command line built from one table (queue_core/cli/table.py), run as real processes.

What is held here: the parser, the completion scripts and README's table of
commands are the table's, nothing more and nothing less; every command that
prints takes ``--format`` and ``--json`` means ``--format json``; the rules
between two options are enforced before any database is opened; the facts the
help states about the reference application are the application's; and
``--help`` and ``status`` import only what they use (what is imported, never a
time: scripts/startup.py measures the time). Each check has its negative
control beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from docs_support.cli_reference import readme_table, synopsis
from queue_core.cli import facts, build_parser, completion
from queue_core.cli.spec import Excludes, Needs
from queue_core.cli.table import BY_NAME, COMMANDS, GLOBAL_OPTIONS

from .support import DEMO_LINES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
QUEUE_CORE = [sys.executable, "-m", "queue_core"]


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QUEUE_CORE, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def parser_options(sub: argparse.ArgumentParser) -> set[str]:
    """The option strings a command's parser accepts and shows (not the refused, hidden ones)."""
    sub.format_help()  # a command's own arguments are added when it is first used
    return {name for action in sub._actions if action.help != argparse.SUPPRESS
            for name in action.option_strings}


# ------------------------------------------------------------ one table

def test_the_parser_has_exactly_the_tables_commands() -> None:
    assert list(subparsers(build_parser())) == [command.name for command in COMMANDS]


def test_each_commands_parser_takes_exactly_its_entrys_options() -> None:
    for name, sub in subparsers(build_parser()).items():
        command = BY_NAME[name]
        wanted = {o.name for o in command.options() + command.beside_format if not o.positional}
        wanted |= {"-h", "--help"}
        if command.output is not None and len(command.output.formats) > 1:
            wanted |= {"--format", "--json"}
        if not command.own_folder:
            wanted |= {option.name for option in GLOBAL_OPTIONS}
        assert parser_options(sub) == wanted, name


def test_an_entry_may_take_a_global_option_as_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a later `work --queue A --queue B` needs: an entry's own, repeatable
    # --queue, while every other command keeps the global one.
    from queue_core.cli import parser as parser_module
    from queue_core.cli.spec import Command, Option

    several = Command("several", "a command of a test", "", run=lambda inv: 0,
                      arguments=lambda: (Option("--queue", "queues", metavar="NAME", repeat=True),))
    monkeypatch.setattr(parser_module, "COMMANDS", (*COMMANDS, several))
    parser = parser_module.build_parser()
    assert parser.parse_args(["several", "--queue", "a", "--queue", "b"]).queue == ["a", "b"]
    assert parser.parse_args(["status", "--queue", "a"]).queue == "a"
    assert parser.parse_args(["--db", "x.sqlite3", "several"]).db == "x.sqlite3"


def test_the_options_of_a_rule_are_given_exactly_when_their_value_is_set() -> None:
    # Invocation.given reads "given" from the value: an option a rule names must
    # default to None, False or [] (a global option to nothing at all).
    for command in COMMANDS:
        options = {o.name: o for o in command.options()}
        for rule in command.rules:
            for name in (rule.option, rule.needs if isinstance(rule, Needs) else rule.other):
                if name in options:
                    assert options[name].default in (None, False, []) or options[name].flag \
                        or options[name].repeat, (command.name, name)
                else:
                    assert name in {o.name for o in GLOBAL_OPTIONS}, (command.name, name)


def test_readme_carries_the_generated_table_of_commands() -> None:
    script = sync_script()
    assert README == script.synced(README, readme_table()), "run python scripts/sync_cli.py"
    for command in COMMANDS:
        assert f"| `{synopsis(command).replace('|', chr(92) + '|')}` |" in README, command.name


def test_a_drifted_readme_table_is_detected() -> None:  # negative control
    script = sync_script()
    drifted = README.replace("`dead [--format table\\|json]`", "`dead [--json]`", 1)
    assert drifted != README
    assert script.synced(drifted, readme_table()) != drifted
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "sync_cli.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr  # and the real README passes the script's own check


def sync_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_cli", ROOT / "scripts" / "sync_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_page_prints(marker: str) -> str:
    """What the CLI reference page's build-time block that calls ``marker`` prints, run as
    the build runs it (markdown-exec executes the block's source)."""
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    blocks = re.findall(r'```python exec="on"[^\n]*\n(.*?)```', page, re.S)
    (source,) = [block for block in blocks if marker in block]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "docs/reference/cli.md", "exec"), {})
    return printed.getvalue()


def missing_from_reference(sections: str, options_table: str) -> dict[str, set[str]]:
    """Per command, what its parser takes (argparse's own options, not the table's
    words) that the reference page's section does not show as a row of its table;
    and the global options missing from their table. A row is a Markdown table row
    of three cells (a pipe inside a cell escaped)."""
    gaps: dict[str, set[str]] = {}
    globals_ = {option.name for option in GLOBAL_OPTIONS}
    titles = re.findall(r"^### `([a-z]+)`$", sections, re.M)
    if titles != [command.name for command in COMMANDS]:
        gaps["(sections)"] = set(titles) ^ {command.name for command in COMMANDS}
    for name, sub in subparsers(build_parser()).items():
        found = re.search(rf"^### `{name}`\n(.*?)(?=^### |\Z)", sections, re.M | re.S)
        text = found.group(1) if found else ""
        rows = [line for line in text.splitlines() if line.startswith("| `")]
        assert all(len(re.split(r"(?<!\\)\|", row)) == 5 for row in rows), rows
        shown = {re.match(r"\| `([^` ]+)", row).group(1).removesuffix("...")  # type: ignore[union-attr]
                 for row in rows}
        wanted = parser_options(sub) - {"-h", "--help", "--json"} - globals_
        for action in sub._actions:  # positional arguments: as argparse names them
            if not action.option_strings and action.help != argparse.SUPPRESS:
                choices = "{" + ",".join(action.choices) + "}" if action.choices else None
                wanted.add(action.metavar or choices or action.dest)
        if f"```text\nqueue-core {name}" not in text:
            wanted.add("(synopsis)")
        if "--format" in wanted and "`--json`: the same as `--format json`" not in text:
            wanted.add("--json")
        if wanted - shown:
            gaps[name] = wanted - shown
    absent = {name for name in globals_ if f"| `{name} " not in options_table}
    if absent:
        gaps["(global options)"] = absent
    return gaps


def test_the_reference_page_shows_every_command_and_every_option_it_takes() -> None:
    sections = reference_page_prints("page_sections()")
    options = reference_page_prints("global_options_table()")
    assert missing_from_reference(sections, options) == {}
    # negative controls: a lost row, a lost section, a lost global option
    no_row = re.sub(r"^\| `--concurrency N` .*\n", "", sections, flags=re.M)
    assert missing_from_reference(no_row, options) == {"work": {"--concurrency"}}
    no_lab = re.sub(r"^### `lab`\n.*?(?=^### )", "", sections, flags=re.M | re.S)
    assert missing_from_reference(no_lab, options) == {
        "(sections)": {"lab"}, "lab": {"(synopsis)", "--format", "--json", "CASE"}}
    assert missing_from_reference(sections, options.replace("--now", "--then")) == {"(global options)": {"--now"}}


def test_what_the_help_states_of_the_library_and_the_application_is_theirs() -> None:
    assert facts.differences() == []


def test_a_fact_out_of_step_with_the_application_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "LEDGER_CATEGORIES", ("bag", "book", "pen", "toy"))
    monkeypatch.setattr(facts, "LAB_CASES", facts.LAB_STORIES)
    found = facts.differences()
    assert [text.split(":")[0] for text in found] == ["LEDGER_CATEGORIES", "LAB_CASES"]


# ------------------------------------------------------------ --format

@pytest.fixture(scope="module")
def worked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose queue.sqlite3 holds the reference demo's batch, worked once (one dead)."""
    folder = tmp_path_factory.mktemp("worked")
    (folder / "batch.jsonl").write_text(DEMO_LINES, encoding="utf-8")
    for args in (["enqueue", "batch.jsonl"], ["work"]):
        assert cli(folder, "--now", "1000", *args).returncode == 0
    return folder


# (arguments after --now 1000, a command that only reads or that changes nothing)
PRINTING = [
    ["status"], ["list"], ["dead"], ["queues"], ["metrics"], ["metrics", "--all"],
    ["enqueue", "batch.jsonl"], ["prune", "--older-than", "1d"], ["redrive", "--all", "--code", "nothing_such"],
]


@pytest.mark.parametrize("args", PRINTING, ids=[" ".join(a) for a in PRINTING])
def test_json_is_format_json_and_every_format_prints(worked: Path, args: list[str]) -> None:
    command = BY_NAME[args[0]]
    assert command.output is not None
    shown = {}
    for fmt in command.output.formats:
        proc = cli(worked, "--now", "1000", *args, "--format", fmt)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        shown[fmt] = proc.stdout
    default = cli(worked, "--now", "1000", *args)
    alias = cli(worked, "--now", "1000", *args, "--json")
    assert default.stdout == shown[command.output.default]  # the default is what it printed before
    assert alias.stdout == shown["json"] and json.loads(alias.stdout) is not None
    assert len(set(shown.values())) == len(shown)  # each format its own text


def test_format_table_of_a_json_command_names_each_field(worked: Path) -> None:
    proc = cli(worked, "--now", "1000", "enqueue", "batch.jsonl", "--format", "table")
    assert proc.stdout == "accepted    0\nduplicates  5\n"
    redriven = cli(worked, "--now", "1000", "redrive", "--all", "--code", "nothing_such", "--format", "table")
    assert redriven.stdout == "redriven  none\ncount     0\n"


def test_an_unknown_format_and_format_with_json_are_usage_errors(worked: Path) -> None:
    for args in (["status", "--format", "yaml"], ["status", "--format", "table", "--json"],
                 ["metrics", "--format", "table"], ["work", "--quiet", "--format", "json"]):
        proc = cli(worked, *args)
        assert proc.returncode == 2 and proc.stdout == "", args
        assert proc.stderr.splitlines()[-1].startswith("queue-core: usage: "), proc.stderr


# ------------------------------------------------------------ rules between options

SAMPLE = {"--poll": ["1"], "--forever": [], "--category": ["pen"], "--handler": ["myapp:handle"],
          "--code": ["invalid_payload"], "--all": [], "--queue": ["other"], "--now": ["1000"]}
REQUIRED = {"schedule": ["tick", "--every", "60", "--payload", "{}"], "redrive": ["E0001"]}
RULES = [(command, rule) for command in COMMANDS for rule in command.rules]


@pytest.mark.parametrize(("command", "rule"), RULES, ids=[f"{c.name} {r.option}" for c, r in RULES])
def test_each_rule_of_the_table_is_refused_before_a_database_is_opened(tmp_path: Path, command, rule) -> None:
    other = rule.needs if isinstance(rule, Needs) else rule.other
    args = [*REQUIRED.get(command.name, []), rule.option, *SAMPLE[rule.option]]
    if isinstance(rule, Excludes):
        args += [other, *SAMPLE[other]]
    proc = cli(tmp_path, command.name, *args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"queue-core: usage: {rule.message}\n")
    assert list(tmp_path.iterdir()) == []  # nothing opened, nothing made
    if isinstance(rule, Needs):  # the control: with the option it needs, the rule lets it through
        allowed = cli(tmp_path, command.name, *args, other, *SAMPLE[other])
        assert rule.message not in allowed.stderr


# ------------------------------------------------------------ what a command imports

def test_every_command_knows_the_ledgers_migration_line_before_it_opens_a_file(tmp_path: Path) -> None:
    # A version-1 file holds the ledger's effects, which reference messages: the
    # queue's migration 4 moves them only when the ledger's line is registered
    # (importing queue_core.app.ledger). list uses nothing of the ledger itself.
    from docs_support.old_versions import make_v1

    make_v1(tmp_path / "old.sqlite3")
    make_v1(tmp_path / "control.sqlite3")
    listed = cli(tmp_path, "--db", "old.sqlite3", "list", "--state", "done")
    assert listed.returncode == 0 and listed.stdout.startswith("event_id"), listed.stderr
    # the control: the same file opened without the ledger's line is refused untouched
    proc = subprocess.run([sys.executable, "-c", "from queue_core import Store\n"
                           "try:\n    Store('control.sqlite3')\n"
                           "except Exception as exc:\n    print(exc.code)"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.stdout == "migration_blocked\n", proc.stderr



def imported(*args: str, cwd: Path) -> set[str]:
    """Every module ``queue-core ARGS`` imports, from ``python -X importtime``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "queue_core", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def ours(modules: set[str], *prefixes: str) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}


HEAVY = ("sqlite3", "psycopg", "queue_core.store", "queue_core.engines", "queue_core.transactions",
         "queue_core.app", "queue_core.worker", "queue_core.schedules", "queue_core.claims",
         "queue_core.prometheus", "queue_core.receipts")


def test_help_imports_no_store_no_engine_and_nothing_of_the_application(tmp_path: Path) -> None:
    modules = imported("--help", cwd=tmp_path)
    assert "queue_core.cli.parser" in modules  # the detector sees the CLI's own modules
    assert ours(modules, *HEAVY) == set()
    # argparse's own formatter asks shutil for the terminal's width (shutil brings bz2
    # and lzma); every parser of ours has the fixed-width one, the parents too
    assert "shutil" not in modules
    for command in ("status", "work", "lab"):  # a command's help: its own options only
        assert ours(imported(command, "--help", cwd=tmp_path), *HEAVY) == set(), command
    # redrive's help states the library's chunk (claims.REDRIVE_CHUNK): it reads it there
    redrive = imported("redrive", "--help", cwd=tmp_path)
    assert "queue_core.claims" in redrive
    assert ours(redrive, "sqlite3", "psycopg", "queue_core.store", "queue_core.app") == set()


def test_status_imports_the_store_and_the_ledger_but_no_worker_and_no_postgresql(worked: Path) -> None:
    modules = imported("--now", "1000", "status", cwd=worked)
    # the control: what status uses is seen, so an absence below means something
    assert {"sqlite3", "queue_core.store", "queue_core.engines.sqlite", "queue_core.app.ledger"} <= modules
    assert ours(modules, "psycopg", "queue_core.engines.postgres", "queue_core.worker",
                "queue_core.worker_threads", "queue_core.schedules", "queue_core.prometheus",
                "queue_core.app.demo", "queue_core.app.lab", "queue_core.app.crash_child",
                "queue_core.cli.service", "queue_core.cli.completion") == set()


# ------------------------------------------------------------ shell completion

def completion_script(shell: str) -> str:
    return completion.script(shell, COMMANDS, GLOBAL_OPTIONS)


def bash_completes(script: str, words: list[str], cwd: Path) -> list[str]:
    """What bash's completion offers for the command line ``words`` (the last one being typed)."""
    program = (
        'source /dev/stdin\n'
        'complete -p queue-core\n'
        f'COMP_WORDS=({" ".join(_sh(w) for w in words)}); COMP_CWORD={len(words) - 1}\n'
        '_queue_core\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], input=script, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    first, *offered = proc.stdout.splitlines()
    assert first == "complete -o filenames -F _queue_core queue-core"  # registered for the command
    return sorted(line for line in offered if line)


def _sh(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


COMPLETIONS = [
    (["queue-core", ""], sorted(c.name for c in COMMANDS)),
    (["queue-core", "st"], ["status"]),
    (["queue-core", "--db", "q.sqlite3", "--now", "5", "wo"], ["work"]),
    (["queue-core", "list", "--state", ""], ["dead", "done", "leased", "ready"]),
    (["queue-core", "purge", "--state", ""], ["dead", "ready"]),
    (["queue-core", "status", "--format", ""], ["json", "table"]),
    (["queue-core", "metrics", "--format", ""], ["json", "prometheus"]),
    (["queue-core", "work", "--con"], ["--concurrency"]),
    (["queue-core", "lab", "e"], ["early-ack", "expiry"]),
    (["queue-core", "completion", ""], ["bash", "zsh"]),
    (["queue-core", "enqueue", "ba"], ["batch.jsonl"]),
    (["queue-core", "--db", "q"], ["q.sqlite3"]),
    (["queue-core", "enqueue", "--delay", ""], []),  # a number to type: nothing offered
    (["queue-core", "demo", "--d"], []),  # demo takes no --db
]


@pytest.mark.parametrize(("words", "offered"), COMPLETIONS, ids=[" ".join(w) for w, _ in COMPLETIONS])
def test_bash_completes_from_the_table(tmp_path: Path, words: list[str], offered: list[str]) -> None:
    (tmp_path / "batch.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "q.sqlite3").write_text("", encoding="utf-8")
    script = cli(tmp_path, "completion", "bash").stdout
    assert bash_completes(script, words, tmp_path) == offered


def missing_from_bash(script: str, cwd: Path) -> dict[str, set[str]]:
    """Per command, the options its parser takes that bash's completion does not offer, and the reverse."""
    gaps = {}
    for name, sub in subparsers(build_parser()).items():
        offered = set(bash_completes(script, ["queue-core", name, "-"], cwd))
        if offered != parser_options(sub):
            gaps[name] = offered ^ parser_options(sub)
    return gaps


def test_bash_offers_every_option_of_every_command_and_no_other(tmp_path: Path) -> None:
    script = completion_script("bash")
    assert missing_from_bash(script, tmp_path) == {}
    broken = script.replace(" --concurrency ", " ", 1)  # negative control: one option lost
    assert missing_from_bash(broken, tmp_path) == {"work": {"--concurrency"}}


ZSH = shutil.which("zsh")


def zsh_completes(words: list[str], cwd: Path, script: str | None = None) -> tuple[str, list[str]]:
    """The function compinit registered for queue-core, and what it offers for ``words``.

    zsh's completion system runs only inside its line editor; here the real
    function runs in a real zsh with ``compadd`` and ``_files`` standing in
    for what it would hand the line editor.
    """
    program = (
        "autoload -U compinit && compinit -u -D\n"
        "source /dev/stdin\n"
        "print -r -- ${_comps[queue-core]}\n"
        "compadd() { while [[ $# -gt 0 && $1 != -- ]]; do shift; done; shift; print -rl -- \"$@\" }\n"
        "_files() { print -rl -- ${PREFIX}*(N) }\n"
        f"words=({' '.join(_sh(w) for w in words)}); CURRENT={len(words)}; PREFIX={_sh(words[-1])}\n"
        "_queue_core\n"
    )
    proc = subprocess.run([str(ZSH), "-f", "-c", program], input=script or completion_script("zsh"), cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 or proc.stdout, proc.stderr
    first, *offered = proc.stdout.splitlines()
    prefix = words[-1]
    return first, sorted(line for line in offered if line.startswith(prefix))


@pytest.mark.skipif(ZSH is None, reason="zsh is not installed here: its completion script is not run")
@pytest.mark.parametrize(("words", "offered"), COMPLETIONS, ids=[" ".join(w) for w, _ in COMPLETIONS])
def test_zsh_completes_from_the_table(tmp_path: Path, words: list[str], offered: list[str]) -> None:
    (tmp_path / "batch.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "q.sqlite3").write_text("", encoding="utf-8")
    registered, found = zsh_completes(words, tmp_path)
    assert registered == "_queue_core"
    assert found == offered


def missing_from_zsh(script: str, cwd: Path) -> dict[str, set[str]]:
    """As ``missing_from_bash``, for zsh's function."""
    gaps = {}
    for name, sub in subparsers(build_parser()).items():
        _, offered = zsh_completes(["queue-core", name, "-"], cwd, script)
        if set(offered) != parser_options(sub):
            gaps[name] = set(offered) ^ parser_options(sub)
    return gaps


@pytest.mark.skipif(ZSH is None, reason="zsh is not installed here: its completion script is not run")
def test_zsh_offers_every_option_of_every_command_and_no_other(tmp_path: Path) -> None:
    script = completion_script("zsh")
    assert missing_from_zsh(script, tmp_path) == {}
    broken = script.replace(" --concurrency ", " ", 1)  # negative control: one option lost
    assert missing_from_zsh(broken, tmp_path) == {"work": {"--concurrency"}}


@pytest.mark.timeout(300)
def test_the_startup_script_measures_both_commands_and_shows_what_they_import() -> None:
    # What the figures say is for the reader of the script's output; here only
    # that it runs and reports each command (a time is never asserted).
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "startup.py"), "--runs", "1",
                           "--importtime"], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[:3] for line in proc.stdout.splitlines()]
    assert ["this", "checkout:", "--help"] in rows and ["this", "checkout:", "status"] in rows
    help_part = proc.stdout.split("this checkout: queue-core --help")[1].split("this checkout: queue-core status")[0]
    status_part = proc.stdout.split("this checkout: queue-core status")[1]
    assert "queue_core.cli.parser" in help_part and "queue_core.store" not in help_part
    assert "queue_core.store" in status_part  # the control: the same report names what status loads
