"""The ``queue-core`` command line, run as a real subprocess on real databases.

Every command runs as ``python -m queue_core ...`` in ``tmp_path``; nothing is
mocked. The contract comes from SPEC.md and the CLI's documented behaviour:
exit 0 success, 2 rejected input or usage error, 1 anything else, and an
expected error never prints a traceback.

A test about the protocol as the CLI exposes it takes ``target`` (what
``--db`` names) and runs twice (tests/conformance/conftest.py): on the SQLite file
``q.sqlite3`` in the working directory, and on a fresh database of the
session's throwaway PostgreSQL server. A test about the SQLite file itself (a
missing file, a directory, a foreign or corrupt file, the default path) runs
on SQLite alone; where PostgreSQL has an equivalent (an unreachable server, a
database without a queue, a role that may not connect) it has its own test.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from queue_core import EnqueueResult, Handler, ModelClock, Store, ledger, work
from queue_core.engines import is_postgres_url

from ..postgres_server import PORT, SERVER_USER, Cluster
from ..support import DEMO_LINES

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
    """``status --json``'s counts, and its money where the ledger is installed (``work`` with its handler).

    Its metrics read the clock: test_status_json_shape checks them.
    """
    snap = ok(cwd, "--db", db, "status", "--json")
    assert set(snap) in ({"messages", "metrics"}, {"messages", "effects", "metrics"}), snap
    return {key: snap[key] for key in ("messages", "effects") if key in snap}


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


# ------------------------------------------------- the two engines' targets

@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str) -> str:
    """What ``--db`` names: ``q.sqlite3`` in the working directory, or the URL of a fresh PostgreSQL database."""
    if engine == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return DB


def is_url(target: str | Path) -> bool:
    return is_postgres_url(target)


def open_store(cwd: Path, target: str, **options: Any) -> Store:
    """The queue the CLI in ``cwd`` sees at ``target``, through the Python API."""
    return Store(target if is_url(target) else cwd / target, **options)


def state(cwd: Path, target: str) -> dict[str, Any]:
    """The counts and the money, read in-process (a subprocess costs 0.2 s, 0.5 s on PostgreSQL).

    The same shape as ``status()``; a test about the status command itself uses that.
    """
    with open_store(cwd, target, create=False) as store:
        return ledger.report(store).to_dict()


def pg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def pg_objects(url: str) -> list[tuple[str, ...]]:
    """The schema's relations (kind, name, version of the catalog row) and functions (by name).

    A relation's catalog row gets a new version (``xmin``) with any DDL on it.
    A function's version is left out here: the store's open rewrites it each
    time (see test_reading_commands_leave_the_postgresql_catalog_unchanged).
    """
    with pg_connect(url) as conn:
        relations = conn.execute(
            "SELECT c.relkind::text, c.relname::text, c.xmin::text FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
            "ORDER BY c.relname").fetchall()
        functions = conn.execute(
            "SELECT 'function', p.proname::text FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema() "
            "ORDER BY p.proname").fetchall()
    return [tuple(row) for row in relations + functions]


def pg_footprint(url: str) -> tuple[Any, ...]:
    """Every row of every table of the schema with its version (xmin, ctid), and the schema's objects.

    An UPDATE writes a new row version even with the same values, so a
    rewrite shows here as an mtime does on SQLite; a row lock does not.
    """
    from psycopg import sql

    objects = pg_objects(url)
    rows: dict[str, list[Any]] = {}
    with pg_connect(url) as conn:
        for kind, name, *_ in objects:
            if kind == "r":
                query = sql.SQL("SELECT xmin::text, ctid::text, t::text FROM {} AS t ORDER BY ctid")
                rows[name] = conn.execute(query.format(sql.Identifier(name))).fetchall()
    return ("postgresql", objects, rows)


def footprint(cwd: Path, target: str) -> tuple[Any, ...]:
    """What any write to the queue would change: the SQLite file and its siblings, or every row and object."""
    return pg_footprint(target) if is_url(target) else fingerprint(cwd / target)


def holds_a_queue(cwd: Path, target: str) -> bool:
    """Whether anything was created at ``target``: the file, or any object in the database."""
    return bool(pg_objects(target)) if is_url(target) else (cwd / target).exists()


def effect_rows(cwd: Path, target: str) -> list[tuple[str, int]]:
    """Effects per event, read with the engine's own driver (not through queue_core)."""
    query = "SELECT event_id, count(*) FROM effects GROUP BY event_id"
    if is_url(target):
        with pg_connect(target) as conn:
            rows = conn.execute(query).fetchall()
    else:
        conn = sqlite3.connect(cwd / target)
        try:
            rows = conn.execute(query).fetchall()
        finally:
            conn.close()
    return sorted((str(event_id), int(count)) for event_id, count in rows)


def dead_letters(cwd: Path, target: str) -> list[Any]:
    """Every field of every dead letter, read in-process."""
    with open_store(cwd, target, create=False) as store:
        return list(store.dead_letters())


def make_demo(cwd: Path, target: str) -> None:
    """The by-hand demo, made in-process as the CLI makes it: E0001..E0003 done, E0004 (toy) dead.

    test_the_reference_demo_by_hand walks the same steps with the CLI.
    """
    with open_store(cwd, target, clock=ModelClock(1000)) as store:
        ledger.install(store)  # as the CLI's enqueue does
        assert store.enqueue(DEMO_LINES) == EnqueueResult(accepted=4, duplicates=1)
        summary = work(store, Handler.with_categories([]), lease_seconds=2)  # the CLI's work, no --category
    assert (summary.claimed, summary.done, summary.dead) == (4, 3, 1)


@pytest.fixture
def demo(tmp_path: Path, target: str) -> Path:
    """The working directory of a queue (at ``target``) after the by-hand demo."""
    make_demo(tmp_path, target)
    return tmp_path


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    """The SQLite file of a queue after the by-hand demo (for the tests of the file itself)."""
    make_demo(tmp_path, DB)
    return tmp_path / DB


# ------------------------------------------------------------------ enqueue

def test_enqueue_prints_exactly_accepted_and_duplicates(tmp_path: Path, target: str) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    proc = run(tmp_path, "--db", target, "--now", 1000, "enqueue", "demo.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '{"accepted": 4, "duplicates": 1}\n'
    assert proc.stderr == ""
    assert state(tmp_path, target)["messages"] == messages(ready=4)


def test_default_database_is_queue_sqlite3_in_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    assert ok(tmp_path, "enqueue", "demo.jsonl") == {"accepted": 4, "duplicates": 1}
    assert (tmp_path / "queue.sqlite3").is_file()
    assert ok(tmp_path, "status", "--json")["messages"] == messages(ready=4)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fails(elsewhere, "status", code="no_database")
    assert not (elsewhere / "queue.sqlite3").exists()


def test_enqueue_reads_standard_input(tmp_path: Path, target: str) -> None:
    data = b"\xef\xbb\xbf" + DEMO_LINES.replace("\n", "\r\n").encode("utf-8") + b"\r\n   \r\n"
    assert ok(tmp_path, "--db", target, "enqueue", "-", input=data) == {"accepted": 4, "duplicates": 1}
    assert state(tmp_path, target)["messages"] == messages(ready=4)


@pytest.mark.parametrize("position", ["before", "after", "mixed"])
def test_global_options_before_or_after_the_command(tmp_path: Path, target: str, position: str) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)

    def cli(command: list[Any], now: int) -> list[Any]:
        if position == "before":
            return ["--db", target, "--now", now, *command]
        if position == "after":
            return [*command, "--db", target, "--now", now]
        return ["--db", target, command[0], "--now", now, *command[1:]]

    assert ok(tmp_path, *cli(["enqueue", "demo.jsonl"], 1000)) == {"accepted": 4, "duplicates": 1}
    assert not (tmp_path / "queue.sqlite3").exists()  # --db was honoured
    # --now is honoured: the messages became available at 1000, not earlier.
    assert ok(tmp_path, *cli(["work"], 999))["claimed"] == 0
    assert ok(tmp_path, *cli(["work", "--category", "toy"], 1000))["done"] == 4
    assert ok(tmp_path, *cli(["status", "--json"], 1000))["effects"]["total_cents"] == 20000


def test_without_now_the_clock_is_the_real_one(tmp_path: Path, target: str) -> None:
    """Without --now: the system clock on SQLite, the database server's on PostgreSQL (here the same host)."""
    write(tmp_path / "one.jsonl", GOOD_LINE)
    before = int(time.time())
    assert ok(tmp_path, "--db", target, "enqueue", "one.jsonl") == {"accepted": 1, "duplicates": 0}
    with open_store(tmp_path, target, create=False) as store:
        assert before - 5 <= store.message("E0009").available_at <= int(time.time()) + 5
        lease = store.claim()
        assert lease is not None
        store.fail(lease, "gave_up", permanent=True)  # dead, so that redrive has a message to move
    # A model time long before now sees nothing to claim: the redriven message is available from now on.
    assert ok(tmp_path, "--db", target, "redrive", "E0009") == {"redriven": ["E0009"], "count": 1}
    with open_store(tmp_path, target, create=False) as store:
        assert before - 5 <= store.message("E0009").available_at <= int(time.time()) + 5
    assert ok(tmp_path, "--db", target, "--now", 1000, "work")["claimed"] == 0
    assert ok(tmp_path, "--db", target, "work") == {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    assert state(tmp_path, target)["messages"] == messages(done=1)


BAD_BATCHES: dict[str, tuple[str | bytes, int, str]] = {
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
def test_rejected_batch_leaves_an_existing_database_unchanged(demo: Path, target: str, name: str) -> None:
    text: str | bytes
    if name == "conflict_with_stored":
        text, line, code = GOOD_LINE + DEMO_LINES.splitlines()[2].replace("2000", "2001") + "\n", 2, "event_conflict"
    else:
        text, line, code = BAD_BATCHES[name]
    write(demo / "bad.jsonl", text)
    before, before_state = footprint(demo, target), state(demo, target)
    err = fails(demo, "--db", target, "--now", 2000, "enqueue", "bad.jsonl", code=code)
    assert f"line {line}" in err
    assert footprint(demo, target) == before
    assert state(demo, target) == before_state


@pytest.mark.one_engine  # the batch is refused before the database is opened
@pytest.mark.parametrize("name", sorted(BAD_BATCHES))
def test_rejected_batch_does_not_create_the_database(tmp_path: Path, target: str, name: str) -> None:
    text, line, code = BAD_BATCHES[name]
    write(tmp_path / "bad.jsonl", text)
    before = sorted(p.name for p in tmp_path.iterdir())
    err = fails(tmp_path, "--db", target, "enqueue", "bad.jsonl", code=code)
    assert f"line {line}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not holds_a_queue(tmp_path, target)


def test_rejected_batch_on_stdin_does_not_create_the_database(tmp_path: Path, target: str) -> None:
    err = fails(tmp_path, "--db", target, "enqueue", "-", input=GOOD_LINE + "{oops\n", code="invalid_json")
    assert "line 2" in err
    assert list(tmp_path.iterdir()) == []
    assert not holds_a_queue(tmp_path, target)
    # Negative control: the check does see a queue once one is made.
    ok(tmp_path, "--db", target, "enqueue", "-", input=GOOD_LINE)
    assert holds_a_queue(tmp_path, target)


def test_enqueue_of_a_file_that_does_not_exist(tmp_path: Path, target: str) -> None:
    err = fails(tmp_path, "--db", target, "enqueue", "missing.jsonl", code="cannot_read")
    assert "missing.jsonl" in err
    (tmp_path / "folder").mkdir()
    err = fails(tmp_path, "--db", target, "enqueue", "folder", code="cannot_read")
    assert "folder" in err
    assert not holds_a_queue(tmp_path, target)


def test_enqueue_of_a_file_over_the_size_limit_is_rejected(tmp_path: Path, target: str) -> None:
    write(tmp_path / "big.jsonl", GOOD_LINE + " " * 1_000_000 + "\n")
    fails(tmp_path, "--db", target, "enqueue", "big.jsonl", code="file_too_large")
    assert not holds_a_queue(tmp_path, target)


# --------------------------------------------------------------------- work

def test_work_prints_a_summary_and_category_adds_to_the_defaults(tmp_path: Path, target: str) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    ok(tmp_path, "--db", target, "--now", 1000, "enqueue", "demo.jsonl")
    summary = ok(tmp_path, "--db", target, "--now", 1000, "work", "--category", "toy", "--category", "hat")
    assert set(summary) == SUMMARY_KEYS
    assert summary == {"claimed": 4, "done": 4, "retried": 0, "dead": 0, "lease_lost": 0}
    effects = state(tmp_path, target)["effects"]
    # book and pen still work next to the added toy: --category adds, it does not replace.
    assert effects == {"count": 4, "total_cents": 20000,
                       "by_category": {"book": 15000, "pen": 2000, "toy": 3000}}


def test_work_max_messages_completes_what_it_claims(tmp_path: Path, target: str) -> None:
    write(tmp_path / "demo.jsonl", DEMO_LINES)
    ok(tmp_path, "--db", target, "--now", 1000, "enqueue", "demo.jsonl")
    assert ok(tmp_path, "--db", target, "--now", 1000, "work", "--max-messages", 0)["claimed"] == 0
    summary = ok(tmp_path, "--db", target, "--now", 1000, "work", "--max-messages", 1)
    assert summary == {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    snap = state(tmp_path, target)
    assert snap["messages"] == messages(ready=3, done=1)
    assert snap["effects"]["by_category"] == {"book": 10000}


def test_work_on_an_empty_queue_claims_nothing(tmp_path: Path, target: str) -> None:
    write(tmp_path / "empty.jsonl", "\n  \n")
    assert ok(tmp_path, "--db", target, "enqueue", "empty.jsonl") == {"accepted": 0, "duplicates": 0}
    assert ok(tmp_path, "--db", target, "work") == dict.fromkeys(SUMMARY_KEYS, 0)


def test_lease_expiry_by_hand(tmp_path: Path, target: str) -> None:
    """A claim that was never completed (set up with the Python API) expires lazily."""
    write(tmp_path / "one.jsonl", DEMO_LINES.splitlines()[0] + "\n")
    ok(tmp_path, "--db", target, "--now", 1000, "enqueue", "one.jsonl")
    with open_store(tmp_path, target, clock=ModelClock(1000), create=False) as store:
        lease = store.claim(2)
    assert lease is not None and lease.generation == 1
    assert state(tmp_path, target)["messages"] == messages(leased=1)
    assert ok(tmp_path, "--db", target, "--now", 1001, "work")["claimed"] == 0  # lease still valid
    assert status(tmp_path, target)["messages"] == messages(leased=1)  # status applies no expiry
    assert ok(tmp_path, "--db", target, "--now", 1002, "work") == {
        "claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    snap = state(tmp_path, target)
    assert snap["messages"] == messages(done=1)
    assert snap["effects"] == {"count": 1, "total_cents": 10000, "by_category": {"book": 10000}}


def test_two_workers_at_once_on_one_queue(tmp_path: Path, target: str) -> None:
    lines = "".join(
        f'{{"event_id": "E{i:04d}", "payload": {{"category": "book", "amount_cents": 100}}}}\n'
        for i in range(1, 201)
    )
    write(tmp_path / "many.jsonl", lines)
    assert ok(tmp_path, "--db", target, "--now", 1000, "enqueue", "many.jsonl") == {"accepted": 200, "duplicates": 0}
    argv = [sys.executable, "-m", "queue_core", "--db", target, "--now", "1000", "work"]
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
    snap = state(tmp_path, target)
    assert snap["messages"] == messages(done=200)
    assert snap["effects"] == {"count": 200, "total_cents": 20000, "by_category": {"book": 20000}}
    assert effect_rows(tmp_path, target) == [(f"E{i:04d}", 1) for i in range(1, 201)]


# ------------------------------------------------------------ status, dead

def test_status_prints_a_readable_table(demo: Path, target: str) -> None:
    proc = run(demo, "--db", target, "status")
    assert proc.returncode == 0 and proc.stderr == ""
    with pytest.raises(json.JSONDecodeError):
        json.loads(proc.stdout)
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines() if line.strip()}
    assert rows["ready"] == ["0"] and rows["leased"] == ["0"]
    assert rows["done"] == ["3"] and rows["dead"] == ["1"]
    assert rows["book"] == ["15000"] and rows["pen"] == ["2000"]
    assert "17000" in proc.stdout


def test_status_json_shape(demo: Path, target: str) -> None:
    snap = status(demo, target)
    assert snap == {
        "messages": {"ready": 0, "leased": 0, "done": 3, "dead": 1},
        "effects": {"count": 3, "total_cents": 17000, "by_category": {"book": 15000, "pen": 2000}},
    }
    # The metrics beside them, at a model time: without --now they read the real clock.
    full = ok(demo, "--db", target, "--now", 1010, "status", "--json")
    assert {key: full[key] for key in ("messages", "effects")} == snap
    assert full["metrics"] == {
        "now": 1010, "oldest_ready_age": None, "dead_attempts": {"1": 1},  # E0004, dead after its one attempt
        "enqueue_to_done": {"count": 3, "p50": 0, "p95": 0, "max": 0, "sum": 0},  # enqueued and done at 1000
        "expired_leases": 0, "pruned": 0,
        "counters": {"processed": 3, "retried": 0, "dead": 1, "expired_leases": 0},
    }


def test_reading_commands_do_not_modify_the_database(demo: Path, target: str) -> None:
    before = footprint(demo, target)
    for command in (["status"], ["status", "--json"], ["dead"], ["dead", "--json"]):
        assert run(demo, "--db", target, *command).returncode == 0
    assert footprint(demo, target) == before
    # Negative control: the footprint does see a write (the redrive rewrites E0004's row).
    ok(demo, "--db", target, "--now", 1001, "redrive", "E0004")
    assert footprint(demo, target) != before


TOY_DETAIL = "unsupported category 'toy' (known: bag, book, pen)"


def test_dead_lists_attempts_last_error_detail_and_payload(demo: Path, target: str) -> None:
    letters = ok(demo, "--db", target, "dead", "--json")
    assert len(letters) == 1
    letter = letters[0]
    assert letter["event_id"] == "E0004"
    assert letter["attempts"] == 1
    assert letter["last_error"] == "invalid_payload"
    assert letter["detail"] == TOY_DETAIL  # new in issue 8: the reason in words beside the code
    assert letter["payload"] == {"category": "toy", "amount_cents": 3000}
    assert set(letter) == {"event_id", "attempts", "generation", "last_error", "detail", "payload"}
    proc = run(demo, "--db", target, "dead")
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("E0004"))
    row = lines[index]
    assert "invalid_payload" in row and '"toy"' in row and "3000" in row
    assert row.split()[1] == "1"  # attempts
    # New in issue 8: each letter with a detail gets a "why:" line under it.
    assert lines[index + 1] == f"          why: {TOY_DETAIL}"
    assert len(lines) == index + 2


def test_dead_prints_no_why_line_for_a_letter_without_detail(tmp_path: Path, target: str) -> None:
    write(tmp_path / "one.jsonl", GOOD_LINE)
    ok(tmp_path, "--db", target, "--now", 1000, "enqueue", "one.jsonl")
    with open_store(tmp_path, target, clock=ModelClock(1000), create=False) as store:
        lease = store.claim()
        assert lease is not None
        store.fail(lease, "gave_up", permanent=True)  # a code without a detail
    assert ok(tmp_path, "--db", target, "dead", "--json")[0]["detail"] is None
    proc = run(tmp_path, "--db", target, "dead")
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("E0009") and "gave_up" in lines[-1]
    assert "why:" not in proc.stdout


def test_dead_on_a_queue_without_dead_letters(tmp_path: Path, target: str) -> None:
    write(tmp_path / "one.jsonl", GOOD_LINE)
    ok(tmp_path, "--db", target, "enqueue", "one.jsonl")
    assert ok(tmp_path, "--db", target, "dead", "--json") == []
    proc = run(tmp_path, "--db", target, "dead")
    assert proc.returncode == 0 and "E0009" not in proc.stdout and proc.stdout.strip()


# ------------------------------------------------------------------ redrive

def test_redrive_a_dead_message(demo: Path, target: str) -> None:
    assert ok(demo, "--db", target, "--now", 1001, "redrive", "E0004") == {"redriven": ["E0004"], "count": 1}
    assert state(demo, target)["messages"] == messages(ready=1, done=3)
    assert ok(demo, "--db", target, "dead", "--json") == []


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
def test_redrive_is_all_or_none(demo: Path, target: str, ids: list[str], bad_id: str, code: str) -> None:
    before, before_state = footprint(demo, target), state(demo, target)
    before_dead = dead_letters(demo, target)
    err = fails(demo, "--db", target, "--now", 1001, "redrive", *ids, code=code)
    assert bad_id in err
    assert footprint(demo, target) == before
    assert state(demo, target) == before_state
    assert dead_letters(demo, target) == before_dead


def test_redrive_the_same_dead_id_twice(demo: Path, target: str) -> None:
    proc = run(demo, "--db", target, "--now", 1001, "redrive", "E0004", "E0004")
    assert proc.returncode == 0, proc.stderr
    assert state(demo, target)["messages"] == messages(ready=1, done=3)


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
    from queue_core.app.ledger import DEFAULT_CATEGORIES, MAX_AMOUNT_CENTS, MIN_AMOUNT_CENTS

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


@contextlib.contextmanager
def held(cwd: Path, target: str) -> Iterator[None]:
    """Another client holds what every write needs: SQLite's write lock, or the messages table on PostgreSQL."""
    if is_url(target):
        conn = pg_connect(target)
        try:
            conn.execute("BEGIN")
            conn.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
            yield
        finally:
            conn.close()
        return
    lite = sqlite3.connect(cwd / target, isolation_level=None)
    try:
        lite.execute("BEGIN IMMEDIATE")
        yield
    finally:
        lite.close()


@pytest.mark.parametrize("seconds", ["0", "0.5"])
def test_busy_timeout_bounds_the_wait_for_a_held_database(tmp_path: Path, target: str, seconds: str) -> None:
    ok(tmp_path, "--db", target, "enqueue", "-", input=GOOD_LINE)
    with held(tmp_path, target):
        # Without the option the command would wait 60 s, past run()'s timeout of 30.
        proc = run(tmp_path, "--db", target, "--busy-timeout", seconds, "work", timeout=30)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.startswith("queue-core: database_busy: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert state(tmp_path, target)["messages"] == messages(ready=1)  # nothing half-done
    assert ok(tmp_path, "--db", target, "--busy-timeout", seconds, "work")["done"] == 1  # released: it works


def test_the_example_line_of_the_help_is_a_batch_the_handler_accepts(tmp_path: Path, target: str) -> None:
    from queue_core.envelope import EVENT_ID

    (example,) = [line.strip() for line in run(tmp_path, "--help").stdout.splitlines()
                  if line.startswith("  {")]
    event = json.loads(example)
    assert EVENT_ID.fullmatch(event["event_id"])
    write(tmp_path / "one.jsonl", example + "\n")
    assert ok(tmp_path, "--db", target, "--now", 1000, "enqueue", "one.jsonl") == {"accepted": 1, "duplicates": 0}
    assert ok(tmp_path, "--db", target, "--now", 1000, "work")["done"] == 1
    payload = event["payload"]
    assert state(tmp_path, target)["effects"]["by_category"] == {payload["category"]: payload["amount_cents"]}


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
    (["--busy-timeout", "1", "demo"], "demo", "--busy-timeout"),
    (["lab", "--busy-timeout", "0"], "lab", "--busy-timeout"),
]


@pytest.mark.parametrize(("args", "command", "options"), REFUSED, ids=[" ".join(a) for a, _, _ in REFUSED])
def test_demo_and_lab_refuse_db_and_now_and_write_nothing(
        tmp_path: Path, args: list[str], command: str, options: str) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"queue-core: usage: {command} does not take {options}: "
                           "it makes its own temporary folder and model clock\n")
    assert list(tmp_path.iterdir()) == []  # no database made, none touched


def test_the_help_of_demo_and_lab_does_not_offer_db_or_now(tmp_path: Path) -> None:
    for command in ("demo", "lab"):
        proc = run(tmp_path, command, "--help")
        assert proc.returncode == 0 and proc.stderr == ""
        assert "--db" not in proc.stdout and "--now" not in proc.stdout, command
        assert "--busy-timeout" not in proc.stdout, command
    assert "--db PATH" in run(tmp_path, "status", "--help").stdout
    assert "--busy-timeout SECONDS" in run(tmp_path, "work", "--help").stdout


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
        ["--busy-timeout", "-1", "status"],
        ["--busy-timeout", "3601", "status"],
        ["status", "--busy-timeout", "1e3"],
        ["work", "--busy-timeout", "x"],
        ["work", "--busy-timeout"],
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


@pytest.mark.one_engine  # a usage error, before the database is opened
@pytest.mark.parametrize(
    "args",
    [
        ["--now", "99999999999999999999", "redrive", "E0004"],
        ["--now", "1000", "work", "--lease-seconds", "99999999999999999999"],
        ["--now", "9223372036854775807", "work", "--lease-seconds", "1"],
    ],
    ids=["now-redrive", "lease-huge", "now-plus-lease"],
)
def test_out_of_range_numbers_are_usage_errors(demo: Path, target: str, args: list[str]) -> None:
    with open_store(demo, target, clock=ModelClock(1000), create=False) as store:
        store.enqueue(GOOD_LINE)  # E0004 dead, E0009 ready: something for redrive and work to act on
    before = footprint(demo, target)
    proc = run(demo, "--db", target, *args)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert footprint(demo, target) == before  # rejected input: nothing written


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


# ------------------------------------- PostgreSQL: the server and the database

def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def as_role(url: str, role: str) -> str:
    """The same database's URL, logging in as ``role`` instead of the server's superuser."""
    marker = f"//{SERVER_USER}@"
    assert marker in url, url
    return url.replace(marker, f"//{role}@", 1)


@pytest.fixture
def make_role(postgres_url: str) -> Iterator[Callable[[str, str], str]]:
    """Create a role (a name unique to this test's database, then its options); return its URL. Dropped after."""
    made: list[str] = []

    def make(suffix: str, options: str) -> str:
        name = f"{database_name(postgres_url)}_{suffix}"  # test_<n>_<suffix>: made here, never input
        with pg_connect(postgres_url) as conn:
            conn.execute(f"CREATE ROLE {name} {options}")
        made.append(name)
        return as_role(postgres_url, name)

    yield make
    with pg_connect(postgres_url) as conn:
        for name in made:
            conn.execute(f"DROP OWNED BY {name}")  # its privileges in this database
            conn.execute(f"DROP ROLE {name}")


def _no_server(tmp_path: Path, url: str, make_role: Callable[[str, str], str]) -> tuple[str, str]:
    folder = tmp_path / "no-server"  # a socket directory in which no server listens
    folder.mkdir()
    return f"postgresql://{SERVER_USER}@/queue?host={folder}&port={PORT}", "No such file or directory"


def _no_such_database(tmp_path: Path, url: str, make_role: Callable[[str, str], str]) -> tuple[str, str]:
    missing = url.replace(f"/{database_name(url)}?", "/no_such_database?", 1)
    return missing, 'database "no_such_database" does not exist'


def _no_such_role(tmp_path: Path, url: str, make_role: Callable[[str, str], str]) -> tuple[str, str]:
    return as_role(url, "nobody_here"), 'role "nobody_here" does not exist'


def _role_may_not_log_in(tmp_path: Path, url: str, make_role: Callable[[str, str], str]) -> tuple[str, str]:
    return make_role("nologin", "NOLOGIN"), "is not permitted to log in"


def _no_connect_privilege(tmp_path: Path, url: str, make_role: Callable[[str, str], str]) -> tuple[str, str]:
    with pg_connect(url) as conn:
        conn.execute(f"REVOKE CONNECT ON DATABASE {database_name(url)} FROM PUBLIC")
    return make_role("outsider", "LOGIN"), "CONNECT privilege"


UNREACHABLE = {
    # kind: builds (URL, what the server or libpq says, which the message must pass on)
    "no_server": _no_server,
    "no_such_database": _no_such_database,
    "no_such_role": _no_such_role,
    "role_may_not_log_in": _role_may_not_log_in,
    "no_connect_privilege": _no_connect_privilege,
}


@pytest.mark.parametrize("kind", list(UNREACHABLE))
def test_a_postgresql_database_it_cannot_connect_to_is_exit_1_without_traceback(
        tmp_path: Path, postgres_url: str, make_role: Callable[[str, str], str], kind: str) -> None:
    """SQLite's missing file or unreadable path, on PostgreSQL: the connection itself is refused.

    Every command (also enqueue, which would create a queue) fails with
    ``cannot_connect`` and exit 1, passes on what the server said, and
    creates nothing, neither in the database nor in the working directory.
    """
    url, reason = UNREACHABLE[kind](tmp_path, postgres_url, make_role)
    write(tmp_path / "one.jsonl", GOOD_LINE)
    listing = sorted(p.name for p in tmp_path.iterdir())
    commands = COMMANDS if kind == "no_server" else [["enqueue", "one.jsonl"], ["status"]]
    for command in commands:
        err = fails(tmp_path, "--db", url, "--now", 1000, *command, code="cannot_connect", status=1)
        assert err.startswith("queue-core: cannot_connect: postgresql://") and err.count("\n") == 1, err
        assert reason in err and "unexpected" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == listing
    assert pg_objects(postgres_url) == []


@pytest.mark.parametrize(
    "secret_in",
    ["userinfo", "query"])
def test_a_password_in_the_url_is_never_printed(tmp_path: Path, postgres_cluster: Cluster, secret_in: str) -> None:
    # The database does not exist, so that the command fails and prints the URL it was given.
    if secret_in == "userinfo":
        url = f"postgresql://{SERVER_USER}:s3cr3t-pw@/no_such_database?host={postgres_cluster.root}&port={PORT}"
    else:
        url = (f"postgresql://{SERVER_USER}@/no_such_database?host={postgres_cluster.root}&port={PORT}"
               "&password=s3cr3t-pw")
    err = fails(tmp_path, "--db", url, "status", code="cannot_connect", status=1)
    assert "no_such_database" in err  # the message does name the database
    assert "s3cr3t-pw" not in err, err


@pytest.mark.parametrize("command", [c for c in COMMANDS if c[0] != "enqueue"], ids=lambda c: c[0])
def test_commands_on_a_postgresql_database_without_a_queue_do_not_create_one(
        tmp_path: Path, postgres_url: str, command: list[str]) -> None:
    err = fails(tmp_path, "--db", postgres_url, *command, code="no_database")
    assert f"no queue database at postgresql://{SERVER_USER}@/{database_name(postgres_url)}" in err
    assert pg_objects(postgres_url) == []
    assert list(tmp_path.iterdir()) == []


def test_a_postgresql_database_of_another_application_gets_the_queue_beside_its_tables(
        tmp_path: Path, postgres_url: str) -> None:
    """Unlike an SQLite file, a PostgreSQL database is shared: enqueue adds the queue's tables to it.

    A command that must not create the queue refuses it (``no_database``)
    and leaves the other application's tables as they were; enqueue creates
    the queue beside them, without touching them either.
    """
    with pg_connect(postgres_url) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT)")
        conn.execute("INSERT INTO accounts VALUES (1, 'alice')")
    foreign = pg_footprint(postgres_url)
    for command in (["status"], ["work"], ["dead", "--json"], ["redrive", "E0009"]):
        fails(tmp_path, "--db", postgres_url, *command, code="no_database")
        assert pg_footprint(postgres_url) == foreign, command
    write(tmp_path / "one.jsonl", GOOD_LINE)
    assert ok(tmp_path, "--db", postgres_url, "--now", 1000, "enqueue", "one.jsonl") == {
        "accepted": 1, "duplicates": 0}
    after = pg_footprint(postgres_url)
    made = {name for _, name, *_ in after[1]}
    # the queue's tables; the reference application's effects only once work runs it
    assert {"messages", "queue_core_schema"} <= made and "effects" not in made
    assert after[2]["accounts"] == foreign[2]["accounts"]  # the same rows, not even rewritten
    def theirs(objects: list[tuple[str, ...]]) -> list[tuple[str, ...]]:  # accounts and accounts_pkey
        return [o for o in objects if o[1].startswith("accounts")]

    assert theirs(after[1]) == theirs(foreign[1])  # their catalog rows too: no DDL touched them
    assert state(tmp_path, postgres_url)["messages"] == messages(ready=1)


def test_a_newer_schema_version_is_refused_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    make_demo(tmp_path, postgres_url)
    with pg_connect(postgres_url) as conn:
        conn.execute("UPDATE queue_core_schema SET version = 99")
    write(tmp_path / "one.jsonl", GOOD_LINE)
    before = pg_footprint(postgres_url)
    for command in COMMANDS:
        err = fails(tmp_path, "--db", postgres_url, *command, code="schema_too_new")
        assert "99" in err
        assert pg_footprint(postgres_url) == before, command


def test_demo_and_lab_refuse_a_postgresql_url_and_touch_nothing(tmp_path: Path, postgres_url: str) -> None:
    for command in ("demo", "lab"):
        proc = run(tmp_path, command, "--db", postgres_url)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (f"queue-core: usage: {command} does not take --db: "
                               "it makes its own temporary folder and model clock\n")
    assert pg_objects(postgres_url) == []
    assert list(tmp_path.iterdir()) == []


# On PostgreSQL as on SQLite: opening a current queue writes nothing (so a role
# that may only read can read), a queue that lost its table is an error, and a
# table of another application is refused in one line.

def test_reading_commands_leave_the_postgresql_catalog_unchanged(tmp_path: Path, postgres_url: str) -> None:
    make_demo(tmp_path, postgres_url)
    query = ("SELECT p.proname::text, p.xmin::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
             "WHERE n.nspname = current_schema() ORDER BY 1")
    with pg_connect(postgres_url) as conn:
        before = conn.execute(query).fetchall()
    # the schema's functions (version 8's triggers' among them), so the check can fail
    assert [name for name, _ in before] == ["queue_core_count_delete", "queue_core_count_redrive",
                                            "queue_core_count_retry", "queue_core_json_type"]
    for command in (["status"], ["dead", "--json"]):
        assert run(tmp_path, "--db", postgres_url, *command).returncode == 0
    with pg_connect(postgres_url) as conn:
        assert conn.execute(query).fetchall() == before


def test_a_role_that_may_only_read_can_run_the_reading_commands(
        tmp_path: Path, postgres_url: str, make_role: Callable[[str, str], str]) -> None:
    make_demo(tmp_path, postgres_url)
    reader = make_role("reader", "LOGIN")
    with pg_connect(postgres_url) as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {database_name(postgres_url)}_reader")
    assert status(tmp_path, reader) == status(tmp_path, postgres_url)
    assert ok(tmp_path, "--db", reader, "dead", "--json") == ok(tmp_path, "--db", postgres_url, "dead", "--json")


def test_a_queue_that_lost_its_messages_table_is_an_error_not_an_empty_queue(
        tmp_path: Path, postgres_url: str) -> None:
    """SQLite's corrupt file, on PostgreSQL: a queue whose ``messages`` table is gone."""
    make_demo(tmp_path, postgres_url)
    with pg_connect(postgres_url) as conn:
        conn.execute("DROP TABLE messages CASCADE")
    before = pg_footprint(postgres_url)
    for command in (["status"], ["work"]):
        proc = run(tmp_path, "--db", postgres_url, "--now", 1000, *command)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, (command, proc.stdout, proc.stderr)
        assert "unexpected" not in proc.stderr
        assert pg_footprint(postgres_url) == before, command


def test_a_messages_table_of_another_application_is_refused_cleanly(tmp_path: Path, postgres_url: str) -> None:
    """SQLite's foreign file, on PostgreSQL: the database has a ``messages`` table that is not the queue's."""
    with pg_connect(postgres_url) as conn:
        conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO messages VALUES (1, 'hello')")
    write(tmp_path / "one.jsonl", GOOD_LINE)
    before = pg_footprint(postgres_url)
    for command in COMMANDS:
        proc = run(tmp_path, "--db", postgres_url, "--now", 1000, *command)
        assert proc.returncode in (1, 2) and proc.stdout == "", (command, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr and "unexpected" not in proc.stderr, (command, proc.stderr)
        assert proc.stderr.startswith("queue-core: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert pg_footprint(postgres_url) == before, command


# ------------------------------------------------------------ smoke: by hand

def test_the_reference_demo_by_hand(tmp_path: Path, target: str) -> None:
    """The reference demo walked with the CLI and --now.

    The CLI cannot inject E0002's temporary error nor E0003's crash, so by hand
    all three valid events complete in the first run.
    """
    def cli(*args: Any, **kw: Any) -> Any:
        return ok(tmp_path, "--db", target, *args, **kw)

    write(tmp_path / "demo.jsonl", DEMO_LINES)
    assert cli("--now", 1000, "enqueue", "demo.jsonl") == {"accepted": 4, "duplicates": 1}
    assert status(tmp_path, target)["messages"] == messages(ready=4)

    assert cli("--now", 1000, "work", "--lease-seconds", 2) == {
        "claimed": 4, "done": 3, "retried": 0, "dead": 1, "lease_lost": 0}
    final = {
        "messages": messages(done=3, dead=1),
        "effects": {"count": 3, "total_cents": 17000, "by_category": {"book": 15000, "pen": 2000}},
    }
    assert status(tmp_path, target) == final

    assert cli("--now", 1001, "enqueue", "demo.jsonl") == {"accepted": 0, "duplicates": 5}
    assert status(tmp_path, target) == final

    letters = cli("dead", "--json")
    assert [(d["event_id"], d["last_error"], d["detail"], d["payload"]) for d in letters] == [
        ("E0004", "invalid_payload", TOY_DETAIL, {"category": "toy", "amount_cents": 3000})]

    # Redrive without fixing the cause: dead again, with a new generation.
    assert cli("--now", 1001, "redrive", "E0004") == {"redriven": ["E0004"], "count": 1}
    assert status(tmp_path, target)["messages"] == messages(ready=1, done=3)
    assert cli("--now", 1001, "work", "--lease-seconds", 2) == {
        "claimed": 1, "done": 0, "retried": 0, "dead": 1, "lease_lost": 0}
    again = cli("dead", "--json")
    assert [(d["event_id"], d["attempts"], d["generation"]) for d in again] == [("E0004", 1, 2)]
    assert status(tmp_path, target) == final

    # The handler learns toy: redrive and work recover the money.
    assert cli("--now", 1002, "redrive", "E0004") == {"redriven": ["E0004"], "count": 1}
    assert cli("--now", 1002, "work", "--lease-seconds", 2, "--category", "toy") == {
        "claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    assert status(tmp_path, target) == {
        "messages": messages(done=4),
        "effects": {"count": 4, "total_cents": 20000, "by_category": {"book": 15000, "pen": 2000, "toy": 3000}},
    }
    assert cli("dead", "--json") == []
    # Nothing is left to do, and a repeat changes nothing.
    assert cli("--now", 1003, "work", "--category", "toy")["claimed"] == 0
    assert cli("--now", 1003, "enqueue", "demo.jsonl") == {"accepted": 0, "duplicates": 5}
    assert status(tmp_path, target)["effects"]["total_cents"] == 20000
