"""Real ``queue-core`` processes on one file: random SIGKILLs, and eight workers on one write lock.

* ``chaos()`` runs several ``queue-core work`` processes on one file and
  SIGKILLs them (and the producer, ``queue-core enqueue``) at random moments,
  round after round, then makes a final pass and checks every invariant.
  With ``target=`` a ``postgresql://`` URL it runs the same rounds against
  that (fresh, empty) PostgreSQL database instead of a new file.
* ``contention()`` starts eight ``queue-core work`` processes while the write
  lock is held for longer than SQLite's busy timeout, so that every one of
  them has to wait, give up, back off and retry; then it reports who did how
  much.

Both return a frozen result (``ChaosResult``, ``ContentionResult``) with
``to_dict()`` for JSON. Only the clock is modelled (``--now``); processes,
kills, SQLite files and the PostgreSQL server are real.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Final, TypeVar

from queue_core import ledger
from queue_core.engines import is_postgres_url
from queue_core.engines.postgres import safe_url
from queue_core.clock import ModelClock
from queue_core.envelope import MAX_LINES
from queue_core.queues import DEFAULT_QUEUE
from queue_core.store import BUSY_TIMEOUT_MS, HANDLER_ERROR, LEASE_EXPIRED, Store
from queue_core.worker import WorkSummary
from proof.invariants import (
    FileState,
    Payload,
    check_invariants,
    finish_queue,
    losses_and_doubles,
    read_file,
)
from proof.kill_sample import KillEvent, KillSample, holds_flock
from proof.matrix import BOOK, PEN, START, TOY, batch_text, work_folder

__all__ = [
    "LONG",
    "MAX_EVENTS",
    "MAX_NAMED_EVENTS",
    "Progress",
    "QUEUE_CORE",
    "QUICK",
    "ROUND_STEP_SECONDS",
    "VICTIM_WAIT_SECONDS",
    "ChaosResult",
    "ContentionResult",
    "chaos",
    "contention",
]

# the real command line, as `queue-core` runs it
QUEUE_CORE: Final = (sys.executable, "-m", "queue_core")
QUICK: Final[Mapping[str, int]] = {
    "rounds": 10,
    "events_per_round": 200,
    "workers": 3,
    "max_kills_per_round": 5,
}
# Over a thousand worker SIGKILLs on either engine: a kill lands only while the round's workers
# still have work, so the rounds are long (a full batch each; a named queue holds their 118,800
# events) and every round tries at least 15 kills.
LONG: Final[Mapping[str, int]] = {
    # kills are counted only when they hit a live worker, so a faster worker
    # meets fewer: enough rounds that a run passes MIN_KILLS with room to spare
    "rounds": 160,
    "events_per_round": 990,
    "workers": 5,
    "min_kills_per_round": 15,
    "max_kills_per_round": 40,
}
MAX_EVENTS: Final = 9_999  # event ids are E0001..E9999 in the default queue
# A run of more events goes to a named queue of its own, whose ids are C000001..C999999.
NAMED_QUEUE: Final = "chaos"
NAMED_ID_PATTERN: Final = "C[0-9]{6}"
MAX_NAMED_EVENTS: Final = 999_999
# lines already sent that each round's batch repeats (a batch holds at most MAX_LINES lines)
REPEATED_LINES: Final = 10
# model time between rounds: longer than any lease or backoff of the run
ROUND_STEP_SECONDS: Final = 10
# How long a worker chosen as the victim may take to open the database before it is killed anyway: far
# longer than a start takes (about 0.3 s on SQLite, 0.6 s on PostgreSQL, which imports psycopg and waits
# for a new server backend; several times that on a loaded machine). A shorter wait made most kills of a
# freshly started worker land before it had opened anything, where they test nothing.
VICTIM_WAIT_SECONDS: Final = 5.0

R = TypeVar("R")
# what a run says of its progress, a line at a time
Progress = Callable[[str], None]


class _Result:
    """JSON for a frozen result: ``to_dict()`` and ``from_dict()`` (lists for tuples)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in asdict(self).items()  # type: ignore[call-overload]
        }

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        """The result from its JSON; a field that an older record lacks takes its default."""
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name not in data and f.default is not MISSING:
                continue
            value = data[f.name]
            values[f.name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)


# ========================================================== processes on one file


def _has_open(pid: int, path: Path) -> bool:
    """True if process ``pid`` has ``path`` open (Linux ``/proc``; False elsewhere)."""
    target = str(path.resolve())
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    except OSError:
        pass
    return False


def _has_a_socket(pid: int) -> bool:
    """True if process ``pid`` has a socket open (Linux ``/proc``); True where that cannot be seen."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True  # no /proc: let the server's answer decide alone
    for fd in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                return True
        except OSError:
            continue
    return False


def _wait_until_open(
    process: subprocess.Popen[str], path: Path, timeout: float
) -> bool:
    """Wait until ``process`` has the SQLite file ``path`` open; False if it exits or ``timeout`` passes first.

    Without ``/proc`` (not Linux) nothing can be seen: it gives up after half a second at most.
    """
    if not os.path.isdir("/proc/self/fd"):
        timeout = min(timeout, 0.5)
    return _wait_until(process, lambda: _has_open(process.pid, path), timeout)


def _wait_until(
    process: subprocess.Popen[str], seen: Callable[[], bool], timeout: float
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if seen():
            return True
        time.sleep(0.002)
    return False


class _Sessions:
    """Which of the run's processes have a session on the PostgreSQL server (``pg_stat_activity``).

    Each process is started with its own ``PGAPPNAME`` (libpq's
    ``application_name``); the server lists a client backend under that name
    in ``pg_stat_activity`` once the process has connected and its session
    started. That is the PostgreSQL counterpart of "has the file open": the
    process opened its store and can from then on read and write. (The
    server is asked only once the process has a socket open, which
    ``/proc/<pid>/fd`` shows without a query: a process still starting up
    costs the server nothing.)
    """

    def __init__(self, url: str) -> None:
        import psycopg

        if "application_name" in url:
            raise ValueError(
                "the chaos run names each process's session itself (PGAPPNAME): "
                "give a URL without application_name"
            )
        self._conn: psycopg.Connection[Any] = psycopg.connect(url, autocommit=True)

    def connected(self, name: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND application_name = %s LIMIT 1",
            (name,),
        ).fetchone()
        return row is not None

    def state(self, name: str) -> str | None:
        """The state of the session named ``name`` (``active``, ``idle``, ...), None without one."""
        row = self._conn.execute(
            "SELECT state FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND application_name = %s LIMIT 1",
            (name,),
        ).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        self._conn.close()


@dataclass
class _Worker:
    """A running ``queue-core work`` process."""

    process: subprocess.Popen[str]
    started: float
    ended: float | None = None
    killed: bool = False  # the run sent it a SIGKILL
    opened: bool = False  # it had the database open when the SIGKILL was sent


@dataclass(frozen=True)
class _Exit:
    """How one worker process ended."""

    status: int
    summary: WorkSummary | None  # what it printed, if it exited by itself
    stderr: str
    # Ended by the run's SIGKILL. One sent just after the process exited by itself (between the check
    # that it runs and the signal) missed it: that process exited cleanly and is no kill.
    killed: bool
    opened: bool  # killed while it had the database open
    seconds: float

    @property
    def traceback(self) -> bool:
        return "Traceback" in self.stderr

    @property
    def error(self) -> bool:
        """It was not killed and yet failed."""
        return not self.killed and (self.status != 0 or self.traceback)


class _Processes:
    """Starts the run's processes; kills those still running if the run fails.

    ``db`` is the SQLite file or the PostgreSQL URL every process gets as ``--db``;
    ``queue`` the queue every process gets as ``--queue``.
    """

    def __init__(self, db: Path | str, queue: str = DEFAULT_QUEUE) -> None:
        self.db = db
        self.queue = queue
        self.started: list[subprocess.Popen[str]] = []
        self._sessions = _Sessions(db) if isinstance(db, str) else None
        # pid -> the application_name of its PostgreSQL session
        self._names: dict[int, str] = {}
        # A kill lands at a random moment up to this long after the victim opened the database, so that
        # kills spread over its setup, its work, and (for a producer) past its COMMIT. On SQLite 0.01 s
        # already reaches past a producer's COMMIT. A PostgreSQL producer needs about 0.1 s from its
        # session's start to its exit (it makes sure of the schema and of the ledger's table in two
        # transactions of their own first): with 0.01 s every kill landed before its batch was written.
        self.kill_window_seconds = 0.01 if self._sessions is None else 0.15

    def start(self, *args: str, now: int) -> subprocess.Popen[str]:
        command = [*QUEUE_CORE, "--db", str(self.db), "--now", str(now)]
        if self.queue != DEFAULT_QUEUE:
            command += ["--queue", self.queue]
        command += args
        env = None
        name = f"queue-core-chaos-{os.getpid()}-{len(self.started) + 1}"
        if self._sessions is not None:
            env = {**os.environ, "PGAPPNAME": name}
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.started.append(process)
        self._names[process.pid] = name
        return process

    def wait_until_open(self, process: subprocess.Popen[str], timeout: float) -> bool:
        """Wait until ``process`` has the database open; False if it exits or ``timeout`` passes first.

        On SQLite: the file is among its open file descriptors (``/proc/<pid>/fd``).
        On PostgreSQL: the server lists its session (``_Sessions``).
        """
        if self._sessions is None:
            assert isinstance(self.db, Path)
            return _wait_until_open(process, self.db, timeout)
        sessions, name = self._sessions, self._names[process.pid]
        return _wait_until(
            process,
            lambda: _has_a_socket(process.pid) and sessions.connected(name),
            timeout,
        )

    def doing(self, process: subprocess.Popen[str], opened: bool) -> str:
        """What ``process`` is doing now, as seen from outside (a key of ``kill_sample.DOING``)."""
        if not opened:
            return "starting"
        if self._sessions is None:
            turn = Path(f"{self.db}-lock")  # the writers' turn (engines/sqlite_turn.py)
            return "processing" if holds_flock(process.pid, turn) else "between"
        state = self._sessions.state(self._names[process.pid]) or ""
        return "in a transaction" if state.startswith(("active", "idle in")) else "idle"

    def number(self, process: subprocess.Popen[str]) -> int:
        """Which process of the run this is (1 for the first one started)."""
        return self.started.index(process) + 1

    def worker(self, now: int, lease_seconds: int | None = None) -> _Worker:
        extra: tuple[str, ...] = (
            ("--lease-seconds", str(lease_seconds)) if lease_seconds is not None else ()
        )
        if self.queue != DEFAULT_QUEUE:  # a queue of its own names its handler
            extra += ("--handler", "queue_core.app.ledger:handler")
        return _Worker(self.start("work", *extra, now=now), time.monotonic())

    def kill_the_rest(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.communicate()
        if self._sessions is not None:
            self._sessions.close()


@contextmanager
def _processes(db: Path | str, queue: str = DEFAULT_QUEUE) -> Iterator[_Processes]:
    processes = _Processes(db, queue)
    try:
        yield processes
    finally:
        processes.kill_the_rest()


def _wait_all(workers: Sequence[_Worker], timeout: float = 600) -> list[_Exit]:
    """Wait until every worker has exited; how each one ended."""
    deadline = time.monotonic() + timeout
    while any(w.ended is None for w in workers):
        for w in workers:
            if w.ended is None and w.process.poll() is not None:
                w.ended = time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError("worker processes did not finish in time")
        time.sleep(0.005)
    return [_exit(w) for w in workers]


def _exit(worker: _Worker) -> _Exit:
    out, err = worker.process.communicate()
    status = worker.process.returncode
    summary = None
    if status == 0:
        try:
            summary = WorkSummary(**json.loads(out))
        except (ValueError, TypeError):
            summary = None
    killed = worker.killed and status == -signal.SIGKILL
    return _Exit(
        status,
        summary,
        err.strip(),
        killed,
        killed and worker.opened,
        (worker.ended or 0) - worker.started,
    )


# How each engine words a refusal by a unique key: SQLite's IntegrityError, PostgreSQL's (in a StorageError).
_UNIQUE_KEY_REFUSALS: Final = (
    "UNIQUE constraint failed",
    "duplicate key value violates unique constraint",
)


def _unique_key_refusals(state: FileState) -> int:
    """Messages whose effect INSERT was once refused by the unique key: an attempted double.

    (The store records a handler's unexpected exception as ``handler_error``
    with the exception in ``last_detail``.)
    """
    return sum(
        1
        for m in state.messages
        if m.last_error == HANDLER_ERROR
        and any(words in (m.last_detail or "") for words in _UNIQUE_KEY_REFUSALS)
    )


# ===================================================================== contention


@dataclass(frozen=True)
class ContentionResult(_Result):
    """What ``contention()`` measured."""

    workers: int
    events: int
    busy_timeout_seconds: float
    lock_held_seconds: float
    all_waiting_before_the_countdown: bool
    exit_statuses: tuple[int, ...]
    tracebacks: int
    stderr_lines: int
    shares_done: tuple[int | None, ...]  # each worker's share of the done messages
    claimed: int
    done: int
    lease_lost: int
    worker_seconds: tuple[float, ...]
    seconds: float
    total_cents: int
    expected_cents: int
    losses: int
    doubles: int
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing doubled, no invariant violated."""
        return not (self.violations or self.losses or self.doubles)


def contention(
    workdir: str | Path | None = None,
    *,
    workers: int = 8,
    events: int = 400,
    hold_extra_seconds: float = 0.5,
) -> ContentionResult:
    """``workers`` ``queue-core work`` processes on one file, all made to wait out the write lock.

    The file gets ``events`` messages. The write lock is taken (a protocol
    transaction left open) before the workers start and is held until every
    worker has the file open and is waiting for it, plus SQLite's busy timeout
    and ``hold_extra_seconds``: each worker's first claim therefore runs out
    its busy timeout, gets "busy", backs off and retries. Then the lock is
    released and they share the work.
    """
    with work_folder(workdir) as root:
        db = root / "queue.sqlite3"
        sent = {
            f"E{n:04d}": {"category": PEN, "amount_cents": n}
            for n in range(1, events + 1)
        }
        expected_cents = sum(range(1, events + 1))
        store = Store(db, clock=ModelClock(START))
        # before the lock is taken: a queue of the reference application
        ledger.install(store)
        store.enqueue(batch_text(sent))
        with _processes(db) as processes:
            started = time.monotonic()
            with Store(db, clock=ModelClock(START)).transaction():
                crowd = [processes.worker(START) for _ in range(workers)]
                waiting = [_wait_until_open(w.process, db, timeout=60) for w in crowd]
                time.sleep(BUSY_TIMEOUT_MS / 1000 + hold_extra_seconds)
                held = time.monotonic() - started
            exits = _wait_all(crowd)
            seconds = time.monotonic() - started
        state = read_file(db)
    lost, doubled = losses_and_doubles(state, sent, set(sent))
    summaries = [e.summary for e in exits if e.summary]
    shares = tuple(e.summary.done if e.summary else None for e in exits)
    return ContentionResult(
        workers=workers,
        events=events,
        busy_timeout_seconds=BUSY_TIMEOUT_MS / 1000,
        lock_held_seconds=round(held, 2),
        all_waiting_before_the_countdown=all(waiting),
        exit_statuses=tuple(e.status for e in exits),
        tracebacks=sum(e.traceback for e in exits),
        stderr_lines=sum(len(e.stderr.splitlines()) for e in exits),
        shares_done=shares,
        claimed=sum(s.claimed for s in summaries),
        done=sum(s for s in shares if s is not None),
        lease_lost=sum(s.lease_lost for s in summaries),
        worker_seconds=tuple(round(e.seconds, 2) for e in exits),
        seconds=round(seconds, 2),
        total_cents=state.total_cents,
        expected_cents=expected_cents,
        losses=lost,
        doubles=doubled + _unique_key_refusals(state),
        violations=tuple(
            check_invariants(state, events=sent, expected_total=expected_cents)
        ),
    )


# ========================================================================== chaos


@dataclass(frozen=True)
class ChaosResult(_Result):
    """What ``chaos()`` did and found.

    ``engine`` is ``"sqlite"`` or ``"postgresql"``. "With the file open"
    (``worker_kills_with_the_file_open``) means, on PostgreSQL, that the
    server listed the worker's session (it had connected; see ``_Sessions``).
    """

    seed: int
    engine: str
    rounds: int
    workers_at_once: int
    lease_seconds: int
    clock_stagger_seconds: int
    round_step_seconds: int
    events: int
    valid_events: int
    toys: int
    lines_sent: int
    producer_kills: int
    producer_resends: int
    producer_kills_after_its_commit: int
    worker_processes: int
    worker_kills: int
    worker_kills_with_the_file_open: int
    kills: int
    clean_worker_exits: int
    worker_errors: int
    tracebacks: int
    lease_lost_reported: int
    completed_by_a_later_generation: int
    lease_expired_redriven: int
    done: int
    dead: int
    total_cents: int
    expected_cents: int
    losses: int
    doubles: int
    violations: tuple[str, ...]
    seconds: float
    queue: str = DEFAULT_QUEUE  # where the events went: a named queue when they are many
    # a bounded sample of the kills (proof/kill_sample.py), and of how many kills
    kill_sample: tuple[dict[str, Any], ...] = ()
    kill_sample_of: int = 0

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing doubled, no invariant violated."""
        return not (self.violations or self.losses or self.doubles)


@dataclass
class _Tally:
    """What a chaos run counts while it runs."""

    lines_sent: int = 0
    producer_kills: int = 0
    producer_resends: int = 0
    producer_kills_after_its_commit: int = 0
    worker_processes: int = 0
    # SIGKILLs sent; the exits say which of them killed (``_Exit.killed``)
    worker_kills_sent: int = 0
    exits: list[_Exit] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    """The parameters of a chaos run, and its random choices."""

    rounds: int
    events_per_round: int
    workers: int
    max_kills_per_round: int
    min_kills_per_round: int
    queue: str
    producer_kill_chance: float
    toy_share: float
    stagger_seconds: int
    lease_seconds: int
    rng: random.Random
    sample: KillSample  # a bounded sample of the kills, for the page's timeline


def chaos(
    workdir: str | Path | None = None,
    *,
    rounds: int = QUICK["rounds"],
    events_per_round: int = QUICK["events_per_round"],
    workers: int = QUICK["workers"],
    max_kills_per_round: int = QUICK["max_kills_per_round"],
    min_kills_per_round: int = 1,
    producer_kill_chance: float = 0.5,
    toy_share: float = 0.05,
    stagger_seconds: int = 2,
    lease_seconds: int = 2,
    seed: int | None = None,
    progress: Progress | None = None,
    target: str | None = None,
    queue: str | None = None,
) -> ChaosResult:
    """Random SIGKILLs of real ``queue-core`` processes on one file, round after round; then a final pass.

    Each round: a producer (``queue-core enqueue``) sends a batch of new events
    (a few of them toys, which this handler refuses) plus a few lines already
    sent; with ``producer_kill_chance`` it is SIGKILLed at a random moment once
    it has the file open, and then it sends the same batch again until it gets
    an answer. Then ``workers`` ``queue-core work`` processes run; at random
    moments (up to ``max_kills_per_round`` times) one of them, once it has the
    file open, is SIGKILLed and replaced (at least ``min_kills_per_round``
    times, while any of them still runs). Worker ``i`` reads the model clock
    ``i % (stagger_seconds + 1)`` seconds later than worker 0, with leases of
    ``lease_seconds``: a later worker finds an earlier one's lease expired and
    takes the message over while the earlier one may still be working on it,
    like a worker that paused longer than its lease. Each round starts
    ``ROUND_STEP_SECONDS`` of model time after the previous one, so abandoned
    leases have expired.

    The final pass: a fresh worker finishes the queue, the dead letters whose
    three leases all ran out (``lease_expired``, a price of the kills) are
    redriven, and the queue is finished again. Then every invariant is checked:
    every valid event done with exactly one effect, every toy dead with its
    reason, and the money exact.

    ``queue``: the queue the events go to. The default queue takes
    E0001..E9999 (``MAX_EVENTS``); a named queue, made by the run, takes
    C000001..C999999. ``None``: the default queue if the run's events fit in
    it, else ``NAMED_QUEUE``.

    ``target``: a ``postgresql://`` URL of a fresh, empty database to run
    against instead of a new SQLite file in ``workdir`` (which still holds the
    batch files). Every process gets the URL as ``--db``; "once it has the
    file open" then means once the server lists its session
    (``pg_stat_activity``, by the ``PGAPPNAME`` it was started with). The
    final pass and the checker read the database itself, in one read-only
    snapshot (``invariants.read_file``).
    """
    if rounds * events_per_round > MAX_NAMED_EVENTS:
        raise ValueError(
            f"at most {MAX_NAMED_EVENTS} events fit in one run (event ids C000001..C999999)"
        )
    if events_per_round + REPEATED_LINES > MAX_LINES:
        raise ValueError(
            f"a round's batch holds at most {MAX_LINES} lines: {REPEATED_LINES} sent "
            f"again and at most {MAX_LINES - REPEATED_LINES} new events"
        )
    if not 0 <= min_kills_per_round <= max(max_kills_per_round, 1):
        raise ValueError("min_kills_per_round must be between 0 and max_kills_per_round")
    if queue is None:
        queue = (
            DEFAULT_QUEUE if rounds * events_per_round <= MAX_EVENTS else NAMED_QUEUE
        )
    if queue == DEFAULT_QUEUE and rounds * events_per_round > MAX_EVENTS:
        raise ValueError(
            f"at most {MAX_EVENTS} events fit in the default queue (E0001..E9999): "
            "run in a named queue"
        )
    if target is not None and not is_postgres_url(target):
        raise ValueError(
            f"target must be a postgresql:// URL (or None for a new SQLite file), got {target!r}"
        )
    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    plan = _Plan(
        rounds,
        events_per_round,
        workers,
        max_kills_per_round,
        min_kills_per_round,
        queue,
        producer_kill_chance,
        toy_share,
        stagger_seconds,
        lease_seconds,
        random.Random(seed),
        KillSample(seed),
    )
    say = progress or (lambda _message: None)
    tally = _Tally()
    sent: dict[str, Payload] = {}
    began = time.monotonic()
    with work_folder(workdir) as root:
        db: Path | str = root / "queue.sqlite3" if target is None else target
        # the queue's schema, before any process starts
        with Store(db, clock=ModelClock(START)) as store:
            held = sum(sum(n.messages.values()) for _, n in store.queues())
            if not held and queue != DEFAULT_QUEUE:
                store.create_queue(queue, id_pattern=NAMED_ID_PATTERN)
                ledger.install(store)  # --handler creates nothing: the effects table, here
        if held:
            raise ValueError(
                f"the chaos run needs an empty database: {safe_url(str(db))} "
                f"already holds {held} message(s)"
            )
        now = START
        with _processes(db, queue) as processes:
            for round_number in range(1, rounds + 1):
                now += ROUND_STEP_SECONDS
                batch = _next_batch(
                    plan, sent, root / f"batch-{round_number:03d}.jsonl", tally
                )
                _produce(processes, batch, now, round_number, plan, tally)
                _work_and_kill(processes, now, round_number, plan, tally)
                say(
                    f"round {round_number}/{rounds}: {len(sent)} events sent, "
                    f"{tally.worker_kills_sent} worker kills so far"
                )
        expired = _final_pass(db, now + ROUND_STEP_SECONDS, lease_seconds, queue)
        state = read_file(db)
    return _judge(
        state,
        sent,
        tally,
        plan,
        seed=seed,
        redriven=expired,
        seconds=time.monotonic() - began,
    )


def _next_batch(
    plan: _Plan, sent: dict[str, Payload], path: Path, tally: _Tally
) -> tuple[Path, int]:
    """Write the round's batch: new events (a few toys) and up to ``REPEATED_LINES`` lines already sent.

    Returns the batch file and how many of its events are new; ``sent`` gains them.
    """
    rng = plan.rng
    new: dict[str, Payload] = {}
    named = plan.queue != DEFAULT_QUEUE
    for number in range(len(sent) + 1, len(sent) + plan.events_per_round + 1):
        category = (
            TOY if rng.random() < plan.toy_share else rng.choice((BOOK, PEN, "bag"))
        )
        new[f"C{number:06d}" if named else f"E{number:04d}"] = {
            "category": category,
            "amount_cents": rng.randint(1, 99_999),
        }
    again = {
        e: sent[e] for e in rng.sample(sorted(sent), min(len(sent), REPEATED_LINES))
    }
    sent.update(new)
    path.write_text(batch_text({**again, **new}), encoding="utf-8")
    tally.lines_sent += len(again) + len(new)
    return path, len(new)


def _produce(
    processes: _Processes,
    batch: tuple[Path, int],
    now: int,
    round_number: int,
    plan: _Plan,
    tally: _Tally,
) -> None:
    """The producer: maybe killed once it has the file open, then it resends the batch until it hears an answer.

    A kill counts if the producer died of it (one sent just after it exited by
    itself missed). It came after the producer's COMMIT if the resend then
    finds every line already stored (``accepted`` 0).
    """
    path, new = batch
    kill = plan.rng.random() < plan.producer_kill_chance
    killed_before = False  # an earlier send of this batch died of a kill
    while True:
        producer = processes.start("enqueue", str(path), now=now)
        signalled = False
        if kill:
            kill = False
            opened = processes.wait_until_open(producer, timeout=5)
            if opened:
                time.sleep(plan.rng.uniform(0, processes.kill_window_seconds))
            if producer.poll() is None:
                producer.kill()
                signalled = True
                event = KillEvent(plan.sample.since(), round_number, "producer", None,
                                  processes.number(producer), now, opened, "before commit")
        out, err = producer.communicate(timeout=120)
        if producer.returncode == 0:
            answer = json.loads(out)
            if answer["accepted"] not in (0, new):
                tally.violations.append(
                    f"round {round_number}: a batch was stored in part: {answer}"
                )
            if killed_before and answer["accepted"] == 0:
                tally.producer_kills_after_its_commit += 1
            if killed_before:
                event.doing = "after commit" if answer["accepted"] == 0 else "before commit"
                event.next = (f"the resend: {answer['accepted']} accepted, "
                              f"{answer['duplicates']} duplicates")
                plan.sample.offer(event)
            return
        if producer.returncode != -signal.SIGKILL or not signalled:
            tally.violations.append(
                f"round {round_number}: the producer failed: {err.strip()[-300:]}"
            )
            return
        tally.producer_kills += 1
        killed_before = True
        tally.producer_resends += 1


def _work_and_kill(
    processes: _Processes, now: int, round_number: int, plan: _Plan, tally: _Tally
) -> None:
    """The round's workers, on staggered clocks; some SIGKILLed at random moments and replaced."""
    rng = plan.rng
    places: dict[int, int] = {}  # id of a worker -> its place (a replacement takes its victim's)
    events: list[KillEvent] = []

    def start(slot: int) -> _Worker:
        tally.worker_processes += 1
        return processes.worker(
            now + slot % (plan.stagger_seconds + 1), plan.lease_seconds
        )

    crowd = [start(slot) for slot in range(plan.workers)]
    places.update((id(w), place) for place, w in enumerate(crowd))
    kills = (
        rng.randint(plan.min_kills_per_round, plan.max_kills_per_round)
        if plan.max_kills_per_round
        else 0
    )
    while True:
        # a victim already sent its SIGKILL may not have died yet: it is no longer a candidate
        alive = [w for w in crowd if w.process.poll() is None and not w.killed]
        if not alive:
            break
        if kills == 0:
            time.sleep(0.01)
            continue
        time.sleep(rng.uniform(0.0, 0.12))
        victim = rng.choice(alive)
        opened = processes.wait_until_open(victim.process, timeout=VICTIM_WAIT_SECONDS)
        if opened:
            time.sleep(rng.uniform(0, processes.kill_window_seconds))
        if victim.process.poll() is None:
            doing = processes.doing(victim.process, opened)
            victim.process.send_signal(signal.SIGKILL)
            victim.killed, victim.opened = True, opened
            tally.worker_kills_sent += 1
            slot = crowd.index(victim)
            event = KillEvent(plan.sample.since(), round_number, "worker", places[id(victim)],
                              processes.number(victim.process),
                              now + slot % (plan.stagger_seconds + 1), opened, doing)
            replacement = start(slot)
            places[id(replacement)] = places[id(victim)]
            event.pending = (slot, len(crowd))  # the victim's index, its replacement's
            crowd.append(replacement)
            events.append(event)
            plan.sample.offer(event)
        kills -= 1
    exits = _wait_all(crowd)
    for event in events:  # what came next, now that every worker of the round has exited
        victim, replacement = (exits[index] for index in event.pending)
        event.pending = None
        if not victim.killed:
            plan.sample.forget(event)  # it exited by itself just before the signal
        elif replacement.summary is not None:
            s = replacement.summary
            event.next = (f"the worker in its place: claimed {s.claimed}, done {s.done}, "
                          f"refused by the fence {s.lease_lost}, retried {s.retried}, dead {s.dead}")
        else:
            event.next = "the worker in its place was killed too"
    tally.exits += exits


def _final_pass(db: Path | str, now: int, lease_seconds: int, queue: str) -> int:
    """A fresh worker finishes the queue; the operator redrives what the kills pushed to dead, and again.

    ``db`` is the file or the PostgreSQL URL. Returns how many ``lease_expired`` dead letters were redriven.
    """
    now = finish_queue(db, now, lease_seconds=lease_seconds, queue=queue)
    with Store(db, clock=ModelClock(now), create=False, queue=queue) as store:
        expired = [
            m.event_id for m in store.dead_letters() if m.last_error == LEASE_EXPIRED
        ]
        if expired:
            store.redrive(expired)
    if expired:
        finish_queue(db, now, lease_seconds=lease_seconds, queue=queue)
    return len(expired)


def _judge(
    state: FileState,
    sent: Mapping[str, Payload],
    tally: _Tally,
    plan: _Plan,
    *,
    seed: int,
    redriven: int,
    seconds: float,
) -> ChaosResult:
    """Every invariant, with every event sent and the money; only toys may be dead, for their reason."""
    valid = {e for e, p in sent.items() if p["category"] != TOY}
    expected_total = sum(int(sent[e]["amount_cents"]) for e in valid)
    violations = tally.violations + check_invariants(
        state, events=sent, expected_total=expected_total
    )
    for m in state.messages:
        if m.state == "dead" and (
            m.event_id in valid or m.last_error != "invalid_payload"
        ):
            violations.append(
                f"{m.event_id} is dead ({m.last_error}) after the final pass"
            )
    lost, doubled = losses_and_doubles(state, sent, valid)
    # An effect INSERT refused by the unique key was an attempt to double: count it, wherever it shows.
    doubled += _unique_key_refusals(state)
    doubled += sum(
        "constraint_violation" in e.stderr
        or any(words in e.stderr for words in _UNIQUE_KEY_REFUSALS)
        for e in tally.exits
    )
    errors = [e for e in tally.exits if e.error]
    violations += [
        f"a worker exited with {e.status}: {e.stderr[-300:]}" for e in errors
    ]
    clean = [e.summary for e in tally.exits if e.summary]
    worker_kills = sum(e.killed for e in tally.exits)
    by_state = Counter(m.state for m in state.messages)
    return ChaosResult(
        seed=seed,
        engine=state.engine,
        rounds=plan.rounds,
        workers_at_once=plan.workers,
        lease_seconds=plan.lease_seconds,
        clock_stagger_seconds=plan.stagger_seconds,
        round_step_seconds=ROUND_STEP_SECONDS,
        events=len(sent),
        valid_events=len(valid),
        toys=len(sent) - len(valid),
        lines_sent=tally.lines_sent,
        producer_kills=tally.producer_kills,
        producer_resends=tally.producer_resends,
        producer_kills_after_its_commit=tally.producer_kills_after_its_commit,
        worker_processes=tally.worker_processes,
        worker_kills=worker_kills,
        worker_kills_with_the_file_open=sum(e.opened for e in tally.exits),
        kills=worker_kills + tally.producer_kills,
        clean_worker_exits=len(clean),
        worker_errors=len(errors),
        tracebacks=sum(e.traceback for e in tally.exits),
        lease_lost_reported=sum(s.lease_lost for s in clean),
        completed_by_a_later_generation=sum(
            m.state == "done" and m.generation > 1 for m in state.messages
        ),
        lease_expired_redriven=redriven,
        done=by_state["done"],
        dead=by_state["dead"],
        total_cents=state.total_cents,
        expected_cents=expected_total,
        losses=lost,
        doubles=doubled,
        violations=tuple(violations),
        seconds=round(seconds, 1),
        queue=plan.queue,
        kill_sample=plan.sample.events(),
        kill_sample_of=plan.sample.seen,
    )
