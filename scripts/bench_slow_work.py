"""Slow work beside the queue: what a producer waits, and what threads of one worker buy (SQLite).

    python scripts/bench_slow_work.py --quick    # about a minute
    python scripts/bench_slow_work.py            # what make bench runs (bench.py)

Three measurements, each verified:

* ``producer``: a worker process runs handlers that take ``SLOW_SECONDS``
  (a stand-in for an SMTP call) while this process sends one event every
  ``SEND_EVERY`` seconds; each ``send()``'s latency is timed. Once with a
  plain handler (the slow call inside the completion's transaction, which
  holds SQLite's write lock) and once with a ``LongHandler`` (the slow call in
  ``prepare``, outside any transaction). Every send must be accepted.
* ``threads``: ``work(concurrency=8)`` with a ``LongHandler`` whose
  ``prepare`` takes ``STEP_SECONDS``: messages per second, every message done
  once with one effect.
* ``short handler, N threads``: the ledger's handler (one INSERT) with
  ``concurrency`` 1 and N: their ratio says what the threads cost when there
  is nothing slow to overlap (the writes take turns).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import NOW, fresh_queue, timed, verify_queue  # noqa: E402
from queue_core import Handler, LongHandler, ModelClock, Store, work  # noqa: E402

SLOW_SECONDS = 2.0  # the producer measurement's handler: an SMTP call
STEP_SECONDS = 0.5  # the threads measurement's prepare step
SEND_EVERY = 0.05  # the producer's pace
THREADS = 8

# The worker of the producer measurement: its own process, as in production.
# argv: database, plain|long, slow seconds. It works until it is killed.
SLOW_WORKER = """
import sys, time
from queue_core import LongHandler, Store, work

def plain(tx, message):
    time.sleep(float(sys.argv[3]))  # the slow call, inside the transaction

def call(message):
    time.sleep(float(sys.argv[3]))  # the slow call, outside any transaction

long = LongHandler(call, lambda tx, message, result: None)
with Store(sys.argv[1], create=False) as store:
    handler = plain if sys.argv[2] == "plain" else long
    work(store, handler, forever=True, poll_seconds=0.05)
"""


@dataclass(frozen=True)
class Settings:
    """How much of each measurement to run."""

    producer_seconds: float  # how long the producer sends, per handler shape
    thread_messages: int  # messages for the 8 threads' slow steps
    short_messages: int  # messages for the short handler, per thread count
    # rounds of the short-handler comparison: 1 and N threads back to back in each,
    # the median of the rounds' ratios (this disk's commit rate drifts between rounds)
    rounds: int


FULL = Settings(producer_seconds=20.0, thread_messages=160, short_messages=2000, rounds=5)
QUICK = Settings(producer_seconds=8.0, thread_messages=64, short_messages=600, rounds=3)
SMOKE = Settings(producer_seconds=3.0, thread_messages=16, short_messages=300, rounds=1)  # bench.py --quick


def measure_producer(folder: Path, shape: str, seconds: float) -> dict[str, float]:
    """A producer's send() latencies (ms) while a worker runs ``SLOW_SECONDS`` handlers of ``shape``."""
    path = fresh_queue(folder, f"producer-{shape}", 100)  # more than the worker can finish
    worker = subprocess.Popen([sys.executable, "-c", SLOW_WORKER, str(path), shape, str(SLOW_SECONDS)])
    latencies: list[float] = []
    try:
        with Store(path, create=False) as store:
            deadline = time.monotonic() + 60
            while store.status().count("leased") == 0:  # the worker holds a message: its handler runs
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit(f"producer-{shape}: the worker never claimed")
                time.sleep(0.01)
            ends = time.monotonic() + seconds
            n = 5000
            while time.monotonic() < ends:
                with timed() as took:
                    result = store.send(f"E{n:04d}", {"category": "book", "amount_cents": 7})
                if result.accepted != 1:
                    raise SystemExit(f"producer-{shape}: E{n:04d} was not accepted: {result}")
                latencies.append(took[0])
                n += 1
                time.sleep(SEND_EVERY)
    finally:
        worker.kill()
        worker.wait()
    ordered = sorted(latencies)
    return {
        "sends": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[math.ceil(0.99 * len(ordered)) - 1] * 1000, 2),  # nearest rank
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def measure_threads(folder: Path, messages: int) -> float:
    """Messages per second of ``THREADS`` threads whose slow step takes ``STEP_SECONDS``."""
    path = fresh_queue(folder, "threads-slow", messages)
    ledger_handler = Handler()

    def call(message: Any) -> None:
        time.sleep(STEP_SECONDS)

    handler = LongHandler(call, lambda tx, message, result: ledger_handler(tx, message))
    with Store(path, clock=ModelClock(NOW), create=False) as store:
        with timed() as seconds:
            summary = work(store, handler, concurrency=THREADS)
    if summary.done != messages:
        raise SystemExit(f"threads: {summary}")
    verify_queue(path, messages)
    return messages / seconds[0]


def measure_short(folder: Path, messages: int, threads: int) -> float:
    """Messages per second of the ledger's short handler with ``threads`` threads."""
    path = fresh_queue(folder, f"short-{threads}-{time.monotonic_ns()}", messages)
    with Store(path, clock=ModelClock(NOW), create=False) as store:
        with timed() as seconds:
            summary = work(store, Handler(), lease_seconds=600, concurrency=threads)
    if summary.done != messages:
        raise SystemExit(f"short handler, {threads} threads: {summary}")
    verify_queue(path, messages)
    return messages / seconds[0]


def run(settings: Settings) -> dict[str, Any]:
    """Every measurement of this section; figures and the targets they are held to."""
    with tempfile.TemporaryDirectory(prefix="queue-core-slow-") as tmp:
        folder = Path(tmp)
        producer = {shape: measure_producer(folder, shape, settings.producer_seconds)
                    for shape in ("plain", "long")}
        threads_rate = measure_threads(folder, settings.thread_messages)
        short: dict[int, list[float]] = {1: [], THREADS: []}
        for round_number in range(settings.rounds):
            order = (1, THREADS) if round_number % 2 == 0 else (THREADS, 1)
            for count in order:
                short[count].append(measure_short(folder, settings.short_messages, count))
    one, many = (statistics.median(short[n]) for n in (1, THREADS))
    ratio = statistics.median(m / o for m, o in zip(short[THREADS], short[1]))
    section = {
        "slow_seconds": SLOW_SECONDS, "step_seconds": STEP_SECONDS, "threads": THREADS,
        "settings": settings.__dict__,
        "producer": producer,
        "threads_messages_per_second": round(threads_rate, 2),
        "short_messages_per_second": {"1": round(one, 1), str(THREADS): round(many, 1)},
        "short_samples": {str(n): [round(v, 1) for v in values] for n, values in short.items()},
        "target_names": [],  # filled below: the page lists these of the run's targets
        "targets": {
            f"send p99 beside {SLOW_SECONDS:g}-s plain handlers (ms)": (producer["plain"]["p99_ms"], "(reference)"),
            f"send p99 beside {SLOW_SECONDS:g}-s LongHandler steps (ms)": (producer["long"]["p99_ms"], "<= 50"),
            f"{THREADS} threads, {STEP_SECONDS:g}-s slow steps (msg/s)": (threads_rate, ">= 12"),
            f"short handler: {THREADS} threads / 1 thread": (ratio, ">= 0.9"),
        },
    }
    section["target_names"] = list(section["targets"])
    return section


def markdown(section: dict[str, Any]) -> str:
    """The section as a Markdown table (the performance page prints the same from results.json)."""
    lines = ["| measurement | value | target |", "| --- | ---: | --- |"]
    for name, (value, target) in section["targets"].items():
        lines.append(f"| {name} | {value:,.2f} | {target} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, one round (about a minute)")
    parser.add_argument("--json", action="store_true", help="print the whole section as JSON")
    args = parser.parse_args()
    section = run(QUICK if args.quick else FULL)
    print(json.dumps(section, indent=2) if args.json else markdown(section))


if __name__ == "__main__":
    main()
