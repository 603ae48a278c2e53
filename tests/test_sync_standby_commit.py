"""Ctrl-C never cancels a COMMIT that waits for a synchronous standby (issue #44, item 2).

A primary with a synchronous standby (proof/failover.py's ``pair``); the
standby is stopped while a real ``queue-core work`` process has its message in
hand, so the worker's COMMIT waits for it. Ctrl-C comes three times during
that wait. A cancel now would make the primary answer the COMMIT with success
and a WARNING, committed on the primary alone (docs/failover.md): the worker
must instead go on waiting, say so once, not return before the standby is
back, and then count the completion it committed. At ``--concurrency 2`` the
COMMIT is a worker thread's, and psycopg runs as pure Python
(``PSYCOPG_IMPL=python``), whose wait is Python code where the thread's
interruption lands; its C wait (the default) takes it only after the COMMIT.

The negative control runs the same process with the guard off (tests/support.py's
``GUARD_OFF``): it returns while the standby is still down, the primary has
logged the WARNING, and the primary holds a completion that its standby
cannot have (the local-only commit), which the worker reports as not done.

Fresh pairs of throwaway servers; skipped without PostgreSQL, failed under
QUEUE_CORE_REQUIRE_POSTGRES=1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proof import failover
from queue_core import Store

from .postgres_server import _skip_or_fail
from .support import queue_core_command, until

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

HANDLERS = textwrap.dedent('''
    import pathlib, time

    def handle(tx, message):
        tx.execute("INSERT INTO failover_effects (event_id, nonce, worker) VALUES (?, 'n', 'w')",
                   (message.event_id,))
        pathlib.Path("started-" + message.event_id).touch()
        while not pathlib.Path("go").exists():
            time.sleep(0.01)
''')
WAITING = "queue-core: waiting for the COMMIT in flight, then stopping"
CANCELLED = "canceling wait for synchronous replication due to user request"
WATCH_SECONDS = 2.0  # the old path returned within a second of the second Ctrl-C


@pytest.fixture
def servers() -> Iterator[failover.Pair]:
    reason = failover.unavailable()
    if reason is not None:
        _skip_or_fail(reason)
    with failover.pair(synchronous=True) as pair:
        yield pair


def psycopg_impl(impl: str) -> None:
    """Skip (or fail) unless psycopg can run as ``impl`` here (python: it needs libpq itself)."""
    found = subprocess.run([sys.executable, "-c", "import psycopg; print(psycopg.pq.__impl__)"],
                           env={**os.environ, "PSYCOPG_IMPL": impl}, capture_output=True, text=True,
                           timeout=60)
    if found.returncode != 0 or found.stdout.strip() != impl:
        _skip_or_fail(f"psycopg cannot run as {impl} here: {found.stderr.strip()[-300:]}")


def sync_waits(node: failover.Node) -> int:
    """How many sessions of ``node`` wait for their synchronous standby."""
    return int(node.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")[0][0])


def states(node: failover.Node) -> dict[str, str]:
    return dict(node.query("SELECT event_id, state FROM messages ORDER BY event_id",
                           dbname=failover.DATABASE))


def logged(node: failover.Node, text: str) -> int:
    return node.log.read_text(encoding="utf-8", errors="replace").count(text)


@dataclass
class Run:
    status: int | None
    summary: dict[str, int] | None
    stderr: str
    returned_while_down: bool
    primary_while_down: dict[str, str]  # E0001's state on the primary, the standby still down


def ctrl_c_while_commit_waits(servers: failover.Pair, folder: Path, concurrency: int, impl: str,
                              *, guarded: bool = True) -> Run:
    """E0001 in hand, the standby stopped, its COMMIT waiting; Ctrl-C three times; the standby back.

    Without the guard the third Ctrl-C is not sent: the process is on its way
    out after the second, and would die of it.
    """
    (folder / "myapp.py").write_text(HANDLERS, encoding="utf-8")
    primary, standby = servers.primary, servers.standby
    with Store(primary.url()) as store:
        store.enqueue('{"event_id": "E0001", "payload": {"n": 1}}\n')
    proc = subprocess.Popen(
        [*queue_core_command(guarded), "--db", primary.url(), "work", "--handler", "myapp:handle",
         "--concurrency", str(concurrency)],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PSYCOPG_IMPL": impl})
    try:
        until(lambda: (folder / "started-E0001").exists(), 60, "E0001 never reached the handler")
        standby.shut_down()
        (folder / "go").touch()
        until(lambda: sync_waits(primary) == 1, 60, "the COMMIT never waited for the standby")
        assert proc.stderr is not None
        said = []
        proc.send_signal(signal.SIGINT)  # the first: finish the message in hand
        said.append(proc.stderr.readline())
        assert "stopping after the message in hand" in said[-1]
        proc.send_signal(signal.SIGINT)  # the second: stop now
        if guarded:  # said while it waits (the old path never says it), then the third
            said.append(proc.stderr.readline())
            assert said[-1].startswith(WAITING), said
            proc.send_signal(signal.SIGINT)
        watched = time.monotonic() + WATCH_SECONDS
        while proc.poll() is None and time.monotonic() < watched:
            time.sleep(0.02)
        returned_while_down = proc.poll() is not None
        if not returned_while_down:
            assert sync_waits(primary) == 1, "the COMMIT stopped waiting while the standby was down"
        primary_while_down = states(primary)
        standby.start_again()
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    return Run(proc.returncode, json.loads(out) if out.strip() else None, "".join(said) + err,
               returned_while_down, primary_while_down)


@pytest.mark.parametrize(("concurrency", "impl"), [(1, "binary"), (2, "python"), (2, "binary")])
def test_ctrl_c_waits_for_the_standby_and_the_worker_counts_its_commit(
        servers: failover.Pair, tmp_path: Path, concurrency: int, impl: str) -> None:
    psycopg_impl(impl)
    run = ctrl_c_while_commit_waits(servers, tmp_path, concurrency, impl)
    # held while the standby was down: nothing returned, nothing visible, nothing cancelled
    assert not run.returned_while_down, run
    assert run.primary_while_down == {"E0001": "leased"}, run
    # then the COMMIT went through, on both servers, and the worker counted it
    assert run.status == 130, run
    assert run.summary == {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}, run
    assert run.stderr.count(WAITING) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "interrupted; gave back nothing (ready again)" in run.stderr and "still held" not in run.stderr
    servers.wait_replayed()
    assert states(servers.primary) == states(servers.standby) == {"E0001": "done"}
    assert logged(servers.primary, CANCELLED) == 0


@pytest.mark.parametrize(("concurrency", "impl"), [(1, "binary"), (2, "python")])
def test_negative_control_without_the_guard_ctrl_c_commits_on_the_primary_alone(
        servers: failover.Pair, tmp_path: Path, concurrency: int, impl: str) -> None:
    psycopg_impl(impl)
    run = ctrl_c_while_commit_waits(servers, tmp_path, concurrency, impl, guarded=False)
    assert run.returned_while_down, run  # while the standby was still down
    assert logged(servers.primary, CANCELLED) == 1  # psycopg's cancel: the WARNING
    # done on the primary, its standby down: committed locally, not replicated
    assert run.primary_while_down == {"E0001": "done"}, run
    # and the worker did not count it: it reported the message as still held
    assert run.summary is not None and run.summary["done"] == 0, run
    assert "still held by a thread that did not stop: E0001" in run.stderr, run.stderr
