"""The pages' pause table: printed from the committed record (``evidence/pause.json``), saying whether it is this code's.

No server here: the record is committed by ``scripts/pause.py --record``
(the runs themselves are tests/conformance/test_pause.py and
tests/test_pause_postgres.py); these tests check the committed record is one
the script makes now, with nothing wrong, and that the pages print it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from proof import records
from proof.pause_table import HELD, NAME, committed_table, page_table, stall_line

ROOT = Path(__file__).resolve().parent.parent
PAGES = {"fencing.md": "committed_table(", "long-work.md": "committed_table(", "limits.md": "stall_line("}


def script() -> Any:
    spec = importlib.util.spec_from_file_location("pause_script", ROOT / "scripts" / "pause.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed() -> records.Record:
    record = records.load_committed(NAME)
    assert record is not None, "evidence/pause.json is missing: run scripts/pause.py --record"
    return record


def test_the_committed_record_is_the_scripts_current_run_and_found_nothing_wrong() -> None:
    record, pause_script = committed(), script()
    assert record.params == json.loads(json.dumps(pause_script.PARAMS))
    assert len(record.result["runs"]) == len(record.params["runs"])
    assert record.result["wrong"] == [] == pause_script.verdicts(record.result["runs"])
    assert record.by == "scripts/pause.py --record"


def test_the_verdicts_catch_a_doubled_effect_and_a_message_left_leased() -> None:
    # The negative control of the check above: a run with two effects, or a lease left, is wrong.
    run = dict(committed().result["runs"][0])
    assert script().verdicts([{**run, "effects": {"E0001": 2, "E0002": 1}}])
    assert script().verdicts([{**run, "final": {"E0001": ["leased", 2]}}])


def test_the_table_prints_each_run_and_says_whose_code() -> None:
    record = committed()
    text = page_table(record)
    assert text.count("\n| ") - 2 == len(record.result["runs"])  # header, rule, then one row per run
    assert record.fingerprint in text and "`lease_lost`" in text and "`database_busy`" in text
    stale = replace(record, fingerprint="0123456789abcdef")
    assert "not this code" in page_table(stale) and "(this code)" not in page_table(stale)
    held = next(r for r in record.result["runs"] if r["engine"] == "sqlite" and "held" in r["shape"])
    assert held["waiter"]["waiting_at_continue"] and held["pause_seconds"] >= HELD
    assert f"ended {held['waiter']['seconds']:.1f} s later, after a {held['pause_seconds']:.1f} s pause" \
        in stall_line(record)


def test_without_a_record_the_pages_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "COMMITTED", tmp_path)
    assert committed_table().startswith("No pause record") and "|" not in committed_table()
    assert stall_line().startswith("No pause record")


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_pages_print_the_committed_record(page: str) -> None:
    source = (ROOT / "docs" / page).read_text(encoding="utf-8")
    blocks = re.findall(r'```python exec="on"\n(.*?)```', source, re.S)
    code = next(b for b in blocks if PAGES[page] in b)
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        exec(compile(code, page, "exec"), {"__name__": "_code_block"})  # noqa: S102
    printed = shown.getvalue()
    record = committed()
    if PAGES[page] == "stall_line(":
        assert printed == stall_line(record) + "\n"
    else:
        assert record.fingerprint in printed and "`lease_lost`" in printed
