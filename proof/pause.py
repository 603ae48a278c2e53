"""A real worker process paused (SIGSTOP) past its lease, then continued: what the others see.

Worker A (``queue-core work`` with a handler of this module's, ``HANDLERS``)
claims E0001 and signals it through a marker file; the harness stops it there,
waits until its lease has ended by the queue's own clock (the host's on
SQLite, the server's on PostgreSQL), lets other workers try, continues A and
lets a last worker finish what is left. Two handler shapes: ``two_step`` (a
``LongHandler``: the wait in its prepare step, outside any transaction) and
``plain`` (``(tx, message)``: the wait inside the write transaction, which on
SQLite holds the database's write lock and on PostgreSQL the message's row).

``pause_in_commit`` stops A's server backend inside its COMMIT (PostgreSQL),
and ``guarded`` shows ``idle_in_transaction_session_timeout`` ending a paused
client's transaction. ``tests/conformance/test_pause.py`` asserts on these runs;
``scripts/pause.py --record`` writes ``evidence/pause.json`` for the fencing page.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from queue_core import Store, ledger

ROOT = Path(__file__).resolve().parent.parent
LEASE = 2  # seconds: short, so that a pause outlives it soon
WAIT = 60.0  # the longest any state is waited for (a loaded machine is slow, not stuck)
# The two-step worker's first beat comes this long after its claim: the harness
# stops it long before, never inside a beat's own transaction.
HEARTBEAT = 1.9

def _line(event_id: str) -> str:
    return json.dumps({"event_id": event_id, "payload": {"category": "book", "amount_cents": 100}}) + "\n"


HANDLERS = textwrap.dedent('''
    """Worker A's handlers: E0001 waits (after its claim, before its effect) until the harness says go."""
    import os, time
    from pathlib import Path
    from queue_core import Handler, LongHandler

    FOLDER = Path(os.environ["PAUSE_FOLDER"])

    def _hold(message):
        if message.event_id == "E0001":
            (FOLDER / "claimed").write_text(str(message.generation))
            while not (FOLDER / "go").exists():
                time.sleep(0.01)

    def plain(tx, message):
        _hold(message)  # inside the write transaction, before the effect
        Handler()(tx, message)

    def plain_after(tx, message):
        Handler()(tx, message)
        tx.execute("SELECT count(*) FROM effects WHERE event_id = ?", (message.event_id,))
        _hold(message)  # after the effect, before the ACK: its rows are locked

    def plain_first(tx, message):
        Handler()(tx, message)  # the transaction's only statement: sent with its BEGIN
        _hold(message)

    def _prepare(message):
        _hold(message)  # outside any transaction
        return message.event_id

    two_step = LongHandler(_prepare, lambda tx, message, result: Handler()(tx, message))
''')


@dataclass
class Run:
    """What one paused run saw: a timeline (seconds since the start) and the end state."""

    engine: str
    shape: str
    timeline: list[tuple[str, float]] = field(default_factory=list)
    paused: dict[str, Any] = field(default_factory=dict)  # A's exit status, summary, stderr
    during: dict[str, Any] = field(default_factory=dict)  # B, during the pause: E0002
    retaken: dict[str, Any] = field(default_factory=dict)  # B2, during the pause: E0001
    waiter: dict[str, Any] = field(default_factory=dict)  # a writer started during the pause
    effects: dict[str, int] = field(default_factory=dict)
    final: dict[str, list[Any]] = field(default_factory=dict)  # event id: [state, generation]
    pause_seconds: float = 0.0
    _began: float = field(default_factory=time.monotonic, repr=False)

    def at(self, event: str) -> float:
        moment = round(time.monotonic() - self._began, 2)
        self.timeline.append((event, moment))
        return moment

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


def _env(folder: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PAUSE_FOLDER": str(folder)}


def _work(target: str, folder: Path, *options: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "queue_core", "work", "--db", target, "--json",
               "--lease-seconds", str(LEASE), *options]
    return subprocess.Popen(command, cwd=folder, env=_env(folder), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(process: subprocess.Popen[str], began: float | None = None) -> dict[str, Any]:
    """A worker's end: exit status, summary (stdout), what it said on stderr but progress."""
    out, err = process.communicate(timeout=WAIT)
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("{")]
    ended = {"status": process.returncode, "summary": json.loads(out) if out.strip() else None,
             "stderr": " ".join(said)}
    if began is not None:
        ended["seconds"] = round(time.monotonic() - began, 2)
    return ended


def _ledger_worker(target: str, folder: Path, *options: str) -> dict[str, Any]:
    """A worker with the ledger's handler (one message unless ``options`` say more), to its end."""
    began = time.monotonic()
    return _finish(_work(target, folder, "--max-messages", "1", *options), began)


def until(condition: Callable[[], bool], what: str, within: float = WAIT) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within:g} s")
        time.sleep(0.01)


def lease_ended(queue: Store, event_id: str = "E0001") -> bool:
    """Whether ``event_id``'s lease has run out by the queue's own clock."""
    deadline = queue.message(event_id).lease_until
    return deadline is not None and queue.read(lambda tx: tx.now()) > deadline


def prepared(target: str, *, both: bool = False) -> Store:
    """The queue with the ledger installed and E0001 for worker A; the caller closes it.

    ``both``: E0002 too, after E0001 (a lower priority), for when nothing
    can be written during the pause; otherwise ``other_message`` adds it then.
    """
    queue = Store(target)
    ledger.install(queue)
    queue.enqueue(_line("E0001"))
    if both:
        queue.enqueue(_line("E0002"), priority=-1)
    return queue


def other_message(queue: Store) -> None:
    """E0002, added during the pause before E0001 (a higher priority), even once A's lease has ended."""
    queue.enqueue(_line("E0002"), priority=1)


@contextmanager
def paused_worker(target: str, folder: Path, shape: str, run: Run,
                  extra: Sequence[str] = ()) -> Iterator[subprocess.Popen[str]]:
    """Worker A, stopped right after its claim of E0001; killed if the caller fails."""
    (folder / "pause_handlers.py").write_text(HANDLERS, encoding="utf-8")
    options = ["--heartbeat-every", str(HEARTBEAT)] if shape == "two_step" else []
    worker = _work(target, folder, "--handler", f"pause_handlers:{shape}",
                   "--max-messages", "1", *options, *extra)
    try:
        until(lambda: (folder / "claimed").exists() or worker.poll() is not None,
              "worker A never claimed")
        if not (folder / "claimed").exists():
            raise AssertionError(f"worker A ended before its claim: {_finish(worker)}")
        os.kill(worker.pid, signal.SIGSTOP)
        run.at("A claimed E0001, stopped (SIGSTOP)")
        yield worker
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGCONT)
            worker.kill()
            worker.wait()


def resume(worker: subprocess.Popen[str], folder: Path, run: Run, stopped_at: float) -> None:
    """Let A's handler go on, continue A (SIGCONT) and wait for its end."""
    (folder / "go").touch()
    os.kill(worker.pid, signal.SIGCONT)
    run.pause_seconds = round(run.at("A continued (SIGCONT)") - stopped_at, 2)
    run.paused = _finish(worker)
    run.at(f"A ended: {_said(run.paused)}")


def end_state(queue: Store, run: Run) -> None:
    counts: dict[str, int] = {}
    for event_id, _, _ in ledger.effects(queue):
        counts[event_id] = counts.get(event_id, 0) + 1
    run.effects = counts
    run.final = {m.event_id: [m.state, m.generation] for m in queue.messages()}


def no_live_lease(queue: Store) -> bool:
    """Whether every message is done or its lease has ended (a last worker can take it)."""
    return all(m.state != "leased" or lease_ended(queue, m.event_id) for m in queue.messages())


def paused_past_lease(target: str, folder: Path, engine: str, shape: str,
                      guard_ms: int | None = None, hold: float = 0.0) -> Run:
    """A paused after its claim, past its lease; other workers try; A continues.

    ``shape``: ``two_step``, ``plain`` (paused before its effect) or
    ``plain_after`` (after it). ``guard_ms``: A's own
    ``idle_in_transaction_session_timeout`` on PostgreSQL (None: the store's).
    ``hold``: keep A stopped at least this long (seconds), to measure a stall.
    """
    name = shape if guard_ms is None else f"{shape}, guard {guard_ms} ms"
    run = Run(engine, name if not hold else f"{name}, held {hold:g} s")
    url = target if guard_ms is None else _with_option(
        target, f"-c idle_in_transaction_session_timeout={guard_ms}")
    locked = engine == "sqlite" and shape != "two_step"  # A holds SQLite's write lock
    with prepared(target, both=locked) as queue, \
            paused_worker(url, folder, shape, run) as worker:
        stopped_at = run.timeline[-1][1]
        waiter, waited_from = None, time.monotonic()
        if locked:  # a writer that waits: how long it stalls
            waiter = _work(target, folder, "--max-messages", "2", "--busy-timeout", "60")
            run.at("W started (busy timeout 60 s)")
        else:
            other_message(queue)
        until(lambda: lease_ended(queue), "A's lease never ended")
        run.at("A's lease ended (the queue's clock)")
        time.sleep(max(0.0, hold - (time.monotonic() - waited_from)))  # a chosen pause, not a wait
        # B may not wait: on SQLite a plain handler's pause holds the write lock
        run.during = _ledger_worker(target, folder, "--busy-timeout", "1")
        run.at(f"B ended: {_said(run.during)}")
        if waiter is None:  # E0002 done: now E0001, whose lease ended
            wait = "30" if guard_ms else "1"  # with a guard: until the server ends A's session
            run.retaken = _ledger_worker(target, folder, "--busy-timeout", wait)
            run.at(f"B2 ended: {_said(run.retaken)}")
        still_waiting = waiter is not None and waiter.poll() is None
        resume(worker, folder, run, stopped_at)
        if waiter is not None:
            run.waiter = {**_finish(waiter, waited_from), "waiting_at_continue": still_waiting}
            run.at(f"W ended: {_said(run.waiter)}")
        until(lambda: no_live_lease(queue), "a lease never ended")
        last = _ledger_worker(target, folder, "--max-messages", "2")
        run.at(f"C ended: {_said(last)}")
        end_state(queue, run)
    return run


def _said(worker: dict[str, Any]) -> str:
    summary = worker["summary"]
    if summary is None:
        return worker["stderr"] or f"exit {worker['status']}"
    return ", ".join(f"{summary[k]} {k}" for k in ("done", "lease_lost") if summary[k]) or "nothing"


def server_pid_in_commit(target: str) -> int | None:
    """The backend whose statement is a COMMIT held by the planted trigger, if any."""
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE query = 'COMMIT' "
            "AND wait_event = 'PgSleep' AND datname = current_database()").fetchone()
    return None if row is None else int(row[0])


HOLD_KEY = 36_001  # the advisory lock a COMMIT of E0001's effect waits for


def plant_commit_hold(target: str) -> None:
    """A deferred trigger on ``effects``: COMMIT polls until the harness lets go of a lock.

    It only catches the moment; the pause itself is SIGSTOP of the server's
    backend while that COMMIT is in flight. It polls rather than waits, so
    that the session's ``lock_timeout`` (which counts the stopped time) is
    not what ends it.
    """
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(textwrap.dedent(f"""
            CREATE FUNCTION pause_hold() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              WHILE NOT pg_try_advisory_xact_lock({HOLD_KEY}) LOOP
                PERFORM pg_sleep(0.01);
              END LOOP;
              RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER pause_hold AFTER INSERT ON effects
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
            WHEN (NEW.event_id = 'E0001') EXECUTE FUNCTION pause_hold();
        """))


def paused_in_commit(target: str, folder: Path) -> Run:
    """PostgreSQL: A's server backend stopped inside A's COMMIT, past the lease (``target``: a superuser's URL)."""
    import psycopg

    run = Run("postgresql", "plain, stopped inside COMMIT")
    (folder / "go").touch()  # A does not wait in its handler: the COMMIT waits
    with prepared(target) as queue, psycopg.connect(target, autocommit=True) as hold:
        plant_commit_hold(target)
        hold.execute("SELECT pg_advisory_lock(%s)", (HOLD_KEY,))
        (folder / "pause_handlers.py").write_text(HANDLERS, encoding="utf-8")
        worker = _work(target, folder, "--handler", "pause_handlers:plain", "--max-messages", "1")
        backend: int | None = None
        try:
            until(lambda: server_pid_in_commit(target) is not None, "A's COMMIT never began", 8)
            backend = server_pid_in_commit(target)
            assert backend is not None
            os.kill(backend, signal.SIGSTOP)
            stopped_at = run.at("A's server backend stopped inside COMMIT")
            other_message(queue)
            hold.execute("SELECT pg_advisory_unlock(%s)", (HOLD_KEY,))
            until(lambda: lease_ended(queue), "A's lease never ended")
            run.at("A's lease ended (the server's clock)")
            run.during = _ledger_worker(target, folder, "--busy-timeout", "1")
            run.at(f"B ended: {_said(run.during)}")
            os.kill(backend, signal.SIGCONT)
            run.pause_seconds = round(run.at("A's backend continued") - stopped_at, 2)
            run.paused = _finish(worker)
            run.at(f"A ended: {_said(run.paused)}")
        finally:
            if backend is not None:
                with contextlib.suppress(ProcessLookupError):  # ended with its session
                    os.kill(backend, signal.SIGCONT)
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        until(lambda: no_live_lease(queue), "a lease never ended")
        run.at(f"C ended: {_said(_ledger_worker(target, folder, '--max-messages', '2'))}")
        end_state(queue, run)
    return run


def _with_option(url: str, option: str) -> str:
    from urllib.parse import quote

    return f"{url}{'&' if '?' in url else '?'}options={quote(option)}"
