"""The chapter "When one file is not enough" (docs/postgres.md) holds, against a real PostgreSQL server.

* snippets/two_engines.py prints the same, byte for byte, on an SQLite file and
  on a PostgreSQL database, and leaves both as it found them;
* the failure the page shows first (no working lock: two workers pay one
  message) and the statements it prints (recorded from a stand-in connection)
  are what real SQLite and a real server do;
* two enqueues of one event at once take turns on the advisory lock, and
  without it the second would fail on the key;
* the page builds with neither psycopg nor pytest installed, runs nothing of
  its PostgreSQL tab, and cites every claim about another system.

The server is tests/postgres_server.py's throwaway cluster (``postgres_url``:
a fresh database per test); nothing is mocked on the real side.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queue_core import BatchRejected, EnqueueResult, Handler, ModelClock, StorageError, Store, ledger, receipts
from queue_core.engines.postgres import PostgresConnection, PostgresEngine
from queue_core.envelope import parse_batch
from queue_core.engines import postgres, sqlite
from queue_core.transactions import Tx

from . import test_compared
from .markdown_docs import prepare

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "postgres.md"
COMPARED_PAGE = ROOT / "docs" / "postgres-compared.md"  # chapter 23: what stays, the comparison, the figures
SNIPPET = ROOT / "snippets" / "two_engines.py"
EXPECTED = ROOT / "tests" / "snippets_expected" / "two_engines.txt"
LINE = '{"event_id": "%s", "payload": {"category": "book", "amount_cents": %d}}\n'


def page() -> str:
    """Both PostgreSQL chapters: every block of either runs without psycopg or pytest."""
    return PAGE.read_text(encoding="utf-8") + "\n" + COMPARED_PAGE.read_text(encoding="utf-8")


def psycopg() -> Any:
    import psycopg as module

    return module


# ------------------------------------------------------------------ the snippet

def run_snippet(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The snippet as a reader runs it: copied into ``folder``, run there."""
    shutil.copy(SNIPPET, folder / SNIPPET.name)
    return subprocess.run([sys.executable, SNIPPET.name, *args], cwd=folder, capture_output=True, text=True,
                          timeout=120)


def catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything a program can leave in a database: schemas, tables, functions, rows of the queue."""
    with psycopg().connect(url, autocommit=True) as conn:
        user = "nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'"
        found: dict[str, list[tuple[Any, ...]]] = {
            "schemas": conn.execute(f"SELECT nspname FROM pg_namespace WHERE {user} ORDER BY 1").fetchall(),
            "relations": conn.execute(
                "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                f" WHERE {user} ORDER BY 1, 2").fetchall(),
            "functions": conn.execute(
                "SELECT n.nspname, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                f" WHERE {user} ORDER BY 1, 2").fetchall(),
        }
        if conn.execute("SELECT to_regclass('public.messages') IS NOT NULL").fetchone()[0]:
            found["messages"] = conn.execute(
                "SELECT event_id, state, generation FROM public.messages ORDER BY 1").fetchall()
        return found


def test_two_engines_prints_the_same_on_both_engines_and_leaves_nothing_behind(
        tmp_path: Path, postgres_url: str) -> None:
    # A database that already holds a queue, as a reader's would: it must come out unchanged.
    with Store(postgres_url, clock=ModelClock(1000)) as existing:
        existing.enqueue(LINE % ("E0009", 700))
    before = catalog(postgres_url)
    assert before["messages"] == [("E0009", "ready", 0)] and ("public", "messages", "r") in before["relations"]

    outputs = {}
    for engine, args in (("sqlite", ()), ("postgresql", (postgres_url,))):
        folder = tmp_path / engine
        folder.mkdir()
        result = run_snippet(folder, *args)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert sorted(p.name for p in folder.iterdir()) == [SNIPPET.name], f"{engine}: a file was left behind"
        outputs[engine] = result.stdout
    expected = EXPECTED.read_text(encoding="utf-8")
    assert outputs["sqlite"] == expected
    assert outputs["postgresql"] == expected  # the same protocol, the same bytes
    assert catalog(postgres_url) == before  # the database as it was: its queue, and nothing else

    # Negative control: the catalog does see what such a run creates, had it been left there.
    with psycopg().connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA two_engines_left_over")
        conn.execute("CREATE TABLE two_engines_left_over.messages (event_id text)")
    left = catalog(postgres_url)
    assert ("two_engines_left_over",) in left["schemas"] and left != before


def test_two_engines_refuses_an_existing_queue_file(tmp_path: Path) -> None:
    with Store(tmp_path / "queue.sqlite3", clock=ModelClock(1000)) as existing:
        existing.enqueue(LINE % ("E0009", 700))
    kept = (tmp_path / "queue.sqlite3").read_bytes()
    result = run_snippet(tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert "queue.sqlite3 already exists here" in result.stderr and "Traceback" not in result.stderr
    assert (tmp_path / "queue.sqlite3").read_bytes() == kept
    with Store(tmp_path / "queue.sqlite3", clock=ModelClock(1000), create=False) as reopened:
        assert [(m.event_id, m.state) for m in reopened.messages()] == [("E0009", "ready")]


def test_two_engines_names_a_database_it_cannot_use_without_a_traceback(tmp_path: Path, postgres_cluster: Any) -> None:
    from .postgres_server import PORT, SERVER_USER

    missing = f"postgresql://{SERVER_USER}@/no_such_database?host={postgres_cluster.root}&port={PORT}"
    result = run_snippet(tmp_path, missing)
    assert result.returncode == 1 and result.stdout == ""
    assert "cannot create the schema two_engines_" in result.stderr and "no_such_database" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [SNIPPET.name]


# ------------------------------------------------- the failure the page shows first

def two_workers(path: Path, vfs: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Both workers begin (BEGIN IMMEDIATE) and read before either writes; what each took, and the effects."""
    setup = sqlite3.connect(path, isolation_level=None)
    setup.executescript("CREATE TABLE messages (event_id TEXT PRIMARY KEY, state TEXT NOT NULL);"
                        "CREATE TABLE effects (event_id TEXT NOT NULL, worker TEXT NOT NULL);"
                        "INSERT INTO messages VALUES ('E0001', 'ready'), ('E0002', 'ready');")
    setup.close()
    take = "SELECT event_id FROM messages WHERE state = 'ready' ORDER BY event_id LIMIT 1"
    a, b = (sqlite3.connect(f"file:{path}?vfs={vfs}", uri=True, isolation_level=None, timeout=0) for _ in "AB")
    taken: list[str] = []
    try:
        a.execute("BEGIN IMMEDIATE")
        taken.append(a.execute(take).fetchone()[0])
        try:
            b.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as refused:
            assert "locked" in str(refused)
            b_waited = True
        else:
            b_waited = False
            taken.append(b.execute(take).fetchone()[0])
        a.execute("UPDATE messages SET state = 'done' WHERE event_id = ?", (taken[0],))
        a.execute("INSERT INTO effects VALUES (?, ?)", (taken[0], "A"))
        a.execute("COMMIT")
        if b_waited:
            b.execute("BEGIN IMMEDIATE")
            taken.append(b.execute(take).fetchone()[0])
        b.execute("UPDATE messages SET state = 'done' WHERE event_id = ?", (taken[1],))
        b.execute("INSERT INTO effects VALUES (?, ?)", (taken[1], "B"))
        b.execute("COMMIT")
    finally:
        a.close()
        b.close()
    check = sqlite3.connect(path)
    try:
        effects = check.execute("SELECT event_id, worker FROM effects ORDER BY rowid").fetchall()
    finally:
        check.close()
    return taken, effects


def test_without_working_locks_two_workers_pay_one_message(tmp_path: Path) -> None:
    # The control first: with SQLite's locks, B waits and takes the other message.
    assert two_workers(tmp_path / "locked.sqlite3", "unix") == (["E0001", "E0002"], [("E0001", "A"), ("E0002", "B")])
    # With every lock a no-op, both take E0001 and both pay it; no statement failed.
    assert two_workers(tmp_path / "unlocked.sqlite3", "unix-none") == (
        ["E0001", "E0001"], [("E0001", "A"), ("E0001", "B")])


# ------------------------------------------------ the statements the page prints

POSTGRESQL = postgres.OPERATIONS
PG_NAMES = {query.sql: name for name, query in POSTGRESQL.queries.items()}


class Recorder:
    """The page's stand-in connection (a queue_core.engines.Connection): keeps each statement
    as psycopg receives it, and answers it from an SQLite queue in the same state."""

    in_transaction = True

    def __init__(self, lite: sqlite3.Connection) -> None:
        self.lite = lite
        self.sent: list[tuple[str, Any]] = []

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        self.sent.append((sql, parameters))
        name = PG_NAMES.get(sql)
        if name in ("enqueue_turn", "receipt_turn"):
            return self.lite.execute("SELECT 1")
        if name == "server_time":
            return self.lite.execute("SELECT 1000.0")
        if name is not None:  # SQLite's statement of the same name, with the same parameters
            return self.lite.execute(sqlite.OPERATIONS.sql(name), parameters)
        return self.lite.execute(sql.replace("%s", "?"), parameters)

    def executemany(self, sql: str, parameters: Any, /) -> None:
        for one in parameters:
            self.execute(sql, one)

    def close(self) -> None:
        pass


def record_receipt(tx: Tx) -> receipts.Recorded:
    return receipts.record(tx, "north", "op-1", {"amount_cents": 10000}, lambda: "E0001", scope="checkout")


def test_the_statements_on_the_page_are_what_a_real_server_receives(
        tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = (LINE % ("E0001", 10000)).encode()
    # the claims' random token, fixed: both runs must send the same parameters,
    # and the stand-in's lease completes on the server
    monkeypatch.setattr("queue_core.claims.new_lease_token", lambda: 7)
    stand_in: dict[str, list[tuple[str, Any]]] = {}
    engine = PostgresEngine("postgresql://stand-in/db", busy_timeout_ms=1000)  # connects to nothing
    with Store(tmp_path / "queue.sqlite3", clock=ModelClock(1000)) as code_only:
        ledger.install(code_only)
        lite = sqlite3.connect(code_only.target, isolation_level=None)

        def recorded(name: str, run: Callable[[Tx], Any], server_clock: bool = False) -> Any:
            recorder = Recorder(lite)
            result = run(Tx(recorder, engine, ModelClock(1000), server_clock=server_clock))
            stand_in[name] = recorder.sent
            return result

        recorded("enqueue", lambda tx: code_only.enqueue_tx(tx, parse_batch(batch)))
        lease = recorded("claim", lambda tx: code_only.claim_tx(tx, 30))
        recorded("complete", lambda tx: code_only._complete_with(tx, lease, Handler()))
        code_only.enqueue(LINE % ("E0002", 2000))
        claimed = code_only.claim_message(30)
        recorded("complete_message",
                 lambda tx: code_only._effects_then_ack(tx, [(claimed.lease, claimed.message)], Handler()))
        recorded("now", lambda tx: tx.now(), server_clock=True)
        recorded("receipt", record_receipt)
        lite.close()

    sent: list[tuple[str, Any]] = []
    original = PostgresConnection.execute
    original_begin = PostgresConnection.begin

    def keep(self: PostgresConnection, sql: str, parameters: Any = (), /) -> Any:
        sent.append((sql, parameters))
        return original(self, sql, parameters)

    def keep_begin(self: PostgresConnection, statement: str) -> None:
        # BEGIN goes out with the transaction's first statement, in one round trip
        sent.append((statement, ()))
        original_begin(self, statement)

    monkeypatch.setattr(PostgresConnection, "begin", keep_begin)

    def between_begin_and_commit(operation: Callable[[], object]) -> list[tuple[str, Any]]:
        sent.clear()
        operation()
        statements = [sql for sql, _ in sent]
        assert statements[0] == "BEGIN" and statements[-1] == "COMMIT", statements
        return sent[1:-1]

    def in_a_transaction(store: Store, body: Callable[[Tx], object]) -> Callable[[], object]:
        def run() -> None:
            with store.transaction() as tx:
                body(tx)
        return run

    clock = ModelClock(1000)
    with Store(postgres_url, clock=clock) as store:
        ledger.install(store)
        monkeypatch.setattr(PostgresConnection, "execute", keep)
        real = {
            "enqueue": between_begin_and_commit(lambda: store.enqueue(batch)),
            "claim": between_begin_and_commit(lambda: store.claim(30)),
            "complete": between_begin_and_commit(lambda: store.complete(lease, Handler())),
            "receipt": between_begin_and_commit(in_a_transaction(store, record_receipt)),
        }
        store.enqueue(LINE % ("E0002", 2000))
        on_server = store.claim_message(30)
        assert on_server is not None and on_server.lease == claimed.lease
        real["complete_message"] = between_begin_and_commit(
            lambda: store.complete_message(on_server, Handler()))
        monkeypatch.setattr(PostgresConnection, "execute", original)
        assert ledger.effects(store) == [("E0001", "book", 10000), ("E0002", "book", 2000)]  # the real runs did complete
        assert [(r.tenant, r.operation, r.effect) for r in receipts.stored(store)] == [("north", "op-1", "E0001")]
    with Store(postgres_url) as server_clock:  # no clock given: the server's
        monkeypatch.setattr(PostgresConnection, "execute", keep)
        real["now"] = between_begin_and_commit(in_a_transaction(server_clock, lambda tx: tx.now()))
        monkeypatch.setattr(PostgresConnection, "execute", original)

    for operation in ("enqueue", "claim", "complete", "complete_message", "now", "receipt"):
        assert real[operation] == stand_in[operation], operation
    # And the page's claims about them are not vacuous: they are the named statements.
    assert real["claim"][0][0] == POSTGRESQL.sql("claim_messages")
    assert "FOR UPDATE SKIP LOCKED" in real["claim"][0][0]
    assert [sql for sql, _ in real["enqueue"][:2]] == [POSTGRESQL.sql("enqueue_turn"), POSTGRESQL.sql("enqueue_find")]
    assert real["enqueue"][0][0].startswith("SELECT pg_advisory_xact_lock(")
    assert POSTGRESQL.sql("lease_locked").endswith(" FOR UPDATE")
    assert any(sql == POSTGRESQL.sql("lease_locked") for sql, _ in real["complete"])
    # the worker's completion reads nothing before its effect: the fenced ACK is its last statement
    assert all(sql != POSTGRESQL.sql("lease_locked") for sql, _ in real["complete_message"])
    assert real["complete_message"][-1][0] == POSTGRESQL.sql("fenced_move")
    assert real["now"] == [(POSTGRESQL.sql("server_time"), ())]
    assert real["receipt"][0] == (POSTGRESQL.sql("receipt_turn"), {"scope": "checkout", "tenant": "north", "operation": "op-1"})


# ---------------------------------------------------- enqueues take turns

def _wait_for_advisory_wait(url: str, pid: int) -> None:
    with psycopg().connect(url, autocommit=True) as observer:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = observer.execute("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                                   (pid,)).fetchone()
            if row == ("Lock", "advisory"):
                return
            time.sleep(0.02)
    raise AssertionError(f"backend {pid} never waited on an advisory lock")


@pytest.mark.parametrize("second_payload", [10000, 999], ids=["same payload", "another payload"])
def test_concurrent_enqueues_of_one_event_take_turns(postgres_url: str, second_payload: int) -> None:
    clock = ModelClock(1000)
    with Store(postgres_url, clock=clock) as first, Store(postgres_url, clock=clock) as second:
        outcome: dict[str, object] = {}
        pid: list[int] = []
        ready = threading.Event()

        def enqueue_again() -> None:
            pid.append(second.read(lambda view: view.execute("SELECT pg_backend_pid()").fetchone()[0]))
            ready.set()
            try:
                outcome["result"] = second.enqueue(LINE % ("E0001", second_payload) + LINE % ("E0002", 40))
            except BatchRejected as rejected:
                outcome["rejected"] = rejected

        with first.transaction() as tx:  # the first enqueue is inside its transaction, not committed
            assert first.enqueue_tx(tx, parse_batch((LINE % ("E0001", 10000)).encode())).accepted == 1
            thread = threading.Thread(target=enqueue_again)
            thread.start()
            assert ready.wait(30)
            _wait_for_advisory_wait(postgres_url, pid[0])  # the second waits at the lock, not at a row
            assert thread.is_alive() and outcome == {}
        thread.join(60)
        if second_payload == 10000:
            assert outcome == {"result": EnqueueResult(accepted=1, duplicates=1)}
            assert [m.event_id for m in first.messages()] == ["E0001", "E0002"]
        else:
            rejected = outcome["rejected"]
            assert isinstance(rejected, BatchRejected)
            assert (rejected.code, rejected.line) == ("event_conflict", 1)
            assert [m.event_id for m in first.messages()] == ["E0001"]  # the rejected batch wrote nothing


def test_without_the_advisory_lock_a_concurrent_insert_fails_on_the_key(postgres_url: str) -> None:
    # The negative control: the enqueue's read and INSERT without its turn, on two connections.
    Store(postgres_url, clock=ModelClock(1000)).close()  # the schema
    read = POSTGRESQL.sql("enqueue_find")
    insert = POSTGRESQL.sql("enqueue_insert")
    row = {"queue": "default", "now": 1000, "available_at": 1000, "priority": 0,
           "events": json.dumps([["E0001", '{"amount_cents":10000,"category":"book"}']])}
    first = PostgresConnection(postgres_url, busy_timeout_ms=30_000)
    second = PostgresConnection(postgres_url, busy_timeout_ms=30_000)
    errors: list[StorageError] = []
    try:
        for conn in (first, second):
            conn.execute("BEGIN")
            assert conn.execute(read, {"queue": "default", "ids": '["E0001"]'}).fetchall() == []  # neither sees the other's row
        first.execute(insert, row)
        pid = second.execute("SELECT pg_backend_pid()").fetchone()[0]

        def insert_too() -> None:
            try:
                second.execute(insert, row)
            except StorageError as exc:
                errors.append(exc)

        thread = threading.Thread(target=insert_too)
        thread.start()
        with psycopg().connect(postgres_url, autocommit=True) as observer:
            deadline = time.monotonic() + 30
            while observer.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                   (pid,)).fetchone() != ("Lock",):
                assert time.monotonic() < deadline, "the second INSERT never waited"
                time.sleep(0.02)
        first.execute("COMMIT")
        thread.join(60)
    finally:
        for conn in (first, second):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.close()
    assert [exc.code for exc in errors] == ["constraint_violation"]  # a key error, not a duplicate


# ------------------------------------------------------------------ the page itself

def exec_blocks(text: str) -> list[str]:
    """The page's markdown-exec blocks, as the build runs them (includes expanded, tabs un-indented)."""
    return re.findall(r'^```python exec="on"[^\n]*\n(.*?)^```[ \t]*$', prepare(text), re.M | re.S)


RUNNER = """\
import sys
from pathlib import Path

blocks = Path(sys.argv[1]).read_text(encoding="utf-8").split("\\n# ---- next block ----\\n")
for number, source in enumerate(blocks, start=1):
    exec(compile(source, f"block {number}", "exec"), {"__name__": "markdown_exec_block"})
print(f"ran {len(blocks)} blocks")
"""


def run_blocks(blocks: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """Run ``blocks`` in a fresh Python at the repository's root, where psycopg and pytest cannot be imported."""
    for name in ("psycopg", "pytest"):
        (folder / f"{name}.py").write_text(f"raise ImportError('no {name} here: a documentation-only install')\n",
                                           encoding="utf-8")
    (folder / "blocks.py").write_text("\n# ---- next block ----\n".join(blocks), encoding="utf-8")
    (folder / "runner.py").write_text(RUNNER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    return subprocess.run([sys.executable, str(folder / "runner.py"), str(folder / "blocks.py")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_page_builds_without_psycopg_or_pytest(tmp_path: Path) -> None:
    blocks = exec_blocks(page())
    assert len(blocks) >= 6 and any("two_engines" in block or "BATCH" in block for block in blocks)
    before = sorted(p.name for p in ROOT.iterdir())
    result = run_blocks(blocks, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(f"ran {len(blocks)} blocks\n")
    assert sorted(p.name for p in ROOT.iterdir()) == before, "a block left a file in the repository"
    # Negative controls: the stand-ins really hide both packages, and a failing block fails the run.
    for module in ("psycopg", "pytest"):
        folder = tmp_path / f"probe-{module}"
        folder.mkdir()
        probe = run_blocks([f"import {module}"], folder)
        assert probe.returncode != 0 and "documentation-only install" in probe.stderr


def tab(text: str, title: str) -> str:
    """The indented body of the content tab ``=== "title"``."""
    match = re.search(rf'^=== "{re.escape(title)}"\n((?:[ \t]+.*\n|\n)+)', text, re.M)
    assert match is not None, f"no tab {title!r}"
    return match.group(1)


def test_the_postgresql_tab_runs_nothing_and_the_sqlite_tab_runs_the_snippet() -> None:
    text = page()
    sqlite_tab, postgres_tab = tab(text, "SQLite"), tab(text, "PostgreSQL")
    assert 'exec="on"' in sqlite_tab and '--8<-- "snippets/two_engines.py"' in sqlite_tab
    assert "exec=" not in postgres_tab and "```python" not in postgres_tab and "```console" not in postgres_tab
    assert "python two_engines.py postgresql://" in postgres_tab


def comparison_table(text: str) -> str:
    """The Markdown lines of the table that compares queue_core with the other systems."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| mechanism |") and "queue_core" in line)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


COMPARED = ("Amazon SQS", "Apache Kafka", "pgmq", "River", "PostgreSQL")


def test_every_comparison_cell_is_cited_and_every_link_resolves() -> None:
    assert test_compared.footnote_problems(PAGE.read_text(encoding="utf-8")) == []
    assert test_compared.link_problems(PAGE.read_text(encoding="utf-8"), page="postgres.md") == []
    text = COMPARED_PAGE.read_text(encoding="utf-8")
    assert test_compared.footnote_problems(text) == []
    table = comparison_table(text)
    header = test_compared.tables(table)[0][0]
    assert header[-1] == "queue_core" and sum(test_compared.names_other_system(c) for c in header) >= 4
    assert test_compared.table_problems(table) == []
    assert test_compared.link_problems(text, page="postgres-compared.md") == []
    assert test_compared.wording_problems(text) == []
    definitions = test_compared.footnote_definitions(text)
    for system in COMPARED:
        word, addresses = test_compared.SYSTEMS[system]
        assert word in text, system
        assert any(a in body for bodies in definitions.values() for body in bodies for a in addresses), system
    # Negative control: the same checks catch an uncited cell and a dead anchor.
    broken = table.replace("[^sqs-visibility]", "", 1)
    assert any("Amazon SQS" in problem for problem in test_compared.table_problems(broken))
    assert test_compared.link_problems("[x](postgres.md#no-such-heading)\n", page="postgres.md") != []


def test_the_recording_is_the_snippets_output_and_mentions_every_step() -> None:
    # The recording must show what the page says the program does.
    recording = EXPECTED.read_text(encoding="utf-8")
    assert "1 duplicate" in recording and "LeaseLost: E0001: generation 1 is stale" in recording
    assert "B completes: done" in recording and "'done': 3" in recording
    summary = re.search(r"works off the rest: (\{.*\})", recording)
    assert summary is not None and json.loads(summary.group(1).replace("'", '"'))["done"] == 2
