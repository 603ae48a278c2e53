"""Random SIGKILLs of real queue-core processes, and eight workers on one write lock.

``proof.chaos.chaos`` (the quick run; the long one, ``python scripts/chaos.py
--long --record``, is made by hand: tests/test_long_runs.py checks its committed
record) and ``proof.chaos.contention``. Each run leaves a
record in ``test-artifacts/evidence/`` that the page "How we know" shows.
The random-kill run is made twice: on a new SQLite file, and against a fresh
database of the session's real PostgreSQL server (tests/postgres_server.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import Handler, ModelClock, Store, ledger, work
from queue_core.store import BUSY_TIMEOUT_MS
from proof import records
from proof.chaos import NAMED_QUEUE, QUICK, ChaosResult, ContentionResult, _unique_key_refusals, chaos, contention
from proof.kill_sample import DOING, SAMPLE_SIZE
from proof.invariants import check_invariants, read_file

from .postgres_server import PORT, SERVER_USER, Cluster

RECORDS = Path(__file__).resolve().parent.parent / "test-artifacts" / "evidence"  # the page reads them here
ENGINES = ("sqlite", "postgresql")
RECORD_NAMES = {"sqlite": "chaos", "postgresql": "chaos-postgresql"}
OWN_RECORDS: dict[str, Path] = {}  # engine -> where this process's run of it was recorded


@pytest.fixture(scope="module")
def chaos_database(postgres_cluster: Cluster) -> Iterator[str]:
    """A fresh database for the PostgreSQL run, shared by this module's tests of it.

    (conftest's ``postgres_url`` is made per test; the run is made once per module.)
    """
    name = postgres_cluster.create_database()
    try:
        yield f"postgresql://{SERVER_USER}@/{name}?host={postgres_cluster.root}&port={PORT}"
    finally:
        postgres_cluster.drop_database(name)


@pytest.fixture(scope="module", params=ENGINES)
def random_kills(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ChaosResult:
    engine = str(request.param)
    target = request.getfixturevalue("chaos_database") if engine == "postgresql" else None
    folder = tmp_path_factory.mktemp(f"chaos-{engine}")
    began = time.monotonic()
    result = chaos(folder, **QUICK, target=target)
    # for the page (which reads it there, and may write its own run there from
    # another process), and a copy of this run's own for the round trip
    OWN_RECORDS[engine] = folder / "record"
    for place in (RECORDS, OWN_RECORDS[engine]):
        records.save_record(RECORD_NAMES[engine], QUICK, result, by="tests/test_chaos.py",
                            seconds=time.monotonic() - began, folder=place)
    return result


@pytest.fixture
def engine_of_the_run(request: pytest.FixtureRequest) -> str:
    """The engine the module's ``random_kills`` run of this test was asked for."""
    return str(request.node.callspec.params["random_kills"])


@pytest.fixture(scope="module")
def crowd(tmp_path_factory: pytest.TempPathFactory) -> ContentionResult:
    folder = tmp_path_factory.mktemp("contention")
    began = time.monotonic()
    result = contention(folder)
    records.save_record("contention", {}, result, by="tests/test_chaos.py",
                        seconds=time.monotonic() - began, folder=RECORDS)
    return result


def test_random_kills_lose_nothing_and_double_nothing(random_kills: ChaosResult) -> None:
    c = random_kills
    assert c.violations == (), f"seed {c.seed}"
    assert (c.losses, c.doubles) == (0, 0)
    assert c.total_cents == c.expected_cents
    assert c.done == c.valid_events
    assert c.dead == c.toys  # dead only for the reason that cannot be retried away
    assert c.ok


def test_random_kills_really_happened_over_thousands_of_events(random_kills: ChaosResult,
                                                               engine_of_the_run: str) -> None:
    c = random_kills
    assert c.engine == engine_of_the_run  # the run read back the engine it was given
    assert c.events >= 2000
    assert c.rounds == QUICK["rounds"]
    assert c.worker_kills >= c.rounds // 2  # one to five tries per round, if a victim is alive
    assert c.worker_kills_with_the_file_open > 0
    # Most kills land once the victim has the database open (the run waits for that: VICTIM_WAIT_SECONDS).
    assert c.worker_kills_with_the_file_open * 2 >= c.worker_kills


def test_no_process_failed_except_by_a_kill(random_kills: ChaosResult) -> None:
    c = random_kills
    assert c.worker_errors == 0
    assert c.tracebacks == 0
    assert c.clean_worker_exits + c.worker_kills == c.worker_processes


def test_the_run_keeps_a_bounded_sample_of_its_kills(random_kills: ChaosResult) -> None:
    """Each kill that killed is offered to the sample once (proof/kill_sample.py), the page draws it."""
    c = random_kills
    assert c.kill_sample_of == c.kills > 0  # every kill, and no SIGKILL that missed
    assert len(c.kill_sample) == min(SAMPLE_SIZE, c.kills)
    times = [e["t"] for e in c.kill_sample]
    assert times == sorted(times) and 0 <= times[0] and times[-1] <= c.seconds
    assert {e["doing"] for e in c.kill_sample} <= set(DOING)
    workers = [e for e in c.kill_sample if e["who"] == "worker"]
    producers = [e for e in c.kill_sample if e["who"] == "producer"]
    assert len(workers) + len(producers) == len(c.kill_sample)
    assert all(0 <= e["slot"] < c.workers_at_once and e["next"].startswith("the worker in its place")
               for e in workers)
    assert all(e["doing"] in ("before commit", "after commit") and e["next"].startswith("the resend: ")
               for e in producers)


def test_eight_workers_wait_out_the_write_lock_and_exit_cleanly(crowd: ContentionResult) -> None:
    assert crowd.workers == 8
    if Path("/proc/self/fd").is_dir():  # how the run sees that a worker has the file open
        assert crowd.all_waiting_before_the_countdown
    assert crowd.lock_held_seconds > BUSY_TIMEOUT_MS / 1000  # longer than SQLite's own wait
    assert crowd.exit_statuses == (0,) * 8
    assert crowd.tracebacks == 0 and crowd.stderr_lines == 0


def test_eight_workers_share_the_work_without_loss_or_double(crowd: ContentionResult) -> None:
    assert crowd.violations == ()
    assert (crowd.losses, crowd.doubles) == (0, 0)
    assert crowd.done == crowd.claimed == crowd.events
    assert sum(share or 0 for share in crowd.shares_done) == crowd.events
    assert crowd.total_cents == crowd.expected_cents


def test_the_results_round_trip_through_their_json(random_kills: ChaosResult, crowd: ContentionResult) -> None:
    for result in (random_kills, crowd):
        data = json.loads(json.dumps(result.to_dict()))
        assert type(result).from_dict(data) == result
    saved = records.load_record(RECORD_NAMES[random_kills.engine], QUICK, folder=OWN_RECORDS[random_kills.engine])
    assert saved is not None
    assert ChaosResult.from_dict(saved.result) == random_kills


@pytest.mark.parametrize("engine", ENGINES)
def test_an_effect_insert_refused_by_the_unique_key_counts_as_a_double(
        engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # A clash in the effect INSERT no longer escapes the worker: the store records it on the message
    # (handler_error, "IntegrityError: UNIQUE constraint failed ..." on SQLite, "... duplicate key value
    # violates unique constraint ..." on PostgreSQL). The runs count it as a double.
    db: str | Path = request.getfixturevalue("postgres_url") if engine == "postgresql" else tmp_path / "q.sqlite3"
    with Store(db, clock=ModelClock(1000)) as store:
        ledger.install(store)
        store.enqueue('{"event_id": "E0001", "payload": {"category": "pen", "amount_cents": 1}}\n')
        assert _unique_key_refusals(read_file(db)) == 0
        with store.transaction() as tx:  # a buggy client wrote the effect without the ACK
            tx.execute("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'pen', 1)")
        lease = store.claim(2)
        assert lease is not None
        completion = store.complete(lease, Handler())
        assert (completion.outcome.value, completion.error) == ("retry", "handler_error")
    assert _unique_key_refusals(read_file(db)) == 1


def _line(event_id: str, amount_cents: int) -> str:
    return json.dumps({"event_id": event_id, "payload": {"category": "pen", "amount_cents": amount_cents}}) + "\n"


def test_the_postgresql_reader_reports_what_was_planted(postgres_url: str) -> None:
    # A negative control of the checker on PostgreSQL: a clean queue passes, then each violation planted
    # by raw SQL (what the protocol never writes) is reported.
    import psycopg

    with Store(postgres_url, clock=ModelClock(1000)) as store:
        ledger.install(store)
        store.enqueue(_line("E0001", 100) + _line("E0002", 200) + _line("E0003", 300))
        work(store, Handler(), max_messages=2)
    clean = read_file(postgres_url)
    assert (clean.engine, clean.integrity, clean.foreign_key_errors) == ("postgresql", ("ok",), 0)
    assert [m.state for m in clean.messages] == ["done", "done", "ready"]
    assert clean.effects == (("E0001", "pen", 100), ("E0002", "pen", 200))
    assert check_invariants(postgres_url, finished=False, expected_total=300) == []

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE messages SET state = 'done' WHERE event_id = 'E0003'")  # an ACK without its effect
        found = check_invariants(postgres_url, finished=False)
        assert found == ["E0003 is done with 0 effects and no receipt of its operation (lost)"]

        # An effect whose message does not exist: the foreign key's trigger is off in replica mode.
        conn.execute("SET session_replication_role = replica")
        conn.execute("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0009', 'pen', 5)")
        conn.execute("SET session_replication_role = DEFAULT")
        assert read_file(postgres_url).foreign_key_errors == 1
        found = check_invariants(postgres_url, finished=False)
        assert "foreign keys (anti-join): 1 dangling reference(s)" in found
        assert "effect of E0009 without a done message (no message)" in found

        # A row that breaks a CHECK: the constraint added back NOT VALID never looked at it.
        conn.execute("ALTER TABLE effects DROP CONSTRAINT effects_amount_positive")
        conn.execute("UPDATE effects SET amount_cents = -1 WHERE event_id = 'E0001'")
        conn.execute("ALTER TABLE effects ADD CONSTRAINT effects_amount_positive CHECK (amount_cents > 0) NOT VALID")
        assert read_file(postgres_url).integrity == ("effects: 1 row(s) break CHECK effects_amount_positive",)
        found = check_invariants(postgres_url, finished=False)
        assert "constraint re-check: effects: 1 row(s) break CHECK effects_amount_positive" in found


def test_the_postgresql_reader_only_reads(postgres_url: str) -> None:
    # A role that may only SELECT reads the same state and finds the same: the reader needs no write.
    import psycopg

    with Store(postgres_url, clock=ModelClock(1000)) as store:
        ledger.install(store)
        store.enqueue(_line("E0001", 100) + _line("E0002", 200))
        work(store, Handler())
    before = read_file(postgres_url)
    role = f"chaos_reader_{os.getpid()}"  # roles belong to the cluster, not to the test's database
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        try:
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
            as_reader = postgres_url.replace(f"{SERVER_USER}@", f"{role}@", 1)
            assert read_file(as_reader) == before
            assert check_invariants(as_reader, expected_total=300) == []
            with psycopg.connect(as_reader) as reader, pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute("DELETE FROM effects")  # the control: this role really cannot write
        finally:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
    assert read_file(postgres_url) == before


def test_the_postgresql_reader_without_a_ledger_and_without_a_database(postgres_url: str) -> None:
    with Store(postgres_url, clock=ModelClock(1000)) as store:
        store.enqueue(_line("E0001", 100))
    state = read_file(postgres_url)
    assert (state.effects, [m.event_id for m in state.messages]) == ((), ["E0001"])  # no ledger installed yet
    assert check_invariants(state, finished=False) == []
    gone = postgres_url.replace("?", "_gone?", 1)  # a database that does not exist
    [problem] = check_invariants(gone)
    assert problem.startswith("the database cannot be read:") and "_gone" in problem


def test_the_chaos_run_refuses_a_target_it_cannot_run_on(tmp_path: Path, postgres_url: str) -> None:
    with pytest.raises(ValueError, match="postgresql:// URL"):
        chaos(tmp_path, target=str(tmp_path / "q.sqlite3"))
    with Store(postgres_url, clock=ModelClock(1000)) as store:
        store.enqueue(_line("E0001", 100))
    with pytest.raises(ValueError, match="needs an empty database.*1 message"):
        chaos(tmp_path, rounds=1, target=postgres_url)


def test_a_named_queue_run_loses_nothing_and_spares_the_default(tmp_path: Path) -> None:
    # The long run's events do not fit in the default queue's E0001..E9999: it sends C000001.. to a
    # queue of its own. The same run, small: every process gets --queue, the final pass finishes it.
    c = chaos(tmp_path, rounds=3, events_per_round=120, workers=2, max_kills_per_round=3, queue=NAMED_QUEUE)
    assert c.violations == (), f"seed {c.seed}"
    assert (c.queue, c.events, c.losses, c.doubles) == (NAMED_QUEUE, 360, 0, 0)
    assert c.done == c.valid_events and c.total_cents == c.expected_cents and c.worker_kills > 0
    with Store(tmp_path / "queue.sqlite3", clock=ModelClock(1000), create=False, queue=NAMED_QUEUE) as store:
        ids = [m.event_id for m in store.messages()]
        counts = {settings.name: sum(n.messages.values()) for settings, n in store.queues()}
    assert ids == [f"C{n:06d}" for n in range(1, 361)]
    assert counts == {"default": 0, NAMED_QUEUE: 360}


def test_a_run_too_large_for_its_queue_or_batch_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at most 9999 events fit in the default queue"):
        chaos(tmp_path, rounds=11, events_per_round=990, queue="default")
    with pytest.raises(ValueError, match="at most 1000 lines"):
        chaos(tmp_path, rounds=2, events_per_round=991)
    assert not (tmp_path / "queue.sqlite3").exists()  # refused before anything was made


def test_the_json_check_runs_when_the_server_forces_parallel_queries(postgres_url: str) -> None:
    # Migration 2 labelled queue_core_json_type PARALLEL SAFE, yet its EXCEPTION block starts a
    # subtransaction, which no parallel operation may: the re-check of its CHECK failed on the
    # long run's 118,800 messages. Migration 5 labels it PARALLEL UNSAFE. Here the server is made
    # to run every query it can in a parallel worker; with the old label (the control) it fails.
    import psycopg

    with Store(postgres_url, clock=ModelClock(1000)) as store:
        store.enqueue(_line("E0001", 100))
    query = "SELECT count(*) FROM messages WHERE queue_core_json_type(payload) = 'object'"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int, current_database()").fetchone()
        assert row is not None
        version, name = row
        forced = "debug_parallel_query" if version >= 160000 else "force_parallel_mode"
        conn.execute(f'ALTER DATABASE "{name}" SET {forced} = on')
        conn.execute("SET max_parallel_workers_per_gather = 2")
        conn.execute(f"SET {forced} = on")
        assert conn.execute("SELECT proparallel FROM pg_proc WHERE proname = 'queue_core_json_type'"
                            ).fetchone() == ("u",)
        assert conn.execute(query).fetchone() == (1,)
        conn.execute("BEGIN")
        conn.execute("ALTER FUNCTION queue_core_json_type(text) PARALLEL SAFE")  # the old label
        with pytest.raises(psycopg.errors.InvalidTransactionState):
            conn.execute(query)
        conn.execute("ROLLBACK")
    state = read_file(postgres_url)
    assert state.integrity == ("ok",) and [m.event_id for m in state.messages] == ["E0001"]
