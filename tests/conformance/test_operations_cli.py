"""``queue-core metrics``, ``prune`` and the worker's progress, as real subprocesses, on both engines.

The progress line is checked on a real pseudo-terminal (``pty``): it is
drawn there and nowhere else. Only the clock is modelled (``--now``).
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..support import batch, line

QUEUE_CORE = [sys.executable, "-m", "queue_core"]


@pytest.fixture
def target(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str:
    """What ``--db`` names: a file in tmp_path, or a fresh PostgreSQL database."""
    if engine == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "queue.sqlite3")


def cli(target: str, now: int, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QUEUE_CORE, "--db", target, "--now", str(now), *args], capture_output=True,
                          text=True, input=input, timeout=120)


def ok(target: str, now: int, *args: str, input: str | None = None) -> str:
    proc = cli(target, now, *args, input=input)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.returncode, proc.stderr)
    return proc.stdout


def samples(exposition: str) -> dict[str, float]:
    return {name: float(value) for name, value in
            (row.rsplit(" ", 1) for row in exposition.splitlines() if not row.startswith("#"))}


def test_metrics_and_status_agree_after_a_real_run(target: str) -> None:
    ok(target, 1000, "enqueue", "-", input=batch(line("E0001"), line("E0002", "toy"), line("E0003")))
    ok(target, 1030, "work", "--max-messages", "2")  # E0001 done after 30 s; E0002 dead
    values = samples(ok(target, 1100, "metrics"))
    assert values['queue_core_messages{queue="default",state="ready"}'] == 1
    assert values['queue_core_messages{queue="default",state="done"}'] == 1
    assert values['queue_core_messages{queue="default",state="dead"}'] == 1
    assert values['queue_core_oldest_ready_age_seconds{queue="default"}'] == 100  # E0003, enqueued at 1000
    assert values['queue_core_dead_messages_by_attempts{queue="default",attempts="1"}'] == 1
    assert values['queue_core_enqueue_to_done_seconds{queue="default",quantile="0.5"}'] == 30
    assert values['queue_core_enqueue_to_done_seconds_count{queue="default"}'] == 1
    assert values['queue_core_expired_leases_total{queue="default"}'] == 0


def test_prune_from_the_command_line_keeps_dedup(target: str) -> None:
    sent = batch(line("E0001", amount_cents=250))
    ok(target, 1000, "enqueue", "-", input=sent)
    ok(target, 1000, "work")
    assert json.loads(ok(target, 1000 + 3599, "prune", "--older-than", "1h")) == {"pruned": 0, "unknown_age": 0}
    assert json.loads(ok(target, 1000 + 3600, "prune", "--older-than", "1h")) == {"pruned": 1, "unknown_age": 0}
    assert json.loads(ok(target, 5000, "enqueue", "-", input=sent)) == {"accepted": 0, "duplicates": 1}
    refused = cli(target, 5000, "enqueue", "-", input=batch(line("E0001", amount_cents=251)))
    assert refused.returncode == 2 and "event_conflict" in refused.stderr and "Traceback" not in refused.stderr
    assert samples(ok(target, 5000, "metrics"))['queue_core_pruned_messages{queue="default"}'] == 1


@pytest.mark.parametrize("age", ["", "1.5h", "-1", "7w", "h", "99999999999999d"])
def test_a_bad_age_is_a_usage_error_that_names_it(tmp_path: Path, age: str) -> None:
    # Refused while the arguments are read, before any database is opened (on either engine).
    path = tmp_path / "queue.sqlite3"
    ok(str(path), 1000, "enqueue", "-", input=batch(line("E0001")))
    before = path.read_bytes()
    proc = cli(str(path), 1000, "prune", "--older-than", age)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--older-than" in proc.stderr and "Traceback" not in proc.stderr
    assert path.read_bytes() == before


def test_quiet_prints_nothing_and_json_progress_is_one_json_line_a_second(target: str) -> None:
    ok(target, 1000, "enqueue", "-", input=batch(*(line(f"E{n:04d}") for n in range(1, 31))))
    quiet = cli(target, 1000, "work", "--quiet", "--max-messages", "10")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    piped = cli(target, 1000, "work", "--max-messages", "10")  # not a terminal: no progress line
    assert piped.stderr == "" and json.loads(piped.stdout)["done"] == 10
    scripted = cli(target, 1000, "work", "--json")
    assert json.loads(scripted.stdout)["done"] == 10
    for row in scripted.stderr.splitlines():  # a short run may finish before the first second
        assert set(json.loads(row)) == {"progress", "seconds", "per_second"}


def test_a_terminal_gets_a_progress_line_that_ends_with_the_summary(target: str, tmp_path: Path) -> None:
    ok(target, 1000, "enqueue", "-", input=batch(*(line(f"E{n:04d}") for n in range(1, 401))))
    stdout = tmp_path / "summary.json"
    leader, follower = pty.openpty()
    try:
        with stdout.open("w") as out:
            proc = subprocess.Popen([*QUEUE_CORE, "--db", target, "--now", "1000", "work"],
                                    stdout=out, stderr=follower, stdin=subprocess.DEVNULL)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            ready, _, _ = select.select([leader], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert proc.wait(60) == 0
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    text = shown.decode()
    summary: dict[str, Any] = json.loads(stdout.read_text())
    assert summary["done"] == 400
    assert text.startswith("\rqueue-core work: ") and text.endswith("\r\n")  # the terminal turns \n into \r\n
    assert "400 claimed, 400 done, 0 retried, 0 dead, 0 lease lost" in text.splitlines()[-1]
