"""A PostgreSQL failover, measured: a primary and its streaming standby, a SIGKILL, a promotion.

``failovers(synchronous, count)`` makes ``count`` failovers, each on a fresh
pair of throwaway servers (``initdb``, ``pg_basebackup -R`` with a physical
replication slot, each on a Unix socket in its own temporary directory, run
as the ``postgres`` user when root, as ``proof/postgres_cluster.py`` does).
In each one, real processes work on the queue through one multi-host URL
(``host=<primary>,<standby>`` with ``target_session_attrs=read-write``):

* ``queue-core work --forever`` workers, whose handler (``effect``) writes one
  row per completion, with a random nonce, into ``failover_effects``;
* observed workers (``python -m proof.failover observe``), the same claim and
  completion through the library, which append ``acked <event> <nonce>`` to
  their log only after ``complete_message`` returned: the honest witness of
  a completion that a worker saw committed;
* a producer (real ``queue-core enqueue`` processes, one batch each), whose
  answer on stdout comes after its COMMIT: an acknowledged enqueue.

Then the primary's postmaster and all its processes are SIGKILLed, the
standby is promoted (``pg_ctl promote``), its inherited
``synchronous_standby_names`` is cleared (``ALTER SYSTEM RESET`` and a reload:
otherwise every commit waits for a standby that no longer exists), and the
processes find the new primary by themselves. The new primary is then read:
acknowledged enqueues it lacks, acknowledged completions whose effect it
lacks (``lost``), and of those, how many were done a second time
(``re_processed``), and events with more than one effect row (``doubled``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from queue_core import LeaseLost, Store, StorageError
from queue_core.transactions import Tx
from queue_core.values import Message, Outcome
from queue_core.worker import PASSING_ERRORS
from proof.postgres_cluster import PORT, SERVER_USER, Cluster, ServerError, find_bindir
from proof.postgres_cluster import unavailable as server_unavailable

__all__ = [
    "QUICK",
    "FailoverResult",
    "Pair",
    "Trial",
    "effect",
    "failover_once",
    "failovers",
    "judge",
    "pair",
    "unavailable",
]

REPO: Final = Path(__file__).resolve().parent.parent
QUEUE_CORE: Final = (sys.executable, "-m", "queue_core")
DATABASE: Final = "queue"
SLOT: Final = "failover"
# the test suite's failovers per mode (scripts/failover.py makes more)
QUICK: Final[Mapping[str, int]] = {"sync": 2, "async": 3}
EFFECTS_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS failover_effects"
    " (event_id TEXT NOT NULL, nonce TEXT NOT NULL, worker TEXT NOT NULL)"
)  # no unique key on purpose: a doubled effect must be visible, not refused
WAIT_SECONDS: Final = 60.0  # for a server, a drain or a process: far above what each takes
# observed completions before the kill and after it, at least: a failover of an idle queue tests nothing
ACKS_AROUND_THE_KILL: Final = 20


# ============================================================== the pair of servers


@dataclass
class Node(Cluster):
    """One server of the pair: a primary (``initialize``) or a standby (``clone``)."""

    crashed: bool = field(default=False, init=False)
    # the SysV segment a crashed postmaster leaves behind
    _shared_memory: str = field(default="", init=False)

    def initialize(self, synchronous: bool) -> None:
        """initdb, start, create the queue's database and schema; then ask for a synchronous standby."""
        self.settings = ("max_wal_senders = 4", "wal_level = replica")
        self.start()
        self.query(f"CREATE DATABASE {DATABASE}")
        with Store(self.url()) as store:
            store.write(lambda tx: tx.execute(EFFECTS_TABLE))
        if synchronous:
            # ALTER SYSTEM writes postgresql.auto.conf, which pg_basebackup copies: the standby
            # inherits the setting, as it would from any primary configured like this.
            self.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
            self.query("SELECT pg_reload_conf()")

    def clone(self, primary: Node) -> None:
        """pg_basebackup -R from ``primary`` over a new physical slot; start streaming."""
        self._check("pg_basebackup", self._run(
            "pg_basebackup", "--pgdata", str(self.data), "--write-recovery-conf",
            "--wal-method=stream", "--create-slot", f"--slot={SLOT}", "--checkpoint=fast",
            "--dbname", f"host={primary.root} port={PORT} user={SERVER_USER}"))
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(f"\n# the standby's own socket\nunix_socket_directories = '{self.root}'\n")
        self._running = True
        self._check("pg_ctl start", self._run(
            "pg_ctl", "--pgdata", str(self.data), "--log", str(self.log), "--wait",
            "--timeout", str(int(WAIT_SECONDS)), "--silent", "start"))
        self._wait_for_connections()

    def url(self) -> str:
        return f"postgresql://{SERVER_USER}@/{DATABASE}?host={self.root}&port={PORT}"

    def query(self, sql: str, parameters: Sequence[Any] = (), *,
              dbname: str = "postgres") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.conninfo(dbname), autocommit=True) as conn:
            cursor = conn.execute(sql, parameters or None)
            return list(cursor.fetchall()) if cursor.description else []

    def crash(self) -> None:
        """SIGKILL the postmaster and every process it started, at once: a lost machine.

        A postmaster killed alone leaves its walsender to send what it still
        can; a machine that dies sends nothing more.
        """
        lines = (self.data / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        self._shared_memory = lines[6].split()[-1] if len(lines) > 6 else ""
        for victim in [pid, *_children(pid)]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + WAIT_SECONDS
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.crashed, self._running = True, False

    def promote(self, *, forget_standbys: bool = True) -> None:
        """pg_ctl promote; then clear the synchronous_standby_names it inherited, and reload.

        ``forget_standbys=False`` leaves the setting as inherited: every
        commit then waits for a synchronous standby that does not exist.
        """
        self._check("pg_ctl promote", self._run(
            "pg_ctl", "--pgdata", str(self.data), "--wait", "--timeout",
            str(int(WAIT_SECONDS)), "--silent", "promote"))
        if forget_standbys:
            self.forget_standbys()

    def forget_standbys(self) -> None:
        """ALTER SYSTEM RESET synchronous_standby_names, reload, and wait until it is in force."""
        self.query("ALTER SYSTEM RESET synchronous_standby_names")
        self.query("SELECT pg_reload_conf()")
        deadline = time.monotonic() + WAIT_SECONDS
        while self.query("SHOW synchronous_standby_names") != [("",)]:
            if time.monotonic() > deadline:
                raise ServerError("synchronous_standby_names is still set after the reload")
            time.sleep(0.02)

    def shut_down(self) -> None:
        """pg_ctl stop (fast), keeping its files: a standby that is down. ``start_again()`` ends it."""
        self._check("pg_ctl stop", self._run(
            "pg_ctl", "--pgdata", str(self.data), "--mode", "fast", "--wait", "--timeout",
            str(int(WAIT_SECONDS)), "--silent", "stop"))
        self._running = False

    def start_again(self) -> None:
        """pg_ctl start after ``shut_down()``; a standby then streams from its primary again."""
        self._running = True
        self._check("pg_ctl start", self._run(
            "pg_ctl", "--pgdata", str(self.data), "--log", str(self.log), "--wait",
            "--timeout", str(int(WAIT_SECONDS)), "--silent", "start"))
        self._wait_for_connections()

    def stop_streaming(self) -> None:
        """Cut the standby off its primary: an empty primary_conninfo ends the walreceiver."""
        self.query("ALTER SYSTEM SET primary_conninfo = ''")
        self.query("SELECT pg_reload_conf()")
        deadline = time.monotonic() + WAIT_SECONDS
        while self.query("SELECT pid FROM pg_stat_wal_receiver WHERE pid IS NOT NULL"):
            if time.monotonic() > deadline:
                raise ServerError("the walreceiver did not stop")
            time.sleep(0.02)

    def stop(self) -> None:
        super().stop()
        # nobody attaches to it any more; the data directory is gone
        if self._shared_memory and shutil.which("ipcrm"):
            subprocess.run(["ipcrm", "-m", self._shared_memory], capture_output=True, timeout=30)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Pair:
    """A primary, its standby, and the multi-host URL every client is given."""

    primary: Node
    standby: Node
    synchronous: bool

    @property
    def url(self) -> str:
        hosts = f"{self.primary.root},{self.standby.root}"
        return (f"postgresql://{SERVER_USER}@/{DATABASE}?host={hosts}&port={PORT},{PORT}"
                "&target_session_attrs=read-write&connect_timeout=5")

    def wait_streaming(self) -> None:
        """Until the primary lists its standby as streaming (and synchronous, if asked)."""
        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + WAIT_SECONDS
        while self.primary.query("SELECT state, sync_state FROM pg_stat_replication") != [
                ("streaming", wanted)]:
            if time.monotonic() > deadline:
                raise ServerError(f"the standby is not streaming ({wanted}){self.standby.log_tail()}")
            time.sleep(0.05)

    def wait_replayed(self) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        target = self.primary.query("SELECT pg_current_wal_lsn()::text")[0][0]
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.standby.query(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))[0][0]:
            if time.monotonic() > deadline:
                raise ServerError("the standby did not replay the primary's WAL")
            time.sleep(0.02)


def unavailable() -> str | None:
    """Why no pair can be made here (postgres_cluster's reasons, or no pg_basebackup), or None."""
    reason = server_unavailable()
    bindir = find_bindir()
    if reason is None and bindir is not None and not (bindir / "pg_basebackup").is_file():
        reason = f"no pg_basebackup beside initdb in {bindir} (Debian's postgresql-client package)"
    return reason


@contextmanager
def pair(synchronous: bool) -> Iterator[Pair]:
    """A fresh primary and standby, streaming; both stopped and removed afterwards."""
    bindir = find_bindir()
    if bindir is None:
        raise ServerError("PostgreSQL server binaries not found")
    with ExitStack() as stack:
        primary = Node(bindir)
        stack.callback(primary.stop)
        primary.initialize(synchronous)
        standby = Node(bindir)
        stack.callback(standby.stop)
        standby.clone(primary)
        both = Pair(primary, standby, synchronous)
        both.wait_streaming()
        yield both


# ================================================================ the processes


def effect(tx: Tx, message: Message) -> None:
    """The CLI workers' handler: one effect row per completion, inside its transaction."""
    record(tx, message, uuid.uuid4().hex)


def record(tx: Tx, message: Message, nonce: str) -> None:
    tx.execute("INSERT INTO failover_effects (event_id, nonce, worker) VALUES (?, ?, ?)",
               (message.event_id, nonce, os.environ.get("PGAPPNAME", "")))


def observe(url: str, log: Path, lease_seconds: int) -> None:
    """An observed worker: claim, complete, and only then write ``acked <event> <nonce>``.

    Like ``queue-core work --forever`` it waits out a lost or refused
    connection (doubling its pause up to 1 s) and goes on. SIGTERM stops it
    between two messages.
    """
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    pause = 0.05
    with open(log, "a", encoding="utf-8") as out:
        store: Store | None = None
        while not stop.is_set():
            try:
                store = store or Store(url, create=False)
                claimed = store.claim_message(lease_seconds)
                if claimed is None:
                    stop.wait(0.1)
                    continue
                nonce = uuid.uuid4().hex
                done = store.complete_message(
                    claimed, lambda tx, message: record(tx, message, nonce))
                if done.outcome is Outcome.DONE:
                    out.write(f"acked {claimed.lease.event_id} {nonce} {time.time():.3f}\n")
                    out.flush()
                pause = 0.05
            except LeaseLost:
                continue
            except StorageError as error:
                if error.code not in PASSING_ERRORS:
                    raise
                out.write(f"error {error.code} {time.time():.3f}\n")
                out.flush()
                stop.wait(pause)
                pause = min(pause * 2, 1.0)
        if store is not None:
            store.close()


class _Producer(threading.Thread):
    """Real ``queue-core enqueue`` processes, a batch each; a batch is acknowledged by its answer."""

    def __init__(self, url: str, folder: Path, batch: int) -> None:
        super().__init__(daemon=True)
        self.url, self.folder, self.batch = url, folder, batch
        self.stop = threading.Event()
        self.acked: dict[str, float] = {}  # event id -> when its batch's answer came
        self.failures: list[str] = []
        self.errors: list[str] = []

    def run(self) -> None:
        number = 1
        while not self.stop.is_set() and number + self.batch <= 10_000:
            ids = [f"E{n:04d}" for n in range(number, number + self.batch)]
            path = self.folder / f"batch-{number:04d}.jsonl"
            path.write_text("".join(json.dumps({"event_id": e, "payload": {"n": i}}) + "\n"
                                    for i, e in enumerate(ids)), encoding="utf-8")
            while True:  # until this batch is acknowledged: a resend is answered as duplicates
                done = subprocess.run([*QUEUE_CORE, "--db", self.url, "enqueue", str(path)],
                                      cwd=REPO, capture_output=True, text=True, timeout=WAIT_SECONDS)
                if done.returncode == 0:
                    when = time.time()
                    self.acked.update((e, when) for e in ids)
                    break
                last = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
                self.failures.append(last[0])
                if "connection_lost" not in last[0] and "cannot_connect" not in last[0]:
                    self.errors.append(f"the producer failed: {last[0]}")
                    return
                if self.stop.is_set():
                    return  # this batch is not acknowledged, so not counted
                time.sleep(0.1)
            number += self.batch


# =================================================================== judging


@dataclass(frozen=True)
class Trial:
    """One failover: what was acknowledged, and what the new primary lacks or has twice."""

    synchronous: bool
    acknowledged_enqueues: int
    acknowledged_completions: int
    completions_acked_before_the_kill: int
    completions_acked_after_the_kill: int
    lost_enqueues: int
    lost_completions: int
    re_processed: int
    doubled: int
    seconds_to_promote: float
    seconds_to_reconnect: float  # from the kill until every worker had a session on the new primary
    seconds_to_first_completion: float  # from the kill until an observed completion on it
    worker_errors: int
    violations: tuple[str, ...]


def judge(acked_enqueues: set[str], acked: Sequence[tuple[str, str]],
          messages: Mapping[str, str], effects: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Counts from what was acknowledged and what the new primary holds.

    ``acked``: (event id, nonce) of each acknowledged completion; ``messages``:
    event id -> state; ``effects``: (event id, nonce) rows.
    """
    nonces = {nonce for _event, nonce in effects}
    per_event = Counter(event for event, _nonce in effects)
    lost = [(event, nonce) for event, nonce in acked if nonce not in nonces]
    violations = [f"{e} is {s}, not done" for e, s in sorted(messages.items()) if s != "done"]
    violations += [f"{e} is done without an effect" for e in sorted(messages)
                   if messages[e] == "done" and not per_event[e]]
    violations += [f"an effect of {e}, which is not stored" for e in sorted(per_event)
                   if e not in messages]
    return {
        "lost_enqueues": len(acked_enqueues - set(messages)),
        "lost_completions": len(lost),
        "re_processed": sum(per_event[event] > 0 for event, _nonce in lost),
        "doubled": sum(count > 1 for count in per_event.values()),
        "violations": violations,
    }


def failover_once(synchronous: bool, *, workers: int = 2, observers: int = 2,
                  load_seconds: float = 3.0, after_seconds: float = 2.0,
                  lease_seconds: int = 2, batch: int = 50) -> Trial:
    """One failover on a fresh pair under load; see the module's docstring."""
    names = [f"cli-{i}" for i in range(workers)] + [f"observer-{i}" for i in range(observers)]
    with pair(synchronous) as servers, tempfile.TemporaryDirectory(prefix="failover-") as tmp, \
            ExitStack() as files:
        folder = Path(tmp)
        processes: list[subprocess.Popen[str]] = []
        producer = _Producer(servers.url, folder, batch)
        try:
            for name in names:
                command = ([*QUEUE_CORE, "--db", servers.url, "work", "--forever", "--poll", "0.1",
                            "--lease-seconds", str(lease_seconds), "--handler", "proof.failover:effect"]
                           if name.startswith("cli") else
                           [sys.executable, "-m", "proof.failover", "observe", servers.url,
                            str(folder / f"{name}.log"), str(lease_seconds)])
                processes.append(subprocess.Popen(
                    command, cwd=REPO, env={**os.environ, "PGAPPNAME": name}, text=True,
                    stdout=files.enter_context(open(folder / f"{name}.out", "w")),
                    stderr=files.enter_context(open(folder / f"{name}.err", "w"))))
            _wait_for_sessions(servers.primary, set(names))  # all started: the load begins
            producer.start()
            time.sleep(load_seconds)
            _wait_for_acks(folder, observers, ACKS_AROUND_THE_KILL)  # the kill hits a working queue
            killed = time.time()
            servers.primary.crash()
            servers.standby.promote()
            promoted = time.time()
            reconnected = _wait_for_sessions(servers.standby, set(names)) - killed
            time.sleep(after_seconds)
            _wait_for_acks(folder, observers, ACKS_AROUND_THE_KILL, after=killed)
            producer.stop.set()
            producer.join(WAIT_SECONDS)
            _wait_drained(servers.standby)
        finally:
            producer.stop.set()  # also when the run failed: no enqueue outlives it
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(WAIT_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        messages = dict(servers.standby.query("SELECT event_id, state FROM messages", dbname=DATABASE))
        effects = servers.standby.query("SELECT event_id, nonce FROM failover_effects", dbname=DATABASE)
        acked, times = _acks(folder, observers)
        found = judge(set(producer.acked), acked, messages, [(str(e), str(n)) for e, n in effects])
        errors = [f"{name} exited with {p.returncode}: "
                  f"{(folder / f'{name}.err').read_text()[-300:]}"
                  for name, p in zip(names, processes) if p.returncode != 0]
        after = [t for t in times if t > killed]
        return Trial(
            synchronous=synchronous,
            acknowledged_enqueues=len(producer.acked),
            acknowledged_completions=len(acked),
            completions_acked_before_the_kill=len(times) - len(after),
            completions_acked_after_the_kill=len(after),
            lost_enqueues=found["lost_enqueues"],
            lost_completions=found["lost_completions"],
            re_processed=found["re_processed"],
            doubled=found["doubled"],
            seconds_to_promote=round(promoted - killed, 2),
            seconds_to_reconnect=round(reconnected, 2),
            seconds_to_first_completion=round(min(after, default=float("nan")) - killed, 2),
            worker_errors=len(errors),
            violations=tuple(found["violations"] + errors + producer.errors),
        )


def _wait_for_sessions(node: Node, names: set[str]) -> float:
    """When every named process has a session on ``node`` (it found the new primary)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        rows = node.query("SELECT DISTINCT application_name FROM pg_stat_activity"
                          " WHERE datname = %s", (DATABASE,))
        if names <= {str(name) for (name,) in rows}:
            return time.time()
        time.sleep(0.02)
    raise ServerError(f"not every process reconnected: {sorted(names)}")


def _wait_drained(node: Node) -> None:
    """Until every stored message is done (the producer has stopped); the judge says if not."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if not node.query("SELECT 1 FROM messages WHERE state <> 'done' LIMIT 1", dbname=DATABASE):
            return
        time.sleep(0.1)


def _wait_for_acks(folder: Path, observers: int, count: int, after: float = 0.0) -> None:
    """Until the observed workers acknowledged ``count`` completions (after ``after``)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while sum(t > after for t in _acks(folder, observers)[1]) < count:
        if time.monotonic() > deadline:
            raise ServerError(f"fewer than {count} observed completions in {WAIT_SECONDS:g} s")
        time.sleep(0.05)


def _acks(folder: Path, observers: int) -> tuple[list[tuple[str, str]], list[float]]:
    acked, times = [], []
    for i in range(observers):
        log = folder / f"observer-{i}.log"
        for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else ():
            words = line.split()
            if len(words) == 4 and words[0] == "acked":  # a line being written is not yet one
                acked.append((words[1], words[2]))
                times.append(float(words[3]))
    return acked, times


# ================================================================ many failovers


@dataclass(frozen=True)
class FailoverResult:
    """Several failovers of one mode, summed; each one's trial kept."""

    mode: str  # "sync" or "async"
    failovers: int
    acknowledged_enqueues: int
    acknowledged_completions: int
    lost_enqueues: int
    lost_completions: int
    re_processed: int
    doubled: int
    max_seconds_to_reconnect: float
    max_seconds_to_first_completion: float
    violations: tuple[str, ...]
    trials: tuple[Trial, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """No invariant broken; with synchronous replication, nothing lost either."""
        lossless = not (self.lost_enqueues or self.lost_completions or self.re_processed)
        return not (self.violations or self.doubled) and (self.mode == "async" or lossless)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def failovers(mode: str, count: int, *, progress: Callable[[str], None] | None = None,
              **options: Any) -> FailoverResult:
    """``count`` failovers with ``mode`` "sync" or "async" replication, each on a fresh pair."""
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    trials = []
    for number in range(1, count + 1):
        trials.append(failover_once(mode == "sync", **options))
        if progress is not None:
            progress(f"{mode} failover {number}/{count}: {trials[-1]}")
    return FailoverResult(
        mode=mode,
        failovers=count,
        acknowledged_enqueues=sum(t.acknowledged_enqueues for t in trials),
        acknowledged_completions=sum(t.acknowledged_completions for t in trials),
        lost_enqueues=sum(t.lost_enqueues for t in trials),
        lost_completions=sum(t.lost_completions for t in trials),
        re_processed=sum(t.re_processed for t in trials),
        doubled=sum(t.doubled for t in trials),
        max_seconds_to_reconnect=max(t.seconds_to_reconnect for t in trials),
        max_seconds_to_first_completion=max(t.seconds_to_first_completion for t in trials),
        violations=tuple(v for t in trials for v in t.violations),
        trials=tuple(trials),
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["observe"] and len(sys.argv) == 5:
        observe(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit("usage: python -m proof.failover observe URL LOG LEASE_SECONDS")
