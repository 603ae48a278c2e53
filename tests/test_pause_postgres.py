"""PostgreSQL's side of a pause (issue #36): the guard that ends a paused client's transaction, and a COMMIT stopped in flight.

Real processes and the session's throwaway server (tests/postgres_server.py);
the harness is ``proof/pause.py``. The guard's negative control, a pause
inside a transaction with the guard far off, is
``tests/conformance/test_pause.py::test_a_worker_paused_inside_its_transaction_stalls_what_it_locks``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proof import pause
from queue_core.engines.postgres import IDLE_IN_TRANSACTION_MS, PostgresConnection

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]


def setting(url: str) -> str:
    conn = PostgresConnection(url, busy_timeout_ms=100)
    try:
        return str(conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0])
    finally:
        conn.close()


def test_the_store_sets_the_guard_and_a_url_of_its_own_wins(postgres_url: str) -> None:
    assert IDLE_IN_TRANSACTION_MS == 300_000 and setting(postgres_url) == "5min"
    own = postgres_url + "&options=-c%20idle_in_transaction_session_timeout%3D1500"
    assert setting(own) == "1500ms"


def test_the_guard_ends_a_paused_transaction_and_the_message_is_finished_once(
        postgres_url: str, tmp_path: Path) -> None:
    run = pause.paused_past_lease(postgres_url, tmp_path, "postgresql", "plain_after", guard_ms=1000)
    # the server ended A's session: its row lock went, and B2 took E0001 during the pause
    assert run.retaken["summary"]["done"] == 1, run.to_dict()
    assert run.effects == {"E0001": 1, "E0002": 1}, run.to_dict()
    assert run.final == {"E0001": ["done", 2], "E0002": ["done", 1]}, run.to_dict()
    # A wakes to a clear error, not a traceback; its effect was never committed
    assert run.paused["status"] == 1 and run.paused["summary"] is None, run.paused
    assert run.paused["stderr"].startswith("queue-core: connection_lost: "), run.paused
    assert "idle-in-transaction timeout" in run.paused["stderr"] and "Traceback" not in run.paused["stderr"]


def test_a_worker_stopped_inside_commit_finishes_its_message_and_nobody_else_does(
        postgres_url: str, tmp_path: Path) -> None:
    run = pause.paused_in_commit(postgres_url, tmp_path)
    # its ACK was checked before COMMIT, under its row lock: the lease ending
    # during COMMIT changes nothing, others skip the row and finish E0002
    assert run.during["summary"] == {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    assert run.paused["summary"] == {"claimed": 1, "done": 1, "retried": 0, "dead": 0, "lease_lost": 0}
    assert run.effects == {"E0001": 1, "E0002": 1}, run.to_dict()
    assert run.final == {"E0001": ["done", 1], "E0002": ["done", 1]}, run.to_dict()
