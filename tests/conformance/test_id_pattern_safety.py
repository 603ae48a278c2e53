"""Id patterns that can backtrack catastrophically are refused when a queue is created.

``queues.backtracking_risk`` is a static check of the parsed pattern (a pure
function: ``one_engine``); ``create_queue`` and ``queue-core create`` refuse
with ``id_pattern_unsafe`` and write nothing, on both engines. The worst time
of an accepted pattern on an id of the maximum length is measured by
``scripts/id_pattern_timing.py``, never asserted here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import InvalidQueue, Store
from queue_core.queues import TEACHING_ID_PATTERN, backtracking_risk

UNSAFE = {
    "(a+)+$": "a repeat inside a repeat",
    "(a*)*": "a repeat inside a repeat",
    "(.*a){12}": "a repeat inside a repeat",
    r"(\w+\s?)+$": "a repeat inside a repeat",
    "(x+x+)+y": "a repeat inside a repeat",
    "(a{1,10}){1,20}": "a repeat inside a repeat",
    "((ab)*)+": "a repeat inside a repeat",
    "(a|a)*": "a repeated alternation whose branches match alike",
    "(a|.)*x": "a repeated alternation whose branches",
    "a*a*a*b": "long repeats side by side",
    r"\w+\w+\w+x": "long repeats side by side",
    "(.*)(.*)(.*)z": "long repeats side by side",
}
SAFE = [
    TEACHING_ID_PATTERN,
    "[a-z0-9-]{1,64}",
    "order-[0-9]+",
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "[0-9a-fA-F]{32}",
    "([0-9]{3}-){2}[0-9]{4}",
    "(a|b)*c",
    "(a|ab)*c",
    ".*.*a",
    "[a-z]+-[a-z]+-[a-z]+-[0-9]+",
    "(?:inv|ord)-[0-9]{1,12}",
]


@pytest.mark.one_engine
@pytest.mark.parametrize("pattern, why", UNSAFE.items(), ids=UNSAFE.keys())
def test_a_pattern_that_can_backtrack_catastrophically_is_named(pattern: str, why: str) -> None:
    found = backtracking_risk(pattern)
    assert found is not None and found.startswith(why), (pattern, found)


@pytest.mark.one_engine
@pytest.mark.parametrize("pattern", SAFE)
def test_an_ordinary_pattern_is_accepted(pattern: str) -> None:
    assert backtracking_risk(pattern) is None


def test_create_queue_refuses_an_unsafe_pattern_and_writes_nothing(store: Store) -> None:
    with pytest.raises(InvalidQueue) as info:
        store.create_queue("emails", id_pattern="(a+)+$")
    assert info.value.code == "id_pattern_unsafe"
    assert "'(a+)+$'" in info.value.message and "a repeat inside a repeat" in info.value.message
    assert store.queue_settings("emails") is None
    # the negative control: a safe pattern on the same name is created
    assert store.create_queue("emails", id_pattern="[a-z0-9-]{1,64}").id_pattern == "[a-z0-9-]{1,64}"


def test_queue_core_create_refuses_an_unsafe_pattern(store: Store, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "queue_core", "--db", str(store.target), "create", "emails",
                           "--id-pattern", "(a+)+$"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("queue-core: id_pattern_unsafe: the id pattern '(a+)+$'"), proc.stderr
    assert store.queue_settings("emails") is None
