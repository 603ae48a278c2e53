"""What durability costs on this machine, and what queue_core makes of it: ratios from one run.

    make bench                               # the full run; writes docs/assets/bench/
    python scripts/bench.py --quick          # a smoke run (the test suite uses it)
    python scripts/bench.py --out DIR --messages 5000 --rounds 3

Machines here are noisy, so every figure is the median of ``--rounds``
rounds, and within a round the measurements run one after another in a
rotating order; the ratios (the targets of the performance issue) are taken
between medians of the same run. Every measurement verifies its result (every
message done once, one effect each, the money exact; a peer: every item
acknowledged), so a fast wrong run cannot be reported.

Measured, all on WAL with ``synchronous=FULL`` (the peers are set to FULL too):

* ``raw``: ``BEGIN IMMEDIATE; UPDATE one row; COMMIT``: the commit limit.
  A protocol with two commits per message is capped at half of it. The same
  loop also runs with ``synchronous=NORMAL`` and with the rollback journal, to
  show what those settings would buy.
* ``per_transaction``: claim + complete with a connection opened and closed
  around every transaction, the policy before this issue.
* ``simple``: ``work()``, one connection for the run (the path the chapters teach).
* ``bare SQL, simple path``: the same statements as ``simple`` typed straight
  into sqlite3, without queue_core: how much of the cost is the SQL itself.
* ``batch_K``: ``work(batch=K)``, K messages claimed in one transaction and
  completed in one; with its latency per message (claim to ACK).
* ``workers_N``: N real worker processes on one file; shares per worker.
* ``postgresql raw``: the server's own commit loop, its commit limit.
* ``postgresql workers_N``: the same N processes on one PostgreSQL database
  (the throwaway server of proof/postgres_cluster.py, ``fsync`` and
  ``synchronous_commit`` on, a Unix socket); left out with ``--no-postgres``
  or when no server can be started here (the result says why).
* ``postgresql procrastinate ...``, ``postgresql pgqueuer ...``: the two
  PostgreSQL peers on the same server in the same rounds, one at a time and
  batched, with the same jobs and effect (bench_peers.py); left out with
  ``--no-postgres-peers``.
* peers: persist-queue ``SQLiteAckQueue`` get+ack, litequeue pop+done, huey's
  ``SqliteStorage`` dequeue (deletes on dequeue: at-most-once) and dequeue +
  ``put_data`` (a stored result). They are installed only for the benchmark.
* slow work (bench_slow_work.py): a producer's ``send()`` latency while a
  worker runs 2-second handlers, plain and ``LongHandler``; 8 threads with
  0.5-second slow steps; the short handler with 8 threads against one.
* ``claim`` cost over 10,000 and 1,000,000 done rows (the claim query and its
  UPDATE, without the commit), and in one of 10 named queues of 100,000 ready
  messages each against a lone such queue, enqueue of 1,000 lines, and a worker's memory
  over 100,000 messages (10 files of 10,000).

The measurements are in bench_common.py (the messages and their check),
bench_sqlite.py, bench_postgres.py, bench_peers.py and bench_slow_work.py; this file runs them
in rounds and writes the report.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The measurements live beside this file, one module per kind (bench_*.py); the
# test suite loads this file by its path, so its folder is put on the path here.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers  # noqa: E402
import bench_slow_work  # noqa: E402
from bench_common import NOW, ROOT, fill_queue, fresh_queue, verify_queue  # noqa: E402,F401
from bench_postgres import PostgresDatabases  # noqa: E402
from bench_sqlite import (  # noqa: E402,F401
    PEERS,
    QUEUES,
    per_transaction_store,
    measure_bare,
    measure_claim_history,
    measure_claim_queues,
    measure_enqueue,
    measure_memory,
    measure_per_transaction,
    measure_processes,
    measure_raw,
    measure_work,
    peers_available,
)
from queue_core import Handler, ModelClock, Store  # noqa: E402,F401  (the test suite reaches them here)

BATCH_SIZES = (16, 64, 256)
WORKER_COUNTS = (1, 2, 4, 8)
PG_BATCH = 64  # the batched path on PostgreSQL: messages per transaction


# --------------------------------------------------------------------- run

def run(messages: int = 5000, rounds: int = 3, *, peers: bool = True, postgres_peers: bool = True, history: tuple[int, int] = (10_000, 1_000_000),
        memory: tuple[int, int] = (10, 10_000), queue_rows: int = 100_000, worker_counts: tuple[int, ...] = WORKER_COUNTS,
        batch_sizes: tuple[int, ...] = BATCH_SIZES, postgres: bool = True,
        slow_work: bench_slow_work.Settings | None = None) -> dict[str, Any]:
    """Every measurement, ``rounds`` times in rotating order; medians and the targets' ratios."""
    samples: dict[str, list[float]] = {}
    latencies: dict[str, list[float]] = {}
    shares: dict[str, list[list[int]]] = {}
    cpu_busy: dict[str, list[float | None]] = {}
    jobs: list[tuple[str, Callable[[Path], None]]] = []

    def rate(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    jobs.append(("raw", lambda f: rate("raw", measure_raw(f, messages))))
    # What the other settings would buy (the performance page says what each loses).
    jobs.append(("raw WAL, NORMAL", lambda f: rate("raw WAL, NORMAL", measure_raw(f, messages, "WAL", "NORMAL"))))
    jobs.append(("raw rollback journal, FULL",
                 lambda f: rate("raw rollback journal, FULL", measure_raw(f, min(messages, 2000), "DELETE", "FULL"))))
    jobs.append(("per_transaction", lambda f: rate("per_transaction", measure_per_transaction(f, min(messages, 2000)))))
    jobs.append(("bare SQL, simple path", lambda f: rate("bare SQL, simple path", measure_bare(f, messages))))
    for size in (1, *batch_sizes):
        name = "simple" if size == 1 else f"batch_{size}"

        def job(f: Path, size: int = size, name: str = name) -> None:
            value, latency = measure_work(f, messages, size)
            rate(name, value)
            latencies.setdefault(name, []).append(latency)
        jobs.append((name, job))
    for count in worker_counts:
        def procs(f: Path, count: int = count) -> None:
            value, split, busy = measure_processes(f, messages, count)
            rate(f"workers_{count}", value)
            shares.setdefault(f"workers_{count}", []).append(split)
            cpu_busy.setdefault(f"workers_{count}", []).append(busy)
        jobs.append((f"workers_{count}", procs))
    # The PostgreSQL column runs in a phase of its own after the SQLite rounds:
    # an idle server still writes (checkpoints), and those writes would share
    # the disk with SQLite's fsyncs.
    postgres_server: PostgresDatabases | None = None
    round_trips: tuple[float, dict[str, float]] = (0.0, {})
    peer_statements: dict[str, float] = {}
    postgres_jobs: list[tuple[str, Callable[[Path], None]]] = []
    postgres_skipped = PostgresDatabases.unavailable() if postgres else "not asked for"
    if postgres_skipped is None:
        def pg_raw(f: Path) -> None:
            assert postgres_server is not None
            rate("postgresql raw", postgres_server.raw_commits(messages))
        postgres_jobs.append(("postgresql raw", pg_raw))

        def pg_bare(f: Path) -> None:
            assert postgres_server is not None
            rate("postgresql bare SQL, simple path", postgres_server.bare(messages))
        postgres_jobs.append(("postgresql bare SQL, simple path", pg_bare))

        def pg_batch(f: Path) -> None:
            assert postgres_server is not None
            rate(f"postgresql batch_{PG_BATCH}", postgres_server.batched(messages, PG_BATCH))
        postgres_jobs.append((f"postgresql batch_{PG_BATCH}", pg_batch))
        for count in worker_counts:
            def pg_procs(f: Path, count: int = count) -> None:
                value, split, busy = measure_processes(f, messages, count, postgres_server)
                rate(f"postgresql workers_{count}", value)
                shares.setdefault(f"postgresql workers_{count}", []).append(split)
                cpu_busy.setdefault(f"postgresql workers_{count}", []).append(busy)
            postgres_jobs.append((f"postgresql workers_{count}", pg_procs))
    # procrastinate and pgqueuer in the same rounds, on the same server, with the same
    # messages (bench_peers.py): each a new database with its jobs enqueued before the clock.
    peers_skipped = bench_peers.available() if postgres_peers else "not asked for"
    if postgres_skipped is None and peers_skipped is None:
        bench_peers.quiet()
        for peer_name, runner in bench_peers.RUNS.items():
            def pg_peer(f: Path, peer_name: str = peer_name, runner: bench_peers.Runner = runner) -> None:
                assert postgres_server is not None
                rate(f"postgresql {peer_name}", runner(postgres_server.new_database(), messages, lambda: None))
            postgres_jobs.append((f"postgresql {peer_name}", pg_peer))
    with_peers = peers and peers_available()
    if with_peers:
        for peer, measure in PEERS.items():
            jobs.append((peer, lambda f, peer=peer, measure=measure: rate(peer, measure(f, messages))))

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="queue-core-bench-") as tmp:
        def rounds_of(phase: str, phase_jobs: list[tuple[str, Callable[[Path], None]]]) -> None:
            for round_number in range(rounds):
                rotation = round_number % len(phase_jobs)
                for index, (name, job) in enumerate(phase_jobs[rotation:] + phase_jobs[:rotation]):
                    folder = Path(tmp) / f"{phase}{round_number}-{index}"
                    folder.mkdir()
                    job(folder)

        rounds_of("r", jobs)
        if postgres_jobs:
            postgres_server = PostgresDatabases()
            try:
                rounds_of("pg", postgres_jobs)
                round_trips = postgres_server.round_trips(min(messages, 1000))
                if any(f"postgresql {name}" in samples for name in bench_peers.RUNS):
                    # a run of their own, with every statement logged (which slows it): not timed
                    peer_statements = {name: postgres_server.statements_per_job(runner, min(messages, 500))
                                       for name, runner in bench_peers.RUNS.items()}
            finally:
                postgres_server.stop()
        claim_seconds = {str(rows): measure_claim_history(Path(tmp), rows) for rows in history}
        queue_seconds = measure_claim_queues(Path(tmp), queue_rows)
        enqueue_seconds, parse_seconds = measure_enqueue(Path(tmp))
        memory_kib = measure_memory(Path(tmp), *memory) if memory[0] else []
    # slow handlers beside a producer, and worker threads (bench_slow_work.py): a phase of its own
    slow = bench_slow_work.run(slow_work) if slow_work is not None else None

    median = {name: statistics.median(values) for name, values in samples.items()}
    raw = median["raw"]
    ceiling = raw / 2
    low, high = (str(rows) for rows in history)
    best = max((f"batch_{k}" for k in batch_sizes), key=lambda name: median[name])  # the fastest batched path
    targets = {
        "simple / two-commit ceiling": (median["simple"] / ceiling, ">= 0.85"),
        **{f"batch_{k} / raw commits": (median[f"batch_{k}"] / raw, ">= 2") for k in batch_sizes},
        "bare SQL of the simple path / two-commit ceiling": (median["bare SQL, simple path"] / ceiling, "(reference)"),
        "simple / bare SQL of the simple path": (median["simple"] / median["bare SQL, simple path"], ">= 0.9"),
        **{f"simple / {peer}": (median["simple"] / median[peer], ">= 1.2") for peer in PEERS if with_peers},
        **{f"{best} / {peer}": (median[best] / median[peer], ">= 1.2") for peer in PEERS if with_peers},
        f"claim over {high} / over {low} done rows": (claim_seconds[high] / claim_seconds[low], "<= 1.3"),
        f"claim in 1 of {QUEUES} queues / in a lone queue": (queue_seconds[QUEUES] / queue_seconds[1], "<= 1.3"),
        **{f"workers_{n} / workers_1": (median[f"workers_{n}"] / median["workers_1"], ">= 0.9" if n <= 4 else "(reference)")
           for n in worker_counts if n > 1 and "workers_1" in median},
        **({"postgresql workers_1 / its two-commit ceiling":
            (median["postgresql workers_1"] / (median["postgresql raw"] / 2), ">= 0.8"),
            "postgresql bare SQL of the simple path / its two-commit ceiling":
            (median["postgresql bare SQL, simple path"] / (median["postgresql raw"] / 2), "(reference)"),
            "postgresql workers_1 / bare SQL of the simple path":
            (median["postgresql workers_1"] / median["postgresql bare SQL, simple path"], "(reference)"),
            f"postgresql batch_{PG_BATCH} / postgresql raw":
            (median[f"postgresql batch_{PG_BATCH}"] / median["postgresql raw"], ">= 2"),
            "postgresql round trips per message": (round_trips[0], "<= 5")}
           if "postgresql raw" in median else {}),
        **peer_targets(median),
        **{f"postgresql workers_{n} / postgresql workers_1":
           (median[f"postgresql workers_{n}"] / median["postgresql workers_1"], ">= 2.5" if n == 4 else "(reference)")
           for n in worker_counts if n > 1 and "postgresql workers_1" in median},
        "enqueue of 1,000 lines (ms)": (enqueue_seconds * 1000, "<= 15"),
    }
    if memory_kib:
        targets["worker memory: last / first round"] = (memory_kib[-1] / memory_kib[0], "<= 1.1 (flat)")
    if slow is not None:
        targets.update(slow.pop("targets"))
    return {
        "machine": _machine(),
        "parameters": {"messages": messages, "rounds": rounds, "batch_sizes": list(batch_sizes),
                       "worker_counts": list(worker_counts), "history_rows": list(history),
                       "queue_rows": queue_rows, "queues": QUEUES,
                       "memory_rounds": memory[0], "memory_messages_per_round": memory[1]},
        "seconds": round(time.perf_counter() - started, 1),
        "messages_per_second": {name: round(value, 1) for name, value in median.items()},
        "samples": {name: [round(v, 1) for v in values] for name, values in samples.items()},
        "two_commit_ceiling": round(ceiling, 1),
        "latency_ms": {name: round(statistics.median(values) * 1000, 3) for name, values in latencies.items()},
        "shares": shares,
        "cpu_busy": cpu_busy,
        "claim_microseconds": {rows: round(seconds * 1e6, 1) for rows, seconds in claim_seconds.items()},
        "claim_in_queues_microseconds": {str(count): round(seconds * 1e6, 1)
                                         for count, seconds in queue_seconds.items()},
        "enqueue_1000_ms": round(enqueue_seconds * 1000, 2),
        "enqueue_1000_parse_ms": round(parse_seconds * 1000, 2),
        "memory_kib": memory_kib,
        **({"slow_work": slow} if slow is not None else {}),
        "targets": {name: {"value": round(value, 3), "target": target, "met": _met(value, target)}
                    for name, (value, target) in targets.items()},
        "peers": with_peers,
        "postgresql": ({"server": postgres_server.version, "fsync": "on", "synchronous_commit": "on",
                        "connection": "Unix socket",
                        "round_trips_per_message": round(round_trips[0], 3),
                        "round_trips_by_statement": {kind: round(n, 3) for kind, n in round_trips[1].items()}}
                       if postgres_server is not None
                       else {"skipped": postgres_skipped}),
        "postgresql_peers": (bench_peers.describe(median, peer_statements) if any(f"postgresql {n}" in median for n in bench_peers.RUNS)
                             else {"skipped": postgres_skipped or peers_skipped}),
    }


def peer_targets(median: dict[str, float]) -> dict[str, tuple[float, str]]:
    """queue_core against procrastinate and pgqueuer on PostgreSQL, from the same run.

    One worker (``postgresql workers_1``, one ``work()`` process) against each
    peer one at a time; the batched path against the fastest peer batched.
    """
    if not all(f"postgresql {name}" in median for name in bench_peers.RUNS):
        return {}
    one, batched = median["postgresql workers_1"], median[f"postgresql batch_{PG_BATCH}"]
    best = max(bench_peers.BATCHED, key=lambda name: median[f"postgresql {name}"])
    return {
        **{f"postgresql workers_1 / {name}": (one / median[f"postgresql {name}"], ">= 1.2")
           for name in bench_peers.ONE_AT_A_TIME},
        f"postgresql batch_{PG_BATCH} / {best} (the fastest peer batched)":
            (batched / median[f"postgresql {best}"], ">= 1.2"),
    }


def _met(value: float, target: str) -> bool | None:
    if not target.startswith((">=", "<=")):
        return None  # a reference figure, not a target
    operator, number = target.split()[:2]
    return value >= float(number) if operator == ">=" else value <= float(number)


def _machine() -> dict[str, Any]:
    return {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "system": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "cpus": os.cpu_count(),
        "journal": "WAL", "synchronous": "FULL",
    }


# ------------------------------------------------------------------ report

def markdown(result: dict[str, Any]) -> str:
    rates = result["messages_per_second"]
    raw = rates["raw"]
    samples = result.get("samples", {})
    lines = ["| measurement | messages/s (median) | min – max over rounds | ratio to its engine's raw commits "
             "| latency per message |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, value in rates.items():
        latency = result["latency_ms"].get(name)
        shown = f"{latency:.2f} ms" if latency is not None else ""
        rounds = samples.get(name, [])
        spread = f"{min(rounds):,.0f} – {max(rounds):,.0f}" if len(rounds) > 1 else ""
        own_raw = rates.get("postgresql raw", raw) if name.startswith("postgresql") else raw  # each engine's own limit
        lines.append(f"| {name} | {value:,.0f} | {spread} | {value / own_raw:.2f} | {shown} |")
    server = result.get("postgresql", {})
    if "server" in server:
        lines += ["", f"PostgreSQL {server['server']} on the same machine (fsync and synchronous_commit on, "
                      f"{server['connection']}); the other rows are SQLite {result['machine']['sqlite']}."]
    # The targets stay in results.json (the project's own yardstick); the reader's page shows results.
    return "\n".join(lines) + "\n"


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib  # type: ignore[import-not-found]
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    rates = result["messages_per_second"]
    names = [n for n in rates if n != "raw"]
    values = [rates[n] for n in names]
    peer_names = ("persist", "lite", "huey", "postgresql procrastinate", "postgresql pgqueuer")
    colors = ["#9e9e9e" if n.startswith(peer_names) else "#00897b" if n.startswith("postgresql") else "#90a4ae" if n.startswith(("raw", "bare"))
              else "#3f51b5" for n in names]
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    ax.barh(names[::-1], values[::-1], color=colors[::-1])
    ax.axvline(rates["raw"], color="#e65100", linestyle="--", label=f"raw commits/s ({rates['raw']:,.0f})")
    ax.axvline(result["two_commit_ceiling"], color="#e65100", linestyle=":",
               label=f"two-commit ceiling ({result['two_commit_ceiling']:,.0f})")
    ax.set_xlabel("messages per second (median of the run's rounds)")
    machine = result["machine"]
    ax.set_title(f"WAL, synchronous=FULL; {machine['cpus']} cores; SQLite {machine['sqlite']}; {machine['date']}",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000, help="messages per measurement (max 10000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few messages, one round, no peers")
    parser.add_argument("--no-postgres-peers", dest="postgres_peers", action="store_false",
                        help="leave out procrastinate and pgqueuer (they run on the PostgreSQL server)")
    parser.add_argument("--no-postgres", dest="postgres", action="store_false",
                        help="leave out the PostgreSQL column (it needs the server binaries and psycopg)")
    parser.add_argument("--out", type=Path, help="write results.json, results.md and chart.png here")
    args = parser.parse_args()
    if not 1 <= args.messages <= 10_000:
        parser.error("--messages must be 1..10000 (event ids are E0000..E9999)")
    if args.quick:
        result = run(messages=300, rounds=1, peers=False, postgres_peers=False, history=(1_000, 10_000), memory=(2, 300), queue_rows=2_000,
                     worker_counts=(1, 2), batch_sizes=(16,), postgres=args.postgres,
                     slow_work=bench_slow_work.SMOKE)
    else:
        result = run(messages=args.messages, rounds=args.rounds, postgres=args.postgres,
                     postgres_peers=args.postgres_peers, slow_work=bench_slow_work.FULL)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        (args.out / "results.md").write_text(markdown(result), encoding="utf-8")
        try:
            chart(result, args.out / "chart.png")
        except ImportError:
            print("matplotlib is not installed: no chart (make bench installs it)", file=sys.stderr)
    print(markdown(result))


if __name__ == "__main__":
    main()
