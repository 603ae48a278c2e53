"""The product without its app: ``import queue_core`` loads the queue, not the reference application.

The ledger, the demo and the lab (``queue_core.app``) and the Prometheus
exposition are imported on first use of their names (PEP 562's module
``__getattr__``), so a program that only queues never loads them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import queue_core

ROOT = Path(__file__).resolve().parent.parent
ON_FIRST_USE = ("ledger", "Handler", "Effect", "Totals", "Report", "DEFAULT_CATEGORIES", "prometheus")


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_import_queue_core_loads_neither_the_app_nor_prometheus() -> None:
    proc = run(
        "import sys, queue_core\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('queue_core.app', 'queue_core.prometheus')))\n"
        "assert not loaded, loaded\n"
        "from queue_core import Handler, ledger\n"
        "print('ok')\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


@pytest.mark.parametrize("spelling, loads", [
    ("from queue_core import ledger", "queue_core.app.ledger"),
    ("import queue_core; queue_core.ledger.install", "queue_core.app.ledger"),
    ("from queue_core import Handler", "queue_core.app.ledger"),
    ("import queue_core; queue_core.prometheus.exposition", "queue_core.prometheus"),
])
def test_using_a_name_of_the_app_does_load_it(spelling: str, loads: str) -> None:
    # the reverse control: the check above can see a loaded module
    proc = run(f"import sys\n{spelling}\nassert {loads!r} in sys.modules\nprint('ok')\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"


def test_the_names_stay_public_and_are_the_app_s_own_objects() -> None:
    from queue_core.app import ledger
    from queue_core import prometheus

    for name in ON_FIRST_USE:
        assert name in queue_core.__all__ and name in dir(queue_core), name
    assert queue_core.ledger is ledger and queue_core.prometheus is prometheus
    assert queue_core.Handler is ledger.Handler and queue_core.Report is ledger.Report
    assert queue_core.DEFAULT_CATEGORIES is ledger.DEFAULT_CATEGORIES


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        getattr(queue_core, "nothing_here")
    proc = run("from queue_core import nothing_here")
    assert proc.returncode == 1 and "ImportError" in proc.stderr
