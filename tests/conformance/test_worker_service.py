"""The worker as a service: your handler from the CLI, ``--forever``, and how it stops.

Runs on both engines (tests/conformance/conftest.py). The workers are real
``queue-core work`` processes stopped with real signals (SIGTERM, SIGINT);
the handlers are real modules in the test's folder, imported by
``--handler module:function`` as the CLI does for a user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    MAX_ATTEMPTS,
    Handler,
    LeaseLost,
    ModelClock,
    Outcome,
    Store,
    WorkInterrupted,
    WorkSummary,
    ledger,
    work,
)

# A user's module: handlers that write through tx.execute (the same SQL on both
# engines), one that is slow, one that hangs, one that always raises. Each
# handler first leaves a file saying it started, so a test can signal a worker
# with a message in its hand.
HANDLERS = textwrap.dedent('''
    import json, pathlib, time

    def handle(tx, message):
        tx.execute("CREATE TABLE IF NOT EXISTS seen (event_id TEXT PRIMARY KEY, body TEXT NOT NULL)")
        tx.execute("INSERT INTO seen (event_id, body) VALUES (?, ?)",
                   (message.event_id, json.dumps(message.payload_object)))

    def started(message):
        pathlib.Path("started-" + message.event_id).touch()

    def slow(tx, message):
        started(message)
        time.sleep(0.5)
        handle(tx, message)

    def hang(tx, message):
        handle(tx, message)  # written, then rolled back with the interruption
        started(message)
        time.sleep(120)

    def broken(tx, message):
        raise RuntimeError("the handler broke on " + message.event_id)
''')


def line(event_id: str, **payload: Any) -> str:
    return json.dumps({"event_id": event_id, "payload": payload or {"n": int(event_id[1:])}}) + "\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "myapp.py").write_text(HANDLERS, encoding="utf-8")
    return tmp_path


def worker(folder: Path, target: Any, *args: str) -> subprocess.Popen[str]:
    """A real ``queue-core work`` process in ``folder`` (its working directory)."""
    return subprocess.Popen([sys.executable, "-m", "queue_core", "--db", str(target), "work", *args],
                            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run(folder: Path, target: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queue_core", "--db", str(target), *args],
                          cwd=folder, capture_output=True, text=True, timeout=60)


def wait_for(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds} s for {what}")
        time.sleep(0.02)


def seen(store: Store) -> list[str]:
    return [row[0] for row in store.read(
        lambda tx: tx.execute("SELECT event_id FROM seen ORDER BY event_id").fetchall())]


def states(store: Store) -> dict[str, str]:
    return {m.event_id: m.state for m in store.messages()}


# ------------------------------------------------------------ --handler

@pytest.mark.timeout(120)
def test_work_runs_your_handler_from_your_module(store: Store, folder: Path) -> None:
    store.enqueue(line("E0001") + line("E0002"))
    proc = run(folder, store.target, "work", "--handler", "myapp:handle")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"claimed": 2, "done": 2, "retried": 0, "dead": 0, "lease_lost": 0}
    assert seen(store) == ["E0001", "E0002"]
    assert ledger.totals(store).count == 0  # the ledger's handler did not run


@pytest.mark.one_engine
@pytest.mark.parametrize(("spec", "said"), [
    ("myapp:nope", "--handler myapp:nope: myapp has no 'nope'"),
    ("nomodule:handle", "--handler nomodule:handle: no module named 'nomodule' "
                        "(looked in the working directory and sys.path)"),
    ("myapp:json", "--handler myapp:json: json is not callable (module)"),
    ("myapp", "--handler must be package.module:function, got 'myapp'"),
    ("myapp:handle;rm", "--handler must be package.module:function, got 'myapp:handle;rm'"),
    ("failing:handle", "--handler failing:handle: importing failing failed: ZeroDivisionError: division by zero"),
])
def test_a_handler_that_cannot_be_imported_is_a_usage_error_naming_it(tmp_path: Path, folder: Path,
                                                                     spec: str, said: str) -> None:
    (folder / "failing.py").write_text("1 / 0\n", encoding="utf-8")
    db = tmp_path / "q.sqlite3"
    with Store(db) as store:
        store.enqueue(line("E0001"))
    proc = run(folder, db, "work", "--handler", spec)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1].startswith(f"queue-core: usage: {said}"), proc.stderr
    assert "Traceback" not in proc.stderr
    with Store(db) as store:
        assert states(store) == {"E0001": "ready"}  # refused before anything was claimed


@pytest.mark.one_engine
def test_category_and_poll_are_refused_where_they_mean_nothing(tmp_path: Path, folder: Path) -> None:
    db = tmp_path / "q.sqlite3"
    Store(db).close()
    both = run(folder, db, "work", "--handler", "myapp:handle", "--category", "toy")
    assert both.returncode == 2 and "--category adds categories to the ledger's handler" in both.stderr
    poll = run(folder, db, "work", "--poll", "2")
    assert poll.returncode == 2 and "--poll needs --forever" in poll.stderr
    zero = run(folder, db, "work", "--forever", "--poll", "0")
    assert zero.returncode == 2 and "expected more than 0 seconds" in zero.stderr


# ------------------------------------------------------------- --forever

@pytest.mark.timeout(120)
def test_a_forever_worker_waits_picks_up_new_work_and_stops_on_sigterm(store: Store, folder: Path) -> None:
    proc = worker(folder, store.target, "--handler", "myapp:handle", "--forever", "--poll", "0.2")
    try:
        time.sleep(0.5)  # started, found nothing, waits
        assert proc.poll() is None
        store.enqueue(line("E0001"))
        wait_for(lambda: states(store) == {"E0001": "done"}, "the idle worker to take a new message")
        store.enqueue(line("E0002"))
        wait_for(lambda: states(store)["E0002"] == "done", "the second message")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["done"] == 2
    assert seen(store) == ["E0001", "E0002"]


def stopped_in_hand(folder: Path, target: Any, handler: str, in_hand: str,
                    *signals: int) -> tuple[int, str, str]:
    """A ``--forever`` worker running ``handler``, sent ``signals`` once it works on ``in_hand``.

    Its exit status, stdout and stderr.
    """
    proc = worker(folder, target, "--handler", handler, "--forever")
    try:
        wait_for(lambda: (folder / f"started-{in_hand}").exists(), f"{in_hand} to be in hand")
        for number, sent in enumerate(signals):
            if number:
                time.sleep(0.2)  # the first one is taken before the second comes
            proc.send_signal(sent)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, out, err


@pytest.mark.timeout(120)
def test_sigterm_finishes_the_message_in_hand_and_takes_no_new_one(store: Store, folder: Path) -> None:
    store.enqueue("".join(line(f"E000{n}") for n in range(1, 6)))
    # SIGTERM while E0002's handler sleeps
    status, out, err = stopped_in_hand(folder, store.target, "myapp:slow", "E0002", signal.SIGTERM)
    assert status == 0, err
    assert json.loads(out) == {"claimed": 2, "done": 2, "retried": 0, "dead": 0, "lease_lost": 0}
    assert states(store) == {"E0001": "done", "E0002": "done", "E0003": "ready", "E0004": "ready",
                             "E0005": "ready"}  # nothing left leased


@pytest.mark.timeout(120)
def test_ctrl_c_stops_after_the_message_in_hand_with_status_130(store: Store, folder: Path) -> None:
    store.enqueue(line("E0001") + line("E0002"))
    status, out, err = stopped_in_hand(folder, store.target, "myapp:slow", "E0001", signal.SIGINT)
    assert status == 130
    assert "stopping after the message in hand (Ctrl-C again to stop now)" in err
    assert json.loads(out)["done"] == 1
    assert states(store) == {"E0001": "done", "E0002": "ready"}


@pytest.mark.timeout(120)
def test_a_second_ctrl_c_rolls_back_and_gives_the_lease_back(store: Store, folder: Path) -> None:
    store.enqueue(line("E0001") + line("E0002"))
    status, out, err = stopped_in_hand(folder, store.target, "myapp:hang", "E0001", signal.SIGINT, signal.SIGINT)
    assert status == 130
    assert "queue-core: interrupted; gave back E0001 (ready again)" in err
    # the interrupted message counts as claimed, and as given back
    assert json.loads(out) == {"claimed": 1, "done": 0, "retried": 0, "dead": 0, "lease_lost": 0,
                               "released": 1}
    stored = store.message("E0001")
    # ready at once, the claim not counted as an attempt; the handler's writes rolled back
    assert (stored.state, stored.attempts, stored.generation, stored.lease_until) == ("ready", 0, 1, None)
    assert store.read(lambda tx: tx.ops.table_exists(tx.conn, "seen")) is False


@pytest.mark.timeout(180)
def test_a_handler_that_raises_is_recorded_and_never_stops_a_forever_worker(store: Store, folder: Path) -> None:
    store.enqueue(line("E0001"))
    proc = worker(folder, store.target, "--handler", "myapp:broken", "--forever", "--poll", "0.1")
    try:
        # three claims, with the backoffs of 1 s and 2 s between them, then dead
        wait_for(lambda: states(store) == {"E0001": "dead"}, "E0001 to go dead", seconds=60)
        assert proc.poll() is None  # still running
        store.enqueue(line("E0002"))
        wait_for(lambda: store.message("E0002").attempts >= 1, "the next message to be tried")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    dead = store.message("E0001")
    assert (dead.attempts, dead.last_error) == (3, "handler_error")
    assert dead.last_detail == "RuntimeError: the handler broke on E0001"
    assert json.loads(out)["dead"] >= 1


@pytest.mark.one_engine
@pytest.mark.timeout(120)
def test_an_idle_forever_worker_uses_almost_no_cpu(tmp_path: Path, folder: Path) -> None:
    db = tmp_path / "q.sqlite3"
    Store(db).close()
    proc = worker(folder, db, "--handler", "myapp:handle", "--forever", "--poll", "0.2")
    try:
        time.sleep(1.0)  # past Python's start and the first empty claim

        def cpu_seconds() -> float:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

        before, started = cpu_seconds(), time.monotonic()
        time.sleep(3.0)
        used, wall = cpu_seconds() - before, time.monotonic() - started
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    # about 15 empty claims in 3 s: a few milliseconds of CPU; a busy loop would use ~3 s
    assert used / wall < 0.05, f"{used:.3f} s of CPU in {wall:.1f} s idle"
    assert proc.returncode == 0


# ------------------------------------------------------ the library's side

def test_work_forever_stops_when_told_and_finishes_the_message_in_hand(store: Store) -> None:
    store.enqueue(line("E0001", category="book", amount_cents=1) + line("E0002", category="book", amount_cents=2))
    stop = threading.Event()
    handled: list[str] = []

    def handler(tx: Any, message: Any) -> None:
        handled.append(message.event_id)
        stop.set()  # asked to stop while this message is in hand
        Handler()(tx, message)

    summary = work(store, handler, forever=True, poll_seconds=0.05, stop=stop)
    assert summary == WorkSummary(claimed=1, done=1)
    assert handled == ["E0001"] and states(store) == {"E0001": "done", "E0002": "ready"}


def test_work_forever_polls_until_stopped(store: Store) -> None:
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    try:
        assert work(store, Handler(), forever=True, poll_seconds=0.05, stop=stop) == WorkSummary()
    finally:
        timer.cancel()
    with pytest.raises(ValueError, match="poll_seconds must be a number of seconds above 0"):
        work(store, Handler(), forever=True, poll_seconds=0)


@pytest.mark.parametrize("batch", [1, 3])
def test_an_interruption_mid_message_gives_the_leases_back(store: Store, batch: int) -> None:
    store.enqueue("".join(line(f"E000{n}", category="book", amount_cents=n) for n in (1, 2, 3)))

    def interrupted(tx: Any, message: Any) -> None:
        Handler()(tx, message)
        raise KeyboardInterrupt  # Ctrl-C inside the handler

    with pytest.raises(WorkInterrupted) as caught:
        work(store, interrupted, batch=batch)
    given_back = ["E0001", "E0002", "E0003"][:batch]
    assert caught.value.released == tuple(given_back)
    assert caught.value.summary == WorkSummary(claimed=batch, released=batch)
    assert isinstance(caught.value, KeyboardInterrupt)
    for message in store.messages():
        assert (message.state, message.attempts) == ("ready", 0)
    assert ledger.totals(store).count == 0  # the effects went back with the transaction
    assert work(store, Handler()).done == 3  # and the messages are there for the next worker


@pytest.mark.parametrize("ending", ["interrupted", "lease ran out"])
def test_interruptions_repeat_a_handler_without_reaching_the_budget(
    store: Store, clock: ModelClock, ending: str
) -> None:
    # An interruption releases: the claim it gives back is no attempt, so the
    # handler's outside calls repeat past the budget. The negative control is a
    # worker whose lease runs out (killed): its claims spend the budget.
    store.enqueue(line("E0001"))
    calls: list[int] = []
    rounds = 3 * MAX_ATTEMPTS
    for _ in range(rounds):
        if ending == "interrupted":

            def outside_call_then_interrupted(tx: Any, message: Any) -> None:
                calls.append(message.attempts)  # the attempt this claim counts
                raise KeyboardInterrupt

            with pytest.raises(WorkInterrupted) as stopped:
                work(store, outside_call_then_interrupted)
            assert stopped.value.released == ("E0001",)
        else:
            claimed = store.claim_message(lease_seconds=5)
            if claimed is None:
                break
            calls.append(claimed.message.attempts)
            clock.advance(5)  # the worker died: its lease runs out
    message = store.message("E0001")
    if ending == "interrupted":
        assert calls == [1] * rounds  # every run was attempt 1: none was spent
        assert (message.state, message.attempts) == ("ready", 0)
    else:
        assert calls == list(range(1, MAX_ATTEMPTS + 1))
        assert (message.state, message.last_error) == ("dead", "lease_expired")


# ------------------------------------------------------- the service unit

UNIT = Path(__file__).resolve().parents[2] / "snippets" / "queue-core-worker.service"


@pytest.mark.one_engine
@pytest.mark.timeout(120)
def test_the_service_unit_runs_a_worker_that_stops_cleanly_on_its_kill_signal(tmp_path: Path, folder: Path) -> None:
    # The page's unit file, with its folder moved here: its ExecStart runs for real,
    # and systemd's KillSignal stops it within TimeoutStopSec with the status that
    # Restart=on-failure reads as a clean stop.
    import configparser
    import shlex
    import shutil

    text = UNIT.read_text(encoding="utf-8").replace("/srv/myapp", str(folder))
    unit = configparser.ConfigParser(interpolation=None, comment_prefixes=("#",))
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    unit.read_string(text)
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"].replace("\\\n", " "))  # a continued line
    assert argv[0] == f"{folder}/.venv/bin/queue-core" and Path(service["WorkingDirectory"]) == folder
    assert service["Restart"] == "on-failure" and unit["Install"]["WantedBy"] == "multi-user.target"
    with Store(folder / "queue.sqlite3") as store:
        store.enqueue(line("E0001"))
    proc = subprocess.Popen([sys.executable, "-m", "queue_core", *argv[1:]], cwd=service["WorkingDirectory"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with Store(folder / "queue.sqlite3") as store:
            wait_for(lambda: states(store) == {"E0001": "done"}, "the service's worker to do E0001")
        proc.send_signal(getattr(signal, service["KillSignal"]))
        out, err = proc.communicate(timeout=int(service["TimeoutStopSec"]))
    finally:
        proc.kill()
    assert proc.returncode == 0, err  # a clean stop: not restarted
    assert json.loads(out)["done"] == 1
    if shutil.which("systemd-analyze"):  # systemd's own reading of the file, where it is installed
        bin_dir = folder / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "queue-core").symlink_to(Path(sys.executable).parent / "queue-core")
        (folder / "queue-core-worker.service").write_text(text, encoding="utf-8")
        verified = subprocess.run(["systemd-analyze", "verify", str(folder / "queue-core-worker.service")],
                                  capture_output=True, text=True, timeout=60)
        assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified.stderr


@pytest.mark.one_engine
@pytest.mark.timeout(120)
def test_a_forever_worker_waits_out_a_busy_database(tmp_path: Path, folder: Path) -> None:
    # Another process's writer holds SQLite's write lock past the worker's busy
    # timeout: the worker says so and tries again, instead of exiting.
    import sqlite3

    db = tmp_path / "q.sqlite3"
    with Store(db) as store:
        store.enqueue(line("E0001"))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, until ROLLBACK
    errors = tmp_path / "stderr.txt"
    with open(errors, "w", encoding="utf-8") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "queue_core", "--db", str(db), "--busy-timeout", "0.2",
                                 "work", "--handler", "myapp:handle", "--forever", "--poll", "0.1"],
                                cwd=folder, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        # Not a fixed sleep: a loaded machine may take longer than any guess to
        # start the worker. Two busy waits reported, and it is still running.
        wait_for(lambda: errors.read_text(encoding="utf-8").count("database_busy") >= 2,
                 "two busy waits reported")
        assert proc.poll() is None
        holder.execute("ROLLBACK")
        with Store(db) as store:
            wait_for(lambda: states(store) == {"E0001": "done"}, "E0001 once the lock is free")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        holder.close()
    err = errors.read_text(encoding="utf-8")
    assert proc.returncode == 0, err
    assert json.loads(out)["done"] == 1
    assert "queue-core: database_busy: " in err and "; trying again in 0.1 s" in err, err
