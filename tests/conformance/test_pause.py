"""A real worker process paused (SIGSTOP) past its lease, then continued (issue #36): both handler shapes, both engines.

Worker A is ``queue-core work`` with a handler of ``proof/pause.py``: it
claims E0001, signals it through a marker file and waits for the harness,
which stops it there, waits until A's lease has ended by the queue's own clock
(polled, not slept), lets other workers try, and continues it. Whatever the
pause, exactly one effect per message, A is refused with ``lease_lost``, and
nothing is left leased.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proof import pause

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str:
    """A fresh queue's place: a SQLite file, or a fresh PostgreSQL database's URL."""
    if engine == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "queue.sqlite3")


def fenced_once(run: pause.Run) -> None:
    """One effect per message, both done (E0001 by its second claim), A refused with lease_lost."""
    assert run.effects == {"E0001": 1, "E0002": 1}, run.to_dict()
    assert run.final == {"E0001": ["done", 2], "E0002": ["done", 1]}, run.to_dict()
    assert run.paused["status"] == 0, run.paused
    assert run.paused["summary"] == {"claimed": 1, "done": 0, "retried": 0, "dead": 0, "lease_lost": 1}


def test_a_paused_two_step_worker_is_refused_and_the_others_go_on(
        target: str, engine: str, tmp_path: Path) -> None:
    run = pause.paused_past_lease(target, tmp_path, engine, "two_step")
    fenced_once(run)
    # stopped in its slow step, outside any transaction: it holds nothing
    assert run.during["summary"]["done"] == 1, run.during  # E0002
    assert run.retaken["summary"]["done"] == 1, run.retaken  # E0001, taken over during the pause


def test_a_worker_paused_inside_its_transaction_stalls_what_it_locks(
        target: str, engine: str, tmp_path: Path) -> None:
    run = pause.paused_past_lease(target, tmp_path, engine, "plain_after")
    fenced_once(run)  # its effect was rolled back with its refused ACK
    if engine == "sqlite":
        # it holds the database's write lock: no other worker writes anything
        assert run.during["status"] == 1 and "database_busy" in run.during["stderr"], run.during
        assert run.waiter["waiting_at_continue"], run.waiter  # a patient writer waited...
        assert run.waiter["seconds"] >= run.pause_seconds - 0.5, run.to_dict()  # ...the whole pause
        assert run.waiter["summary"]["done"] == 2, run.waiter
    else:
        # it holds E0001's rows only: E0002 flows past, E0001 is skipped even with
        # its lease ended. The store's guard (idle_in_transaction_session_timeout,
        # 5 min) is far off: this is the guard's negative control.
        assert run.during["summary"]["done"] == 1, run.during
        assert run.retaken["summary"]["claimed"] == 0, run.retaken
