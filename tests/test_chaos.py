"""Random SIGKILLs of real queue-core processes, and eight workers on one write lock.

``queue_core.evidence.chaos`` (the quick run; ``python scripts/chaos.py --long``
for a deeper one) and ``queue_core.evidence.contention``. Each run leaves a
record in ``test-artifacts/evidence/`` that the page "How we know" shows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from queue_core import evidence
from queue_core.store import BUSY_TIMEOUT_MS


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("chaos")
    began = time.monotonic()
    result = evidence.chaos(folder, **evidence.QUICK)
    evidence.save_record("chaos", evidence.QUICK, result, by="tests/test_chaos.py",
                         seconds=time.monotonic() - began)
    return result


@pytest.fixture(scope="module")
def contention(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("contention")
    began = time.monotonic()
    result = evidence.contention(folder)
    evidence.save_record("contention", {}, result, by="tests/test_chaos.py", seconds=time.monotonic() - began)
    return result


def test_random_kills_lose_nothing_and_double_nothing(chaos: dict[str, Any]) -> None:
    assert chaos["violations"] == [], f"seed {chaos['seed']}"
    assert (chaos["losses"], chaos["doubles"]) == (0, 0)
    assert chaos["total_cents"] == chaos["expected_cents"]
    assert chaos["done"] == chaos["valid_events"]
    assert chaos["dead"] == chaos["toys"]  # dead only for the reason that cannot be retried away


def test_random_kills_really_happened_over_thousands_of_events(chaos: dict[str, Any]) -> None:
    assert chaos["events"] >= 2000
    assert chaos["rounds"] == evidence.QUICK["rounds"]
    assert chaos["worker_kills"] >= chaos["rounds"] // 2  # one to five tries per round, if a victim is alive
    assert chaos["worker_kills_with_the_file_open"] > 0


def test_no_process_failed_except_by_a_kill(chaos: dict[str, Any]) -> None:
    assert chaos["worker_errors"] == 0
    assert chaos["tracebacks"] == 0
    assert chaos["clean_worker_exits"] + chaos["worker_kills"] == chaos["worker_processes"]


def test_eight_workers_wait_out_the_write_lock_and_exit_cleanly(contention: dict[str, Any]) -> None:
    assert contention["workers"] == 8
    if Path("/proc/self/fd").is_dir():  # how the run sees that a worker has the file open
        assert contention["all_waiting_before_the_countdown"]
    assert contention["lock_held_seconds"] > BUSY_TIMEOUT_MS / 1000  # longer than SQLite's own wait
    assert contention["exit_statuses"] == [0] * 8
    assert contention["tracebacks"] == 0 and contention["stderr_lines"] == 0


def test_eight_workers_share_the_work_without_loss_or_double(contention: dict[str, Any]) -> None:
    assert contention["violations"] == []
    assert (contention["losses"], contention["doubles"]) == (0, 0)
    assert contention["done"] == contention["claimed"] == contention["events"]
    assert sum(contention["shares_done"]) == contention["events"]
    assert contention["total_cents"] == contention["expected_cents"]
