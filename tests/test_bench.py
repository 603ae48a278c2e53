"""The benchmark script runs, verifies and reports every measurement (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench.py"


def load_bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_bench_reports_every_measurement_and_every_target() -> None:
    bench = load_bench()
    report = bench.run(messages=1010, rounds=1, peers=False, history=(500, 5_000), memory=(2, 200), queue_rows=1_000,
                       worker_counts=(1, 2), batch_sizes=(16,),
                       postgres=False)  # 1,010 messages: more than one enqueue batch
    names = {"raw", "raw WAL, NORMAL", "raw rollback journal, FULL", "per_transaction", "bare SQL, simple path",
             "simple", "batch_16", "workers_1", "workers_2"}
    assert set(report["messages_per_second"]) == names
    assert all(rate > 0 for rate in report["messages_per_second"].values())
    assert set(report["latency_ms"]) == {"simple", "batch_16"}
    assert [sum(split) for split in report["shares"]["workers_2"]] == [1010]
    # how busy the CPUs were while the workers ran: a share of the machine, read from /proc/stat
    assert set(report["cpu_busy"]) == {"workers_1", "workers_2"}
    assert all(0 < busy <= 1 for rounds in report["cpu_busy"].values() for busy in rounds)
    assert len(report["memory_kib"]) == 2
    assert set(report["targets"]) == {
        "simple / two-commit ceiling", "bare SQL of the simple path / two-commit ceiling", "batch_16 / raw commits",
        "simple / bare SQL of the simple path",
        "claim over 5000 / over 500 done rows", "claim in 1 of 10 queues / in a lone queue",
        "workers_2 / workers_1", "enqueue of 1,000 lines (ms)",
        "worker memory: last / first round"}
    # Every target says whether it was met; the bare SQL is a reference figure beside them.
    assert all(isinstance(t["met"], bool) for name, t in report["targets"].items() if not name.startswith("bare"))
    assert report["targets"]["bare SQL of the simple path / two-commit ceiling"]["met"] is None
    assert 0 < report["enqueue_1000_parse_ms"] < report["enqueue_1000_ms"]
    assert set(report["claim_in_queues_microseconds"]) == {"1", "10"}
    assert "| simple |" in bench.markdown(report)


def test_a_wrong_result_is_refused(tmp_path: Path) -> None:
    # The verification is real: a queue with one message left undone fails it.
    bench = load_bench()
    path = bench.fresh_queue(tmp_path, "short", 3)
    try:
        bench.verify_queue(path, 3)
    except SystemExit as exc:
        assert "wrong result" in str(exc)
    else:
        raise AssertionError("an unworked queue passed verification")


@pytest.mark.timeout(300)  # the slow-work section waits out 2-second handlers for real
def test_quick_mode_writes_its_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(BENCH), "--quick", "--out", str(out)], check=True,
                   capture_output=True, text=True)
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert result["parameters"]["messages"] == 300
    assert (out / "results.md").read_text(encoding="utf-8").startswith("| measurement |")
    rates = result["messages_per_second"]
    # the slow-work section (bench_slow_work.py): every figure reported, none asserted
    slow = result["slow_work"]
    assert set(slow["producer"]) == {"plain", "long"} and all(p["sends"] > 0 for p in slow["producer"].values())
    assert slow["threads_messages_per_second"] > 0 and set(slow["short_messages_per_second"]) == {"1", "8"}
    assert len(slow["target_names"]) == 4 and set(slow["target_names"]) <= set(result["targets"])
    if os.environ.get("QUEUE_CORE_REQUIRE_POSTGRES") == "1":  # CI: the PostgreSQL column must be measured
        assert result["postgresql"]["synchronous_commit"] == "on", result["postgresql"]
        assert rates["postgresql raw"] > 0 and rates["postgresql workers_1"] > 0 and rates["postgresql workers_2"] > 0
        assert sum(result["shares"]["postgresql workers_2"][0]) == 300  # every message once, across both workers
        assert rates["postgresql batch_64"] > 0 and rates["postgresql bare SQL, simple path"] > 0
        assert 0 < result["cpu_busy"]["postgresql workers_2"][0] <= 1
        # counted from the server's statement log: the claim, BEGIN, the effect, the ACK, COMMIT
        # (the last claim, which finds the queue empty, belongs to no message)
        assert result["postgresql"]["round_trips_per_message"] == 5, result["postgresql"]
    elif "skipped" in result["postgresql"]:
        assert not any(name.startswith("postgresql") for name in rates)


def test_the_per_transaction_store_really_closes_its_connection_after_each_transaction(tmp_path: Path) -> None:
    # The "before" row is only a comparison if it pays what the old policy paid:
    # each transaction's last close checkpoints and deletes the WAL.
    bench = load_bench()
    path = bench.fresh_queue(tmp_path, "policy", 3)
    wal = path.with_name(path.name + "-wal")
    store = bench.per_transaction_store(path)
    try:
        lease = store.claim(60)
        assert lease is not None
        assert getattr(store._runner._local, "conn", None) is None and not wal.exists()
        store.complete(lease, bench.Handler())
        assert getattr(store._runner._local, "conn", None) is None and not wal.exists()
    finally:
        store.close()
    with bench.Store(path, clock=bench.ModelClock(bench.NOW), create=False) as kept:
        kept.claim(60)
        assert wal.exists()  # the policy of today: the connection and its WAL stay until close()


PEERS = BENCH.with_name("bench_peers.py")
BENCH_PYTHON = BENCH.parent.parent / ".venv-bench" / "bin" / "python"


def test_a_lost_or_doubled_peer_job_is_refused() -> None:
    # The peers' count is real: one effect missing, or one written twice, fails the run loudly.
    import sqlite3

    peers = load_bench().bench_peers
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE effects (event_id TEXT, category TEXT, amount_cents INTEGER)")
    conn.executemany("INSERT INTO effects VALUES (?, ?, ?)",
                     [(f"E{n:04d}", peers.CATEGORY, peers.AMOUNT) for n in range(3)])
    peers._check_effects(conn, 3, "peer")  # every job once: accepted
    for wrong in (2, 4):
        try:
            peers._check_effects(conn, wrong, "peer")
        except SystemExit as exc:
            assert "lost or doubled" in str(exc)
        else:
            raise AssertionError(f"3 effects passed for {wrong} jobs")
    conn.execute("INSERT INTO effects VALUES ('E0000', 'book', 7)")  # a doubled effect
    try:
        peers._check_effects(conn, 4, "peer")
    except SystemExit as exc:
        assert "lost or doubled" in str(exc)
    else:
        raise AssertionError("a doubled effect passed")


def test_the_peer_targets_compare_one_worker_and_the_batched_path_within_one_run() -> None:
    bench = load_bench()
    median = {"postgresql workers_1": 600.0, f"postgresql batch_{bench.PG_BATCH}": 3000.0,
              **{f"postgresql {name}": 400.0 for name in bench.bench_peers.RUNS}}
    median[f"postgresql {bench.bench_peers.BATCHED[1]}"] = 2000.0
    targets = bench.peer_targets(median)
    assert {name: round(value, 2) for name, (value, _) in targets.items()} == {
        **{f"postgresql workers_1 / {name}": 1.5 for name in bench.bench_peers.ONE_AT_A_TIME},
        f"postgresql batch_{bench.PG_BATCH} / {bench.bench_peers.BATCHED[1]} (the fastest peer batched)": 1.5}
    assert bench.peer_targets({"postgresql workers_1": 600.0}) == {}  # no peers measured: no peer target


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(300)
def test_the_postgres_peers_complete_every_job_once() -> None:
    # procrastinate and pgqueuer are installed by `make bench` only (.venv-bench), so
    # their runners run there: 20 jobs each, every one counted done once in its database.
    have_peers = all(importlib.util.find_spec(name) for name in ("procrastinate", "pgqueuer", "asyncpg"))
    python = sys.executable if have_peers else str(BENCH_PYTHON)
    if not Path(python).exists():
        pytest.skip("procrastinate and pgqueuer are installed by `make bench` only (.venv-bench)")
    proc = subprocess.run([python, str(PEERS), "--jobs", "20"], capture_output=True, text=True, timeout=280)
    if proc.returncode and "cannot run the PostgreSQL peers here" in proc.stderr:
        if os.environ.get("QUEUE_CORE_REQUIRE_POSTGRES") == "1":
            raise AssertionError(proc.stderr)
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["versions"] == {"procrastinate": "3.10.0", "pgqueuer": "1.6.0"}
    assert set(result["jobs_per_second"]) == {"procrastinate one at a time", "procrastinate concurrency 16",
                                               "pgqueuer one at a time", "pgqueuer batch 256"}
    assert all(rate > 0 for rate in result["jobs_per_second"].values())
