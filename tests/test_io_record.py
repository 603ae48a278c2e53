"""The I/O-error sweep's table and verdict, without FUSE: from rows made here and the committed record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proof import records
from proof.ioerr_table import NAME, committed_table, table_lines, verdict


def _row(fault: str, *, lost: int = 0, violations: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"fault": fault, "phase": "work", "via": "api", "runs": 12, "fired": 12,
            "errors_said": 9, "acknowledged": 30, "lost": lost, "violations": list(violations)}


def test_the_verdict_wants_no_loss_from_a_fault_and_a_loss_from_each_control() -> None:
    good = [_row("fsync EIO once"), _row("fsync EIO once (wrapper ignores it)", lost=5),
            _row("fsync EIO always, then the disk recovers, no restart", lost=25,
                 violations=("effect of E0001 without a done message (ready)",))]
    assert verdict(good) == []
    # negative controls of the verdict itself: a loss under a fault, a control that lost nothing
    bad = [_row("write EIO once", lost=1), _row("fsync EIO once (wrapper ignores it)"),
           _row("write ENOSPC always", violations=("E0009 is stored but was never sent",))]
    wrong = verdict(bad)
    assert len(wrong) == 3 and "1 lost" in wrong[0] and "lost nothing" in wrong[1], wrong


def test_the_table_prints_each_row(tmp_path: Path) -> None:
    record = records.save_record(NAME, {"points": 12, "seed": 1}, [_row("write EIO once")],
                                 by="scripts/ioerr.py --long", seconds=3.0, folder=tmp_path)
    lines = table_lines(record)
    assert "| write EIO once | work | api | 12 | 12 | 9 | 30 | 0 | 0 |" in lines
    assert "counted points 1 to 12" in lines[0] and "(this code)" in lines[0]


def test_the_committed_record_if_any_passes_its_verdict_and_is_printed() -> None:
    record = records.load_committed(NAME)
    text = committed_table()
    if record is None:
        assert text.startswith("No long I/O-error record")
        return
    assert verdict(record.result) == []
    assert len(record.result) == text.count("\n| ") - 1
