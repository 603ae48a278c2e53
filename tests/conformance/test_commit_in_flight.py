"""A COMMIT in flight and the worker's Ctrl-C, on both engines (issue #44).

The queue's own interruptions (a second Ctrl-C in ``queue-core work``, the
stop of its worker threads) wait for a COMMIT in flight, and the worker
counts what it committed before it stops (queue_core/interrupts.py). Here a
real ``queue-core work`` process has its COMMIT held while Ctrl-C comes three
times, at one thread and at two:

* SQLite: the database lives on the power-cut filesystem (proof/powerfs.py),
  whose next fsync of the WAL waits until the test lets it go: the COMMIT is
  held in the kernel, as by a slow disk. Python takes a signal only when that
  write returns, so the waiting is said then.
* PostgreSQL: a deferred constraint trigger on the handler's table polls an
  advisory lock that the test holds: the server holds the COMMIT.

The negative control runs the same process with the guard off
(tests/support.py's ``GUARD_OFF``, a seam of the tests): on SQLite the Ctrl-C
lands just after the COMMIT and the worker reports as not done a message
that is done; on PostgreSQL psycopg cancels the COMMIT it was asked to wait for.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from queue_core import Store

from ..fuse_support import powerfs  # noqa: F401  (the fixture, for SQLite)
from ..support import queue_core_command, until

HANDLERS = textwrap.dedent('''
    import pathlib, time

    from queue_core import LongHandler

    def wait_for_go(message):
        pathlib.Path("started-" + message.event_id).touch()
        while not pathlib.Path("go").exists():
            time.sleep(0.01)

    def write(tx, message, result=None):
        tx.execute("CREATE TABLE IF NOT EXISTS seen (event_id TEXT PRIMARY KEY)")
        tx.execute("INSERT INTO seen (event_id) VALUES (?)", (message.event_id,))

    def handle(tx, message):
        write(tx, message)
        wait_for_go(message)

    long_handle = LongHandler(wait_for_go, write)
''')
# how the worker runs: its handler and options
MODES = {
    "plain": ("--handler", "myapp:handle"),
    "batch": ("--handler", "myapp:handle", "--batch", "2"),  # complete_many
    "long": ("--handler", "myapp:long_handle"),  # the effect after a heartbeat's step
}
WAITING = "queue-core: waiting for the COMMIT in flight, then stopping"
HOLD_KEY = 44_002  # the advisory lock a held COMMIT waits for (PostgreSQL)
# How long a held COMMIT is watched after the third Ctrl-C: the old path
# returned within a few tenths of a second (the negative control below).
WATCH_SECONDS = 1.5


@dataclass
class Held:
    """A database whose COMMITs can be held: ``arm()``, then ``in_flight()`` until ``release()``."""

    target: str | Path
    arm: Callable[[], None]
    in_flight: Callable[[], bool]
    release: Callable[[], None]


def _sqlite(request: pytest.FixtureRequest) -> Iterator[Held]:
    fs = request.getfixturevalue("powerfs")
    target = fs.mount() / "queue.sqlite3"
    Store(target).close()
    try:
        yield Held(target, lambda: fs.hold_fsync("-wal"), lambda: fs.stats()["held"] >= 1, fs.release)
    finally:
        fs.release()


def _postgres(request: pytest.FixtureRequest) -> Iterator[Held]:
    import psycopg

    url = request.getfixturevalue("postgres_url")
    Store(url).close()
    with psycopg.connect(url, autocommit=True) as hold:
        hold.execute(textwrap.dedent(f"""
            CREATE TABLE seen (event_id TEXT PRIMARY KEY);
            CREATE FUNCTION commit_hold() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              WHILE NOT pg_try_advisory_xact_lock({HOLD_KEY}) LOOP
                PERFORM pg_sleep(0.01);
              END LOOP;
              RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER commit_hold AFTER INSERT ON seen
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_hold();
        """))

        def in_flight() -> bool:
            with psycopg.connect(url, autocommit=True) as look:
                return bool(look.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = 'COMMIT' "
                    "AND wait_event = 'PgSleep' AND datname = current_database()").fetchone()[0])

        def release() -> None:
            hold.execute("SELECT pg_advisory_unlock_all()")

        # the claims write nothing into seen: only the completion's COMMIT waits
        hold.execute("SELECT pg_advisory_lock(%s)", (HOLD_KEY,))
        try:
            yield Held(url, lambda: None, in_flight, release)
        finally:
            release()


@pytest.fixture
def held(engine: str, request: pytest.FixtureRequest) -> Iterator[Held]:
    yield from (_sqlite(request) if engine == "sqlite" else _postgres(request))


@dataclass
class Run:
    status: int
    summary: dict[str, int]
    stderr: str
    returned_while_held: bool
    state: str  # E0001's, read after the run
    seen: list[str]  # the handler's rows that were committed


def interrupted_in_commit(folder: Path, held: Held, concurrency: int, mode: str = "plain", *,
                          guarded: bool = True) -> Run:
    """``queue-core work`` on one message; Ctrl-C once in its handler, twice more while its COMMIT is held."""
    (folder / "myapp.py").write_text(HANDLERS, encoding="utf-8")
    with Store(held.target) as store:
        store.enqueue('{"event_id": "E0001", "payload": {"n": 1}}\n')
    proc = subprocess.Popen(
        [*queue_core_command(guarded), "--db", str(held.target), "work", *MODES[mode],
         "--concurrency", str(concurrency)],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: (folder / "started-E0001").exists(), 60, "E0001 never reached the handler")
        assert proc.stderr is not None
        proc.send_signal(signal.SIGINT)  # the first: finish the message in hand
        assert "stopping after the message in hand" in proc.stderr.readline()
        held.arm()
        (folder / "go").touch()
        until(held.in_flight, 60, "the COMMIT was never held")
        proc.send_signal(signal.SIGINT)  # the second: stop now
        if guarded:  # the third (the old path is on its way out, and would die of it)
            time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
        watched = time.monotonic() + WATCH_SECONDS
        while proc.poll() is None and time.monotonic() < watched:
            time.sleep(0.02)
        returned_while_held = proc.poll() is not None
        if not returned_while_held:
            assert held.in_flight(), "the COMMIT ended while it was held"
        held.release()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    with Store(held.target) as store:
        state = store.message("E0001").state
        seen = [row[0] for row in store.read(lambda tx: tx.execute("SELECT event_id FROM seen").fetchall())]
    return Run(proc.returncode, json.loads(out), err, returned_while_held, state, seen)


DONE = {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("mode", "concurrency"), [("plain", 1), ("plain", 2), ("batch", 1), ("long", 2)])
def test_ctrl_c_waits_for_the_commit_in_flight_and_counts_it(
        tmp_path: Path, held: Held, mode: str, concurrency: int) -> None:
    run = interrupted_in_commit(tmp_path, held, concurrency, mode)
    assert not run.returned_while_held, run
    # the COMMIT went through; the worker counted it, then stopped as asked (130)
    assert (run.status, run.summary) == (130, DONE), run
    assert (run.state, run.seen) == ("done", ["E0001"]), run
    assert run.stderr.count(WAITING) == 1, run.stderr  # said once, for three Ctrl-C
    assert "queue-core: interrupted; gave back nothing (ready again)" in run.stderr, run.stderr
    assert "still held" not in run.stderr and "Traceback" not in run.stderr, run.stderr


@pytest.mark.timeout(180)
def test_negative_control_without_the_guard_the_commit_is_cut_or_miscounted(
        tmp_path: Path, held: Held, engine: str) -> None:
    run = interrupted_in_commit(tmp_path, held, 1, guarded=False)
    assert run.status == 130 and WAITING not in run.stderr, run
    if engine == "postgresql":
        # psycopg cancelled the COMMIT the worker was asked to wait for
        assert run.returned_while_held, run
        assert (run.state, run.seen) == ("ready", []), run
    else:
        # the Ctrl-C landed after the COMMIT: done in the file, not done in the report
        assert (run.state, run.seen) == ("done", ["E0001"]), run
        assert run.summary["done"] == 0, run
        assert "still held by a thread that did not stop: E0001" in run.stderr, run.stderr
