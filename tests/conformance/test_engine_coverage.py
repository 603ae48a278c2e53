"""The conformance suite has no blind spot: every test of this folder that reaches
the ``engine`` fixture runs on both engines, unless it opted out explicitly
(``@pytest.mark.one_engine``, or taking ``db``, the SQLite file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .coverage import ENGINES, Case, blind_spots

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def collected_cases(tmp_path: Path) -> list[Case]:
    """Every item of tests/conformance/ as pytest collects it, in a fresh interpreter."""
    target = tmp_path / "cases.json"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.conformance.coverage", str(HERE.relative_to(ROOT))],
        cwd=ROOT, env={**os.environ, "QUEUE_CORE_ENGINE_CASES": str(target)},
        capture_output=True, text=True, timeout=100,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [Case(**fields) for fields in json.loads(target.read_text(encoding="utf-8"))]


def test_every_conformance_test_that_reaches_an_engine_runs_on_both(tmp_path: Path) -> None:
    cases = collected_cases(tmp_path)
    modules = {c.function.split("::")[0].rsplit("/", 1)[-1] for c in cases}
    assert {"test_protocol.py", "test_cli.py", "test_statement_failed.py"} <= modules, modules
    assert blind_spots(cases) == []
    # and the suite does run on PostgreSQL: not a guard that passes because nothing is parametrized
    assert sum(c.engine == "postgresql" for c in cases) >= 150


def _case(function: str, engine: str | None, **flags: bool) -> Case:
    return Case(function=function, uses_engine=flags.get("uses_engine", True), engine=engine,
                opted_out=flags.get("opted_out", False), takes_sqlite_file=flags.get("takes_sqlite_file", False))


@pytest.mark.one_engine
def test_a_test_on_one_engine_without_the_opt_out_is_reported() -> None:  # negative controls
    both = [_case("tests/conformance/test_a.py::test_both", e) for e in ENGINES]
    unparametrized = _case("tests/conformance/test_a.py::test_sqlite_only", None)  # the default "sqlite"
    own_list = _case("tests/conformance/test_a.py::test_own_list", "sqlite")  # parametrize("engine", ["sqlite"])
    found = blind_spots([*both, unparametrized, own_list])
    assert [line.split(" ")[0] for line in found] == [
        "tests/conformance/test_a.py::test_own_list", "tests/conformance/test_a.py::test_sqlite_only"]
    assert all("does not run on postgresql" in line for line in found)
    # an explicit opt-out, a test of the SQLite file, and a test that takes no engine are no blind spot
    assert blind_spots([
        _case("t.py::test_refused_before_any_transaction", None, opted_out=True),
        _case("t.py::test_of_the_file", None, takes_sqlite_file=True),
        _case("t.py::test_pure_value", None, uses_engine=False),
    ]) == []
