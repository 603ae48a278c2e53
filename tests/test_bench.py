"""The benchmark script runs and reports every measurement (no timing is asserted)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench.py"


def test_bench_reports_ratios_for_every_measurement() -> None:
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.run(events=1010, worker_counts=(1, 2))  # more than one batch
    names = {"per_transaction", "idle_connection_held", "workers_1", "workers_2"}
    assert set(report["messages_per_second"]) == names
    assert set(report["ratio_to_per_transaction"]) == names
    assert report["ratio_to_per_transaction"]["per_transaction"] == 1.0
    assert all(rate > 0 for rate in report["messages_per_second"].values())
