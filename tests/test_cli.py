"""The ``queue-core`` command line, run as a real subprocess on real files.

Every command runs as ``python -m queue_core ...`` in ``tmp_path``; nothing is
mocked. The contract comes from SPEC.md and the CLI's documented behaviour:
exit 0 success, 2 rejected input or usage error, 1 anything else, and an
expected error never prints a traceback.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .support import DEMO_LINES

GOOD_LINE = '{"event_id": "E0009", "payload": {"category": "pen", "amount_cents": 1}}\n'
SUMMARY_KEYS = {"claimed", "done", "retried", "dead", "lease_lost"}
STATES = ("ready", "leased", "done", "dead")
DB = "q.sqlite3"


# ---------------------------------------------------------------- helpers

def run(cwd: Path, *args: Any, input: str | bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the CLI as a real subprocess in ``cwd``."""
    argv = [sys.executable, "-m", "queue_core", *map(str, args)]
    if isinstance(input, bytes):
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, input=input, timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode,
                                           proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8"))
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, input=input, timeout=timeout)


def ok(cwd: Path, *args: Any, input: str | bytes | None = None) -> Any:
    """Run a command that must succeed and print one JSON value; return it."""
    proc = run(cwd, *args, input=input)
    assert proc.returncode == 0, (args, proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def fails(cwd: Path, *args: Any, code: str, status: int = 2, input: str | bytes | None = None) -> str:
    """Run a command that must fail cleanly with ``code``; return its stderr."""
    proc = run(cwd, *args, input=input)
    assert proc.returncode == status, (args, proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert code in proc.stderr, (code, proc.stderr)
    assert proc.stdout == "", proc.stdout
    return proc.stderr


def status(cwd: Path, db: str | Path = DB) -> dict[str, Any]:
    return ok(cwd, "--db", db, "status", "--json")


def fingerprint(path: Path) -> tuple[Any, ...]:
    """Content and mtime of a file (or a directory's listing), plus its siblings."""
    siblings = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() else None
    if path.is_dir():
        return ("dir", sorted(p.name for p in path.iterdir()), path.stat().st_mtime_ns, siblings)
    if path.exists():
        return ("file", path.read_bytes(), path.stat().st_mtime_ns, siblings)
    return ("missing", siblings)


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


def messages(**counts: int) -> dict[str, int]:
    return {state: counts.get(state, 0) for state in STATES}


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    """A queue after the by-hand demo: E0001..E0003 done, E0004 (toy) dead."""
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "demo.jsonl")
    ok(tmp_path, "--db", DB, "--now", 1000, "work", "--lease-seconds", 2)
    return tmp_path / DB


# ------------------------------------------------------------------ enqueue

def test_enqueue_prints_exactly_accepted_and_duplicates(tmp_path: Path) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    proc = run(tmp_path, "--db", DB, "--now", 1000, "enqueue", "demo.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '{"accepted": 4, "duplicates": 1}\n'
    assert proc.stderr == ""
    assert status(tmp_path)["messages"] == messages(ready=4)


def test_default_database_is_queue_sqlite3_in_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    assert ok(tmp_path, "enqueue", "demo.jsonl") == {"accepted": 4, "duplicates": 1}
    assert (tmp_path / "queue.sqlite3").is_file()
    assert ok(tmp_path, "status", "--json")["messages"] == messages(ready=4)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fails(elsewhere, "status", code="no_database")
    assert not (elsewhere / "queue.sqlite3").exists()


def test_enqueue_reads_standard_input(tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf" + DEMO_LINES.replace("\n", "\r\n").encode("utf-8") + b"\r\n   \r\n"
    assert ok(tmp_path, "--db", DB, "enqueue", "-", input=data) == {"accepted": 4, "duplicates": 1}
    assert status(tmp_path)["messages"] == messages(ready=4)


@pytest.mark.parametrize("position", ["before", "after", "mixed"])
def test_global_options_before_or_after_the_command(tmp_path: Path, position: str) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)

    def cli(command: list[Any], now: int) -> list[Any]:
        if position == "before":
            return ["--db", DB, "--now", now, *command]
        if position == "after":
            return [*command, "--db", DB, "--now", now]
        return ["--db", DB, command[0], "--now", now, *command[1:]]

    assert ok(tmp_path, *cli(["enqueue", "demo.jsonl"], 1000)) == {"accepted": 4, "duplicates": 1}
    assert not (tmp_path / "queue.sqlite3").exists()  # --db was honoured
    # --now is honoured: the messages became available at 1000, not earlier.
    assert ok(tmp_path, *cli(["work"], 999))["claimed"] == 0
    assert ok(tmp_path, *cli(["work", "--category", "toy"], 1000))["done"] == 4
    assert ok(tmp_path, *cli(["status", "--json"], 1000))["effects"]["total_cents"] == 20000


BAD_BATCHES = {
    # name: (text, line, code)
    "invalid_json_after_blank_line": (GOOD_LINE + "\n" + "not json\n", 3, "invalid_json"),
    "duplicate_key": (GOOD_LINE + '{"event_id": "E0010", "payload": {"a": 1, "a": 2}}\n', 2, "duplicate_key"),
    "nan": (GOOD_LINE + '{"event_id": "E0010", "payload": {"a": NaN}}\n', 2, "non_finite_number"),
    "bad_event_id": (GOOD_LINE + '{"event_id": "E10", "payload": {}}\n', 2, "invalid_event_id"),
    "missing_payload": (GOOD_LINE + '{"event_id": "E0010"}\n', 2, "missing_key"),
    "extra_key": (GOOD_LINE + '{"event_id": "E0010", "payload": {}, "x": 1}\n', 2, "unexpected_key"),
    "conflict_in_batch": (GOOD_LINE + GOOD_LINE.replace('"amount_cents": 1', '"amount_cents": 2'),
                          2, "event_conflict"),
    "invalid_utf8": (GOOD_LINE.encode() + b'{"event_id": "E0010", "payload": {"a": "\xff"}}\n', 2, "invalid_utf8"),
}


@pytest.mark.parametrize("name", sorted(BAD_BATCHES) + ["conflict_with_stored"])
def test_rejected_batch_leaves_an_existing_database_unchanged(demo_db: Path, name: str) -> None:
    tmp = demo_db.parent
    if name == "conflict_with_stored":
        text, line, code = GOOD_LINE + DEMO_LINES.splitlines()[2].replace("2000", "2001") + "\n", 2, "event_conflict"
    else:
        text, line, code = BAD_BATCHES[name]
    write(tmp / "bad.jsonl", text)
    before, before_status = fingerprint(demo_db), status(tmp)
    err = fails(tmp, "--db", DB, "--now", 2000, "enqueue", "bad.jsonl", code=code)
    assert f"line {line}" in err
    assert fingerprint(demo_db) == before
    assert status(tmp) == before_status


@pytest.mark.parametrize("name", sorted(BAD_BATCHES))
def test_rejected_batch_does_not_create_the_database(tmp_path: Path, name: str) -> None:
    text, line, code = BAD_BATCHES[name]
    write(tmp_path / "bad.jsonl", text)
    before = sorted(p.name for p in tmp_path.iterdir())
    err = fails(tmp_path, "--db", DB, "enqueue", "bad.jsonl", code=code)
    assert f"line {line}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (tmp_path / DB).exists()


def test_rejected_batch_on_stdin_does_not_create_the_database(tmp_path: Path) -> None:
    err = fails(tmp_path, "--db", DB, "enqueue", "-", input=GOOD_LINE + "{oops\n", code="invalid_json")
    assert "line 2" in err
    assert list(tmp_path.iterdir()) == []


def test_enqueue_of_a_file_that_does_not_exist(tmp_path: Path) -> None:
    err = fails(tmp_path, "--db", DB, "enqueue", "missing.jsonl", code="cannot_read")
    assert "missing.jsonl" in err
    (tmp_path / "folder").mkdir()
    err = fails(tmp_path, "--db", DB, "enqueue", "folder", code="cannot_read")
    assert "folder" in err
    assert not (tmp_path / DB).exists()


def test_enqueue_of_a_file_over_the_size_limit_is_rejected(tmp_path: Path) -> None:
    write(tmp_path / "big.jsonl", GOOD_LINE + " " * 1_000_000 + "\n")
    fails(tmp_path, "--db", DB, "enqueue", "big.jsonl", code="file_too_large")
    assert not (tmp_path / DB).exists()


# --------------------------------------------------------------------- work

def test_work_prints_a_summary_and_category_adds_to_the_defaults(tmp_path: Path) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "demo.jsonl")
    summary = ok(tmp_path, "--db", DB, "--now", 1000, "work", "--category", "toy", "--category", "hat")
    assert set(summary) == SUMMARY_KEYS
    assert summary == {"claimed": 4, "done": 4, "retried": 0, "dead": 0, "lease_lost": 0}
    effects = status(tmp_path)["effects"]
    # book and pen still work next to the added toy: --category adds, it does not replace.
    assert effects == {"count": 4, "total_cents": 20000,
                       "by_category": {"book": 15000, "pen": 2000, "toy": 3000}}


def test_work_max_messages_completes_what_it_claims(tmp_path: Path) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "demo.jsonl")
    assert ok(tmp_path, "--db", DB, "--now", 1000, "work", "--max-messages", 0)["claimed"] == 0
    summary = ok(tmp_path, "--db", DB, "--now", 1000, "work", "--max-messages", 1)
    assert summary == {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    snap = status(tmp_path)
    assert snap["messages"] == messages(ready=3, done=1)
    assert snap["effects"]["by_category"] == {"book": 10000}


def test_work_on_an_empty_queue_claims_nothing(tmp_path: Path) -> None:
    write(tmp_path / "empty.jsonl", "\n  \n")
    assert ok(tmp_path, "--db", DB, "enqueue", "empty.jsonl") == {"accepted": 0, "duplicates": 0}
    assert ok(tmp_path, "--db", DB, "work") == dict.fromkeys(SUMMARY_KEYS, 0)


def test_lease_expiry_by_hand(tmp_path: Path) -> None:
    """A claim that was never completed (set up with the Python API) expires lazily."""
    from queue_core.clock import ModelClock
    from queue_core.store import Store

    write(tmp_path / "one.jsonl", DEMO_LINES.splitlines()[0] + "\n")
    ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "one.jsonl")
    lease = Store(tmp_path / DB, clock=ModelClock(1000), create=False).claim(2)
    assert lease is not None and lease.generation == 1
    assert status(tmp_path)["messages"] == messages(leased=1)
    assert ok(tmp_path, "--db", DB, "--now", 1001, "work")["claimed"] == 0  # lease still valid
    assert status(tmp_path)["messages"] == messages(leased=1)  # status applies no expiry
    assert ok(tmp_path, "--db", DB, "--now", 1002, "work") == {
        "claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    snap = status(tmp_path)
    assert snap["messages"] == messages(done=1)
    assert snap["effects"] == {"count": 1, "total_cents": 10000, "by_category": {"book": 10000}}


def test_two_workers_at_once_on_one_file(tmp_path: Path) -> None:
    lines = "".join(
        f'{{"event_id": "E{i:04d}", "payload": {{"category": "book", "amount_cents": 100}}}}\n'
        for i in range(1, 201)
    )
    write(tmp_path / "many.jsonl", lines)
    assert ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "many.jsonl") == {"accepted": 200, "duplicates": 0}
    argv = [sys.executable, "-m", "queue_core", "--db", DB, "--now", "1000", "work"]
    procs = [subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    summaries = []
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        summaries.append(json.loads(out))
    assert sum(s["claimed"] for s in summaries) == 200
    assert sum(s["done"] for s in summaries) == 200
    assert all(s["retried"] == s["dead"] == s["lease_lost"] == 0 for s in summaries)
    snap = status(tmp_path)
    assert snap["messages"] == messages(done=200)
    assert snap["effects"] == {"count": 200, "total_cents": 20000, "by_category": {"book": 20000}}
    conn = sqlite3.connect(tmp_path / DB)
    try:
        rows = conn.execute("SELECT event_id, count(*) FROM effects GROUP BY event_id").fetchall()
    finally:
        conn.close()
    assert sorted(rows) == [(f"E{i:04d}", 1) for i in range(1, 201)]


# ------------------------------------------------------------ status, dead

def test_status_prints_a_readable_table(demo_db: Path) -> None:
    proc = run(demo_db.parent, "--db", DB, "status")
    assert proc.returncode == 0 and proc.stderr == ""
    with pytest.raises(json.JSONDecodeError):
        json.loads(proc.stdout)
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines() if line.strip()}
    assert rows["ready"] == ["0"] and rows["leased"] == ["0"]
    assert rows["done"] == ["3"] and rows["dead"] == ["1"]
    assert rows["book"] == ["15000"] and rows["pen"] == ["2000"]
    assert "17000" in proc.stdout


def test_status_json_shape(demo_db: Path) -> None:
    snap = status(demo_db.parent)
    assert snap == {
        "messages": {"ready": 0, "leased": 0, "done": 3, "dead": 1},
        "effects": {"count": 3, "total_cents": 17000, "by_category": {"book": 15000, "pen": 2000}},
    }


def test_reading_commands_do_not_modify_the_database(demo_db: Path) -> None:
    before = fingerprint(demo_db)
    for command in (["status"], ["status", "--json"], ["dead"], ["dead", "--json"]):
        assert run(demo_db.parent, "--db", DB, *command).returncode == 0
    assert fingerprint(demo_db) == before


TOY_DETAIL = "unsupported category 'toy' (known: bag, book, pen)"


def test_dead_lists_attempts_last_error_detail_and_payload(demo_db: Path) -> None:
    letters = ok(demo_db.parent, "--db", DB, "dead", "--json")
    assert len(letters) == 1
    letter = letters[0]
    assert letter["event_id"] == "E0004"
    assert letter["attempts"] == 1
    assert letter["last_error"] == "invalid_payload"
    assert letter["detail"] == TOY_DETAIL  # new in issue 8: the reason in words beside the code
    assert letter["payload"] == {"category": "toy", "amount_cents": 3000}
    assert set(letter) == {"event_id", "attempts", "generation", "last_error", "detail", "payload"}
    proc = run(demo_db.parent, "--db", DB, "dead")
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("E0004"))
    row = lines[index]
    assert "invalid_payload" in row and '"toy"' in row and "3000" in row
    assert row.split()[1] == "1"  # attempts
    # New in issue 8: each letter with a detail gets a "why:" line under it.
    assert lines[index + 1] == f"          why: {TOY_DETAIL}"
    assert len(lines) == index + 2


def test_dead_prints_no_why_line_for_a_letter_without_detail(tmp_path: Path) -> None:
    from queue_core.clock import ModelClock
    from queue_core.store import Store

    write(tmp_path / "one.jsonl", GOOD_LINE)
    ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "one.jsonl")
    store = Store(tmp_path / DB, clock=ModelClock(1000), create=False)
    store.fail(store.claim(), "gave_up", permanent=True)  # a code without a detail
    assert ok(tmp_path, "--db", DB, "dead", "--json")[0]["detail"] is None
    proc = run(tmp_path, "--db", DB, "dead")
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("E0009") and "gave_up" in lines[-1]
    assert "why:" not in proc.stdout


def test_dead_on_a_queue_without_dead_letters(tmp_path: Path) -> None:
    write(tmp_path / "one.jsonl", GOOD_LINE)
    ok(tmp_path, "--db", DB, "enqueue", "one.jsonl")
    assert ok(tmp_path, "--db", DB, "dead", "--json") == []
    proc = run(tmp_path, "--db", DB, "dead")
    assert proc.returncode == 0 and "E0009" not in proc.stdout and proc.stdout.strip()


# ------------------------------------------------------------------ redrive

def test_redrive_a_dead_message(demo_db: Path) -> None:
    tmp = demo_db.parent
    assert ok(tmp, "--db", DB, "--now", 1001, "redrive", "E0004") == {"redriven": ["E0004"]}
    assert status(tmp)["messages"] == messages(ready=1, done=3)
    assert ok(tmp, "--db", DB, "dead", "--json") == []


@pytest.mark.parametrize(
    ("ids", "bad_id", "code"),
    [
        (["E0001"], "E0001", "not_dead"),
        (["E0004", "E0001"], "E0001", "not_dead"),
        (["E0001", "E0004"], "E0001", "not_dead"),
        (["E0004", "E9999"], "E9999", "unknown_event"),
        (["E9999"], "E9999", "unknown_event"),
        (["E0004", "nonsense"], "nonsense", "unknown_event"),
    ],
)
def test_redrive_is_all_or_none(demo_db: Path, ids: list[str], bad_id: str, code: str) -> None:
    tmp = demo_db.parent
    before, before_status = fingerprint(demo_db), status(tmp)
    before_dead = ok(tmp, "--db", DB, "dead", "--json")
    err = fails(tmp, "--db", DB, "--now", 1001, "redrive", *ids, code=code)
    assert bad_id in err
    assert fingerprint(demo_db) == before
    assert status(tmp) == before_status
    assert ok(tmp, "--db", DB, "dead", "--json") == before_dead


def test_redrive_the_same_dead_id_twice(demo_db: Path) -> None:
    tmp = demo_db.parent
    proc = run(tmp, "--db", DB, "--now", 1001, "redrive", "E0004", "E0004")
    assert proc.returncode == 0, proc.stderr
    assert status(tmp)["messages"] == messages(ready=1, done=3)


# --------------------------------------------------------------------- demo

def test_demo_json_has_every_number_of_the_reference_demo(tmp_path: Path) -> None:
    result = ok(tmp_path, "demo", "--json")
    assert list(result) == ["after_enqueue", "intermediate", "final", "after_reenqueue", "after_redrive"]
    assert result["after_enqueue"]["messages"] == messages(ready=4)
    assert result["after_enqueue"]["effects"]["count"] == 0
    assert result["intermediate"]["messages"] == messages(ready=1, leased=1, done=1, dead=1)
    assert result["intermediate"]["effects"] == {"count": 1, "total_cents": 10000, "by_category": {"book": 10000}}
    final = {"count": 3, "total_cents": 17000, "by_category": {"book": 15000, "pen": 2000}}
    assert result["final"]["messages"] == messages(done=3, dead=1)
    assert result["final"]["effects"] == final
    assert result["after_reenqueue"] == result["final"]
    assert result["after_redrive"]["messages"] == messages(done=4)
    assert result["after_redrive"]["effects"] == {
        "count": 4, "total_cents": 20000, "by_category": {"book": 15000, "pen": 2000, "toy": 3000}}
    assert list(tmp_path.iterdir()) == []  # the demo works in its own temporary folder


def test_demo_plain_mentions_the_crash(tmp_path: Path) -> None:
    proc = run(tmp_path, "demo")
    assert proc.returncode == 0 and proc.stderr == ""
    assert "os._exit(86)" in proc.stdout
    assert "total=20000" in proc.stdout and "total=17000" in proc.stdout


# ------------------------------------------------ help, version, refusals

def test_help_explains_the_batch_the_handler_and_the_exit_status(tmp_path: Path) -> None:
    from queue_core.cli import EXAMPLE_LINE
    from queue_core.ledger import DEFAULT_CATEGORIES, MAX_AMOUNT_CENTS, MIN_AMOUNT_CENTS

    proc = run(tmp_path, "--help")
    assert proc.returncode == 0 and proc.stderr == ""
    text = " ".join(proc.stdout.split())  # the help is wrapped; read it as one line
    assert f"\n  {EXAMPLE_LINE}\n" in proc.stdout  # the example stands on a line of its own
    assert '"event_id" and "payload"' in text and "E and four digits" in text
    assert f"one of {', '.join(sorted(DEFAULT_CATEGORIES))} " in text
    assert f"an integer {MIN_AMOUNT_CENTS}..{MAX_AMOUNT_CENTS} " in text
    assert ("Exit status: 0 success; 2 rejected input or usage error (nothing written); "
            "1 anything else; 130 interrupted.") in text
    assert '"queue-core: <code>: <what is wrong>"' in text
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    assert list(tmp_path.iterdir()) == []


def test_the_example_line_of_the_help_is_a_batch_the_handler_accepts(tmp_path: Path) -> None:
    from queue_core.envelope import EVENT_ID

    (example,) = [line.strip() for line in run(tmp_path, "--help").stdout.splitlines()
                  if line.startswith("  {")]
    event = json.loads(example)
    assert EVENT_ID.fullmatch(event["event_id"])
    write(tmp_path / "one.jsonl", example + "\n")
    assert ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "one.jsonl") == {"accepted": 1, "duplicates": 0}
    assert ok(tmp_path, "--db", DB, "--now", 1000, "work")["done"] == 1
    payload = event["payload"]
    assert status(tmp_path)["effects"]["by_category"] == {payload["category"]: payload["amount_cents"]}


def test_the_help_does_not_depend_on_the_terminal_width(tmp_path: Path) -> None:
    import os

    def help_with(columns: str) -> str:
        env = {**os.environ, "COLUMNS": columns}
        return subprocess.run([sys.executable, "-m", "queue_core", "--help"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60).stdout

    assert help_with("40") == help_with("200") == run(tmp_path, "--help").stdout


@pytest.mark.parametrize("args", [[], ["--db", DB], ["--now", "1000"]], ids=["bare", "--db", "--now"])
def test_no_command_prints_the_whole_help_on_stderr_and_exits_2(tmp_path: Path, args: list[str]) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == run(tmp_path, "--help").stdout + "queue-core: usage: no command given\n"
    assert list(tmp_path.iterdir()) == []


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    import queue_core

    proc = run(tmp_path, "--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"queue-core {queue_core.__version__}\n", "")
    assert list(tmp_path.iterdir()) == []


REFUSED = [
    (["demo", "--db", DB], "demo", "--db"),
    (["--db", DB, "demo"], "demo", "--db"),
    (["demo", "--json", "--now", "1000"], "demo", "--now"),
    (["--now", "1000", "demo", "--json"], "demo", "--now"),
    (["--db", DB, "demo", "--now", "5"], "demo", "--db or --now"),
    (["lab", "--db", DB], "lab", "--db"),
    (["lab", "normal", "--now", "1000"], "lab", "--now"),
    (["--db", DB, "--now", "1000", "lab", "--json"], "lab", "--db or --now"),
    (["lab", "early-ack", "--db=other.sqlite3"], "lab", "--db"),
]


@pytest.mark.parametrize(("args", "command", "options"), REFUSED, ids=[" ".join(a) for a, _, _ in REFUSED])
def test_demo_and_lab_refuse_db_and_now_and_write_nothing(
        tmp_path: Path, args: list[str], command: str, options: str) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"queue-core: usage: {command} does not take {options}: "
                           "it runs in a temporary folder of its own with a model clock\n")
    assert list(tmp_path.iterdir()) == []  # no database made, none touched


def test_the_help_of_demo_and_lab_does_not_offer_db_or_now(tmp_path: Path) -> None:
    for command in ("demo", "lab"):
        proc = run(tmp_path, command, "--help")
        assert proc.returncode == 0 and proc.stderr == ""
        assert "--db" not in proc.stdout and "--now" not in proc.stdout, command
    assert "--db PATH" in run(tmp_path, "status", "--help").stdout


# ------------------------------------------------------- usage and paths

@pytest.mark.parametrize(
    "args",
    [
        ["bogus"],
        [],
        ["status", "--bogus"],
        ["--now", "-1", "status"],
        ["status", "--now", "-1"],
        ["--now", "abc", "status"],
        ["--now", "1.5", "work"],
        ["work", "--lease-seconds", "0"],
        ["work", "--lease-seconds", "x"],
        ["work", "--max-messages", "-1"],
        ["enqueue"],
        ["redrive"],
        ["--now", "1_000", "status"],
        ["--now", " 1000", "status"],
        ["--now", "\u0661\u0660\u0660\u0660", "status"],
    ],
    ids=lambda args: " ".join(args) or "no-command",
)
def test_usage_errors_exit_2_without_traceback(tmp_path: Path, args: list[str]) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("usage: queue-core")
    assert proc.stderr.splitlines()[-1].startswith("queue-core: usage: ")  # the CLI's one error format
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--now", "99999999999999999999", "redrive", "E0004"],
        ["--now", "1000", "work", "--lease-seconds", "99999999999999999999"],
        ["--now", "9223372036854775807", "work", "--lease-seconds", "1"],
    ],
    ids=["now-redrive", "lease-huge", "now-plus-lease"],
)
def test_out_of_range_numbers_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "demo.jsonl")
    ok(tmp_path, "--db", DB, "--now", 1000, "work", "--max-messages", 4)  # E0004 dead, nothing else ready
    write(tmp_path / "more.jsonl", GOOD_LINE)
    ok(tmp_path, "--db", DB, "--now", 1000, "enqueue", "more.jsonl")
    proc = run(tmp_path, "--db", DB, *args)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2, proc.stderr


def _foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT)")
        conn.execute("INSERT INTO accounts (owner) VALUES ('alice')")
        conn.commit()
    finally:
        conn.close()


WRONG_PATHS = {
    # kind: (make, expected code for enqueue, expected code for the other commands)
    "text_file": (lambda p: p.write_text("just some notes\n" * 20), "not_a_queue_database", "not_a_queue_database"),
    "short_text_file": (lambda p: p.write_text("hi\n"), "not_a_queue_database", "not_a_queue_database"),
    "foreign_sqlite": (_foreign_sqlite, "not_a_queue_database", "not_a_queue_database"),
    "directory": (lambda p: p.mkdir(), "not_a_file", "not_a_file"),
    "missing_parent": (None, "cannot_open", "no_database"),
    "parent_is_a_file": (None, "cannot_open", "no_database"),
}
COMMANDS = [["enqueue", "one.jsonl"], ["status"], ["work"], ["dead", "--json"], ["redrive", "E0009"]]


@pytest.mark.parametrize("kind", list(WRONG_PATHS))
def test_a_path_that_is_not_a_queue_database_is_refused_untouched(tmp_path: Path, kind: str) -> None:
    make, enqueue_code, other_code = WRONG_PATHS[kind]
    write(tmp_path / "one.jsonl", GOOD_LINE)
    if kind == "missing_parent":
        target = tmp_path / "no" / "such" / "q.sqlite3"
    elif kind == "parent_is_a_file":
        write(tmp_path / "plain", "x")
        target = tmp_path / "plain" / "q.sqlite3"
    else:
        target = tmp_path / "target"
        make(target)
    watched = target if target.parent.is_dir() else tmp_path
    before = fingerprint(watched)
    before_plain = fingerprint(tmp_path / "plain") if kind == "parent_is_a_file" else None
    for command in COMMANDS:
        code = enqueue_code if command[0] == "enqueue" else other_code
        fails(tmp_path, "--db", target, *command, code=code)
        assert fingerprint(watched) == before, command
    assert not (tmp_path / "no").exists()
    if before_plain is not None:
        assert fingerprint(tmp_path / "plain") == before_plain


def test_an_empty_file_is_no_database_for_readers(tmp_path: Path) -> None:
    target = tmp_path / "empty.sqlite3"
    target.touch()
    before = fingerprint(target)
    for command in (["status"], ["work"], ["dead"]):
        proc = run(tmp_path, "--db", target, *command)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "not_a_queue_database" in proc.stderr or "no_database" in proc.stderr
        assert fingerprint(target) == before


@pytest.mark.parametrize("command", [c for c in COMMANDS if c[0] != "enqueue"], ids=lambda c: c[0])
def test_commands_on_a_missing_database_do_not_create_it(tmp_path: Path, command: list[str]) -> None:
    err = fails(tmp_path, "--db", "absent.sqlite3", *command, code="no_database")
    assert "absent.sqlite3" in err
    assert list(tmp_path.iterdir()) == []


def test_a_newer_schema_version_is_refused(demo_db: Path) -> None:
    tmp = demo_db.parent
    newer = tmp / "newer.sqlite3"
    shutil.copyfile(demo_db, newer)
    conn = sqlite3.connect(newer)
    try:
        conn.execute("PRAGMA user_version = 99")
        conn.commit()
    finally:
        conn.close()
    assert not Path(str(newer) + "-wal").exists()
    write(tmp / "one.jsonl", GOOD_LINE)
    before = fingerprint(newer)
    for command in COMMANDS:
        err = fails(tmp, "--db", newer, *command, code="schema_too_new")
        assert "99" in err
        assert fingerprint(newer) == before, command


def test_a_corrupt_queue_database_is_exit_1_without_traceback(demo_db: Path) -> None:
    tmp = demo_db.parent
    broken = tmp / "broken.sqlite3"
    data = bytearray(demo_db.read_bytes())
    assert len(data) > 8192
    data[4096:] = b"\xff" * (len(data) - 4096)  # keep the header, destroy every other page
    broken.write_bytes(bytes(data))
    for command in (["status"], ["work"]):
        err = fails(tmp, "--db", broken, "--now", 1000, *command, code="corrupt", status=1)
        assert "unexpected" not in err


# ------------------------------------------------------------ smoke: by hand

def test_the_reference_demo_by_hand(tmp_path: Path) -> None:
    """The reference demo walked with the CLI and --now.

    The CLI cannot inject E0002's temporary error nor E0003's crash, so by hand
    all three valid events complete in the first run.
    """
    def cli(*args: Any, **kw: Any) -> Any:
        return ok(tmp_path, "--db", DB, *args, **kw)

    write(tmp_path / "demo.jsonl", DEMO_LINES)
    assert cli("--now", 1000, "enqueue", "demo.jsonl") == {"accepted": 4, "duplicates": 1}
    assert status(tmp_path)["messages"] == messages(ready=4)

    assert cli("--now", 1000, "work", "--lease-seconds", 2) == {
        "claimed": 4, "done": 3, "retried": 0, "dead": 1, "lease_lost": 0}
    final = {
        "messages": messages(done=3, dead=1),
        "effects": {"count": 3, "total_cents": 17000, "by_category": {"book": 15000, "pen": 2000}},
    }
    assert status(tmp_path) == final

    assert cli("--now", 1001, "enqueue", "demo.jsonl") == {"accepted": 0, "duplicates": 5}
    assert status(tmp_path) == final

    letters = cli("dead", "--json")
    assert [(d["event_id"], d["last_error"], d["detail"], d["payload"]) for d in letters] == [
        ("E0004", "invalid_payload", TOY_DETAIL, {"category": "toy", "amount_cents": 3000})]

    # Redrive without fixing the cause: dead again, with a new generation.
    assert cli("--now", 1001, "redrive", "E0004") == {"redriven": ["E0004"]}
    assert status(tmp_path)["messages"] == messages(ready=1, done=3)
    assert cli("--now", 1001, "work", "--lease-seconds", 2) == {
        "claimed": 1, "done": 0, "retried": 0, "dead": 1, "lease_lost": 0}
    again = cli("dead", "--json")
    assert [(d["event_id"], d["attempts"], d["generation"]) for d in again] == [("E0004", 1, 2)]
    assert status(tmp_path) == final

    # The handler learns toy: redrive and work recover the money.
    assert cli("--now", 1002, "redrive", "E0004") == {"redriven": ["E0004"]}
    assert cli("--now", 1002, "work", "--lease-seconds", 2, "--category", "toy") == {
        "claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    assert status(tmp_path) == {
        "messages": messages(done=4),
        "effects": {"count": 4, "total_cents": 20000, "by_category": {"book": 15000, "pen": 2000, "toy": 3000}},
    }
    assert cli("dead", "--json") == []
    # Nothing is left to do, and a repeat changes nothing.
    assert cli("--now", 1003, "work", "--category", "toy")["claimed"] == 0
    assert cli("--now", 1003, "enqueue", "demo.jsonl") == {"accepted": 0, "duplicates": 5}
    assert status(tmp_path)["effects"]["total_cents"] == 20000
