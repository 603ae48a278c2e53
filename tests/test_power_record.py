"""The pages' power-cut table: printed from the committed record, saying whether it is this code's.

No FUSE here: the pages print a committed record (``evidence/power-cuts.json``)
and must build anywhere; these tests feed ``page_table`` records made for this
code, for other code, and none at all.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from proof import records
from proof.powercut import CutRun
from proof.powercut_table import NAME, committed_table, page_table

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _record(tmp_path: Path) -> records.Record:
    rows = [CutRun("sqlite OFF", "torn", 1, cuts=3, acknowledged=4000, lost=3700, corruptions=1),
            CutRun("queue FULL", "drop", 1, cuts=100, acknowledged=4321)]
    return records.save_record(NAME, {"seed": 1}, rows, by="scripts/powercut.py --long",
                               seconds=600.4, folder=tmp_path)


def test_the_table_prints_every_row_with_its_losses(tmp_path: Path) -> None:
    text = page_table(_record(tmp_path))
    assert "| sqlite OFF | torn | 3 | 4,000 | 3,700 | 1,233.3 | 0 | 1 |" in text
    assert "| queue FULL | drop | 100 | 4,321 | 0 | 0.0 | 0 | 0 |" in text
    assert "(this code)" in text and "scripts/powercut.py --long" in text


def test_a_record_of_other_code_is_told_apart(tmp_path: Path) -> None:
    stale = replace(_record(tmp_path), fingerprint="0123456789abcdef", commit="f" * 40)
    assert not stale.for_this_code
    text = page_table(stale)
    assert "not this code" in text and "`0123456789abcdef`" in text and "`ffffffffffff`" in text
    assert "(this code)" not in text


def test_without_a_record_the_page_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "COMMITTED", tmp_path)  # an empty evidence folder
    text = committed_table()
    assert text.startswith("No long power-cut record is committed yet")
    assert "|" not in text  # no table, no figure


def test_the_committed_record_if_any_is_the_one_the_pages_print() -> None:
    record = records.load_committed(NAME)
    text = committed_table()
    if record is None:
        assert text.startswith("No long power-cut record")
    else:
        assert record.fingerprint in text and len(record.result) == text.count("\n| ") - 1


@pytest.mark.parametrize("page", ["power-cuts.md", "limits.md"])
def test_the_pages_print_the_committed_table(page: str) -> None:
    source = (DOCS / page).read_text(encoding="utf-8")
    assert "from proof.powercut_table import committed_table" in source
    assert "print(committed_table())" in source


@pytest.mark.parametrize("page", ["power-cuts.md", "limits.md"])
def test_the_pages_block_prints_a_stale_record_as_stale(page: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    import io
    import re

    source = (DOCS / page).read_text(encoding="utf-8")
    blocks = re.findall(r'```python exec="on"\n(.*?)```', source, re.S)
    code = next(b for b in blocks if "committed_table()" in b)
    stale = replace(_record(tmp_path), fingerprint="0123456789abcdef")
    (tmp_path / f"{NAME}.json").write_text(json.dumps(stale.to_dict()), encoding="utf-8")
    monkeypatch.setattr(records, "COMMITTED", tmp_path)
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        exec(compile(code, page, "exec"), {"__name__": "_code_block"})  # noqa: S102
    assert "not this code" in shown.getvalue() and "| queue FULL | drop | 100 |" in shown.getvalue()
