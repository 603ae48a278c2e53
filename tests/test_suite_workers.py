"""The suite's workers keep a shared fixture's tests together (tests/conftest.py: xdist_group).

`make test` runs on several pytest-xdist workers with ``--dist loadgroup``. If the
grouping stops working, nothing fails: each worker silently makes the module's
shared run again (a chaos run, a crash matrix, a site build). That happened once,
with pytest 9.2 (pytest-dev/pytest-xdist#1386), so this test runs a small suite on
two workers and counts how often its module fixture was made.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import xdist_group

ROOT = Path(__file__).resolve().parent.parent
PROBE = "QUEUE_CORE_GROUP_PROBE"  # where the probe's fixture writes one line per making


@pytest.fixture(scope="module")
def made_once() -> str:
    record = os.environ.get(PROBE)
    if record:
        with open(record, "a", encoding="utf-8") as out:
            out.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\n")
    return "made"


@pytest.mark.parametrize("n", range(6))
def test_the_probe_uses_a_module_fixture(made_once: str, n: int) -> None:
    assert made_once == "made"


@pytest.mark.parametrize("n", range(6))
def test_the_probe_has_ungrouped_tests_too(n: int) -> None:
    assert n in range(6)


def test_a_module_fixture_is_made_once_on_two_workers(tmp_path: Path) -> None:
    record = tmp_path / "made.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
         "-v", f"{Path(__file__).relative_to(ROOT)}", "-k", "probe"],
        cwd=ROOT, env={**os.environ, PROBE: str(record)}, capture_output=True, text=True, timeout=110)
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("[gw")}
    assert workers == {"[gw0]", "[gw1]"}, result.stdout  # both workers ran tests of the probe
    made = record.read_text("utf-8").split()
    assert len(made) == 1, f"the module fixture was made on {made}: the tests of its group were split"


def test_the_group_is_the_module_of_the_shared_fixture(request: pytest.FixtureRequest) -> None:
    own = [item for item in request.session.items if item.nodeid.split("@")[0].split("::")[0].endswith(
        "test_suite_workers.py")]
    groups = {item.name: xdist_group(item) for item in own}
    assert {groups[f"test_the_probe_uses_a_module_fixture[{n}]"] for n in range(6)} == {"tests/test_suite_workers.py"}
    assert {groups[f"test_the_probe_has_ungrouped_tests_too[{n}]"] for n in range(6)} == {None}
