"""A worker with N threads (``concurrency``), and a two-step handler from the command line.

Runs on both engines (tests/conformance/conftest.py). Effects are rows of a
table without a key, so a doubled effect would be counted, not refused. The
signal tests run real ``queue-core work`` processes stopped with real
signals; the in-process ones interrupt the calling thread as Ctrl-C does
(``_thread.interrupt_main``). No assertion depends on how long anything takes:
a test waits for the files a step leaves when it starts.
"""

from __future__ import annotations

import _thread
import json
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_core import LongHandler, Store, WorkerConfig, WorkInterrupted, WorkSummary, work
from tests.support import until

# A user's module: two-step handlers whose slow step stands for a network
# call. Each slow step first leaves a file saying it started; `held` then
# waits until the test leaves a file `go` (in steps, so that an interruption
# is taken between two of them).
HANDLERS = textwrap.dedent('''
    import json, pathlib, time
    from queue_core import LongHandler

    def started(message):
        pathlib.Path("started-" + message.event_id).touch()

    def record(tx, message, result):
        tx.execute("INSERT INTO effects_seen (event_id, body) VALUES (?, ?)",
                   (message.event_id, result))

    def call(message):
        started(message)
        time.sleep(0.05)
        return json.dumps(message.payload_object)

    def call_past_the_lease(message):
        started(message)
        time.sleep(2.5)  # longer than --lease-seconds 1: the heartbeat keeps it
        return "sent"

    def held(message):
        started(message)
        for _ in range(1200):
            if pathlib.Path("go").exists():
                return "sent"
            time.sleep(0.05)
        raise TimeoutError("nobody said go")

    def plain(tx, message):
        record(tx, message, "plain")

    send = LongHandler(call, record)
    send_slowly = LongHandler(call_past_the_lease, record)
    send_when_told = LongHandler(held, record)
''')
CREATE = "CREATE TABLE effects_seen (event_id TEXT NOT NULL, body TEXT NOT NULL)"


def line(n: int) -> str:
    return json.dumps({"event_id": f"E{n:04d}", "payload": {"n": n}}) + "\n"


@pytest.fixture
def folder(tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's folder, also this process's working directory (the steps' files land there)."""
    (tmp_path / "myapp.py").write_text(HANDLERS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    store.write(lambda tx: tx.execute(CREATE))
    return tmp_path


def effects(store: Store) -> Counter[str]:
    rows = store.read(lambda tx: tx.execute("SELECT event_id FROM effects_seen").fetchall())
    return Counter(row[0] for row in rows)


def states(store: Store) -> Counter[str]:
    return Counter(m.state for m in store.messages())


def module(folder: Path) -> Any:
    """The handlers' module, imported in this process (the tests' own threads run it)."""
    sys.path.insert(0, str(folder))
    try:
        import importlib

        sys.modules.pop("myapp", None)
        return importlib.import_module("myapp")
    finally:
        sys.path.remove(str(folder))


def worker(folder: Path, target: Any, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "queue_core", "--db", str(target), "work", *args],
                            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def started(folder: Path) -> set[str]:
    return {p.name.removeprefix("started-") for p in folder.glob("started-*")}


# ------------------------------------------------------------ the library

@pytest.mark.timeout(120)
def test_n_threads_complete_every_message_exactly_once(store: Store, folder: Path) -> None:
    store.enqueue("".join(line(n) for n in range(1, 41)))
    summary = work(store, module(folder).send, concurrency=8)
    assert summary == WorkSummary(claimed=40, done=40)
    assert effects(store) == Counter({f"E{n:04d}": 1 for n in range(1, 41)})  # none doubled
    assert states(store) == Counter(done=40)  # nothing left leased


@pytest.mark.timeout(120)
@pytest.mark.parametrize("batch", [1, 3])
def test_n_threads_with_a_plain_handler_take_turns_and_count_once(store: Store, folder: Path,
                                                                 batch: int) -> None:
    store.enqueue("".join(line(n) for n in range(1, 31)))
    summary = work(store, module(folder).plain, concurrency=4, batch=batch)
    assert summary == WorkSummary(claimed=30, done=30)
    assert effects(store) == Counter({f"E{n:04d}": 1 for n in range(1, 31)})


@pytest.mark.timeout(120)
def test_the_slow_steps_of_n_threads_run_side_by_side(store: Store, folder: Path) -> None:
    # Each of the first four prepare steps waits at a barrier for the other
    # three: one thread at a time would break it (a BrokenBarrierError, recorded
    # as handler_error), so four done means four ran at once.
    barrier = threading.Barrier(4, timeout=60)
    mine = module(folder)

    def together(message: Any) -> str:
        barrier.wait()
        return "together"

    store.enqueue("".join(line(n) for n in range(1, 5)))
    assert work(store, LongHandler(together, mine.record), concurrency=4) == WorkSummary(claimed=4, done=4)
    # the negative control: one thread cannot pass a barrier of two
    alone = threading.Barrier(2, timeout=0.5)
    store.enqueue(line(5))
    summary = work(store, LongHandler(lambda m: alone.wait(), mine.record), concurrency=1)
    assert summary == WorkSummary(claimed=1, retried=1)
    assert store.message("E0005").last_error == "handler_error"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("limit", [1, 5, 7])
def test_max_messages_holds_exactly_across_threads(store: Store, folder: Path, limit: int) -> None:
    store.enqueue("".join(line(n) for n in range(1, 21)))
    summary = work(store, module(folder).send, concurrency=8, max_messages=limit)
    assert summary == WorkSummary(claimed=limit, done=limit)
    assert states(store) == Counter(done=limit, ready=20 - limit)
    assert sum(effects(store).values()) == limit


@pytest.mark.timeout(120)
def test_a_stop_with_n_threads_finishes_every_message_in_hand(store: Store, folder: Path) -> None:
    store.enqueue("".join(line(n) for n in range(1, 11)))
    stop = threading.Event()

    def stop_with_four_in_hand() -> None:
        until(lambda: len(started(folder)) == 4, timeout=60, what="four messages in hand")
        stop.set()
        (folder / "go").touch()

    helper = threading.Thread(target=stop_with_four_in_hand)
    helper.start()
    try:
        summary = work(store, module(folder).send_when_told, concurrency=4, stop=stop,
                       forever=True, poll_seconds=0.05)
    finally:
        helper.join()
    assert summary == WorkSummary(claimed=4, done=4)
    assert states(store) == Counter(done=4, ready=6)
    assert set(effects(store)) == started(folder)


@pytest.fixture
def ctrl_c_delivered() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process while the test runs, as in a terminal.

    A program started in the background by a shell without job control (``make test &``
    in a script, some CI runners) inherits SIGINT ignored, and ``_thread.interrupt_main``
    then does nothing: the interruption tests would wait for their time limit.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.timeout(120)
def test_an_interruption_gives_back_every_thread_s_lease(store: Store, folder: Path, ctrl_c_delivered: None) -> None:
    store.enqueue("".join(line(n) for n in range(1, 11)))

    def interrupt_with_four_in_hand() -> None:
        until(lambda: len(started(folder)) == 4, timeout=60, what="four messages in hand")
        _thread.interrupt_main()  # what a second Ctrl-C raises in the main thread

    helper = threading.Thread(target=interrupt_with_four_in_hand)
    helper.start()
    try:
        with pytest.raises(WorkInterrupted) as caught:
            work(store, module(folder).send_when_told, concurrency=4, forever=True)
    finally:
        helper.join()
    assert sorted(caught.value.released) == sorted(started(folder))
    assert caught.value.summary == WorkSummary(claimed=4, released=4)
    assert states(store) == Counter(ready=10)  # given back: nothing left leased
    assert all(m.attempts == 0 for m in store.messages()) and not effects(store)


@pytest.mark.timeout(120)
def test_an_interruption_a_thread_dropped_is_sent_again(store: Store, folder: Path, ctrl_c_delivered: None) -> None:
    # Python drops an exception raised in a thread while a finalizer runs there;
    # this slow step drops the first one itself, and still gives its lease back.
    store.enqueue(line(1) + line(2))
    dropped = threading.Event()

    def drops_the_first(message: Any) -> str:
        (folder / f"started-{message.event_id}").touch()
        try:
            while True:
                time.sleep(0.05)
        except KeyboardInterrupt:
            dropped.set()
        while True:  # until interrupted again
            time.sleep(0.05)

    def interrupt_with_two_in_hand() -> None:
        until(lambda: len(started(folder)) == 2, timeout=60, what="two messages in hand")
        _thread.interrupt_main()

    helper = threading.Thread(target=interrupt_with_two_in_hand)
    helper.start()
    try:
        with pytest.raises(WorkInterrupted) as caught:
            work(store, LongHandler(drops_the_first, module(folder).record), concurrency=2)
    finally:
        helper.join()
    assert dropped.is_set() and sorted(caught.value.released) == ["E0001", "E0002"]
    assert states(store) == Counter(ready=2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("blocked", [True, False])
def test_a_thread_that_does_not_stop_in_time_keeps_its_lease_to_run_out(
    store: Store, folder: Path, ctrl_c_delivered: None, monkeypatch: pytest.MonkeyPatch, blocked: bool
) -> None:
    # A thread blocked in one call outside Python (here a lock's wait) takes no
    # interruption until the call returns: after GIVE_BACK_SECONDS the run gives
    # up on it, and its lease is kept, to run out. The negative control is a
    # thread that stops in time: its lease is given back.
    from queue_core import worker_threads

    monkeypatch.setattr(worker_threads, "GIVE_BACK_SECONDS", 2.0)
    store.enqueue(line(1))
    release = threading.Event()

    def prepare(message: Any) -> str:
        (folder / f"started-{message.event_id}").touch()
        if blocked:
            release.wait()  # one C call: an asynchronous exception waits for it
        else:
            while not release.is_set():
                time.sleep(0.05)
        return "sent"

    def interrupt_with_one_in_hand() -> None:
        until(lambda: len(started(folder)) == 1, timeout=60, what="a message in hand")
        _thread.interrupt_main()

    helper = threading.Thread(target=interrupt_with_one_in_hand)
    helper.start()
    try:
        with pytest.raises(WorkInterrupted) as caught:
            work(store, LongHandler(prepare, module(folder).record), concurrency=2)
    finally:
        helper.join()
        release.set()
    if blocked:
        assert (caught.value.released, caught.value.kept) == ((), ("E0001",))
        message = store.message("E0001")
        assert (message.state, message.attempts) == ("leased", 1)  # its lease runs out
    else:
        assert (caught.value.released, caught.value.kept) == (("E0001",), ())
        assert (store.message("E0001").state, store.message("E0001").attempts) == ("ready", 0)


@pytest.mark.one_engine
@pytest.mark.parametrize("value", [0, 65, True, "4", 2.0])
def test_a_bad_concurrency_is_refused_with_its_name(value: object) -> None:
    with pytest.raises(ValueError, match=r"concurrency must be an integer 1\.\.64"):
        WorkerConfig(concurrency=value)  # type: ignore[arg-type]


# ------------------------------------------------------- the command line

@pytest.mark.timeout(120)
def test_the_cli_runs_a_two_step_handler_under_its_heartbeat(store: Store, folder: Path) -> None:
    store.enqueue(line(1) + line(2))
    proc = subprocess.run([sys.executable, "-m", "queue_core", "--db", str(store.target), "work",
                           "--handler", "myapp:send_slowly", "--lease-seconds", "1",
                           "--heartbeat-every", "0.2", "--concurrency", "2"],
                          cwd=folder, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # each slow step outlived its 1-s lease: only the heartbeat kept it
    assert json.loads(proc.stdout) == {"claimed": 2, "done": 2, "retried": 0, "dead": 0, "lease_lost": 0}
    assert effects(store) == Counter(E0001=1, E0002=1)


@pytest.mark.timeout(120)
def test_sigterm_with_n_threads_finishes_every_message_in_hand(store: Store, folder: Path) -> None:
    store.enqueue("".join(line(n) for n in range(1, 11)))
    proc = worker(folder, store.target, "--handler", "myapp:send_when_told", "--concurrency", "4",
                  "--forever", "--poll", "0.05")
    try:
        until(lambda: len(started(folder)) == 4, timeout=60, what="four messages in hand")
        proc.send_signal(signal.SIGTERM)
        (folder / "go").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out) == {"claimed": 4, "done": 4, "retried": 0, "dead": 0, "lease_lost": 0}
    assert states(store) == Counter(done=4, ready=6)
    assert set(effects(store)) == started(folder)


@pytest.mark.timeout(120)
def test_two_ctrl_c_with_n_threads_give_every_lease_back(store: Store, folder: Path) -> None:
    store.enqueue("".join(line(n) for n in range(1, 11)))
    proc = worker(folder, store.target, "--handler", "myapp:send_when_told", "--concurrency", "4",
                  "--forever")
    try:
        until(lambda: len(started(folder)) == 4, timeout=60, what="four messages in hand")
        proc.send_signal(signal.SIGINT)
        assert proc.stderr is not None
        said = ""
        while "stopping after" not in said:  # the first one is taken before the second comes
            said = proc.stderr.readline()
            assert said, "the worker ended before it took the first Ctrl-C"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    gave_back = re.search(r"queue-core: interrupted; gave back (.*) \(ready again\)", err)
    assert gave_back is not None, err
    assert sorted(gave_back.group(1).split(", ")) == sorted(started(folder))
    assert json.loads(out) == {"claimed": 4, "done": 0, "retried": 0, "dead": 0, "lease_lost": 0,
                               "released": 4}
    assert states(store) == Counter(ready=10) and not effects(store)
    assert all(m.attempts == 0 and m.lease_until is None for m in store.messages())


@pytest.mark.one_engine
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("args", "said"), [
    (["--concurrency", "0"], "argument --concurrency: expected a number in 1..64, got 0"),
    (["--concurrency", "65"], "argument --concurrency: expected a number in 1..64, got 65"),
    (["--concurrency", "two"], "argument --concurrency: expected a whole number, got 'two'"),
    (["--heartbeat-every", "0"], "argument --heartbeat-every: expected more than 0 seconds, got 0"),
    (["--handler", "myapp:plain", "--heartbeat-every", "5"],
     "queue-core: usage: --heartbeat-every needs a two-step handler (a LongHandler)"),
    (["--heartbeat-every", "5"], "queue-core: usage: --heartbeat-every needs a two-step handler"),
])
def test_bad_worker_options_are_usage_errors_naming_them(tmp_path: Path, args: list[str], said: str) -> None:
    (tmp_path / "myapp.py").write_text(HANDLERS, encoding="utf-8")
    db = tmp_path / "q.sqlite3"
    with Store(db) as store:
        store.enqueue(line(1))
    proc = subprocess.run([sys.executable, "-m", "queue_core", "--db", str(db), "work", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr
    with Store(db) as store:
        assert states(store) == Counter(ready=1)  # refused before anything was claimed


@pytest.mark.one_engine
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("args", "said"), [
    (["--batch", "2"], "--batch 2: a two-step handler (a LongHandler) takes one message at a time"),
    (["--heartbeat-every", "30"], "--heartbeat-every 30 must be below the lease (30 s"),
    (["--lease-seconds", "5", "--heartbeat-every", "5"], "--heartbeat-every 5 must be below the lease (5 s"),
])
def test_options_a_two_step_handler_cannot_take_are_usage_errors(tmp_path: Path, args: list[str],
                                                                said: str) -> None:
    (tmp_path / "myapp.py").write_text(HANDLERS, encoding="utf-8")
    db = tmp_path / "q.sqlite3"
    with Store(db) as store:
        store.enqueue(line(1))
    proc = subprocess.run([sys.executable, "-m", "queue_core", "--db", str(db), "work",
                           "--handler", "myapp:send", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert f"queue-core: usage: {said}" in proc.stderr and "Traceback" not in proc.stderr
    with Store(db) as store:
        assert states(store) == Counter(ready=1)
