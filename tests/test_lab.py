"""The delivery lab: its stories' end states, its broker's expiry rules, and ``queue-core lab``.

Every story runs on real SQLite files (a broker file and an application file);
only time is modelled (ticks of a ModelClock).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import pytest

from queue_core import ModelClock, receipts
from queue_core.app.lab import (
    CASES,
    LEASE_TICKS,
    STEP_KEYS,
    STORIES,
    App,
    Broker,
    Refused,
    format_text,
    markdown_table,
    run_case,
    run_lab,
    to_json,
)


def last(case: str) -> dict:
    return run_case(case)[-1].to_dict()


def end(case: str, *keys: str) -> tuple:
    final = last(case)
    return tuple(final[key] for key in keys)


# --------------------------------------------------------- the four stories

def test_normal_makes_one_effect() -> None:
    assert end("normal", "queue", "deliveries", "effects", "receipts") == ("settled", 1, 1, 1)


def test_a_repeat_without_a_receipt_doubles_the_effect() -> None:
    assert end("duplicate-effect", "queue", "deliveries", "effects", "receipts") == ("settled", 2, 2, 0)


def test_a_repeat_with_a_receipt_reuses_the_effect() -> None:
    assert end("reuse-effect", "queue", "deliveries", "effects", "receipts") == ("settled", 2, 1, 1)


def test_an_ack_before_the_write_loses_the_work() -> None:
    assert end("early-ack", "queue", "deliveries", "effects", "receipts") == ("settled", 1, 0, 0)


def test_the_repeat_happens_after_the_effect_was_committed_and_before_any_ack() -> None:
    for case in ("duplicate-effect", "reuse-effect"):
        steps = run_case(case)
        stop = next(s for s in steps if "stops before its ACK" in s.event)
        assert (stop.queue, stop.deliveries, stop.effects) == ("in flight", 1, 1)
        second = next(s for s in steps if "receives delivery 2" in s.event)
        assert second.event.startswith(f"t={LEASE_TICKS} ")  # only once the first lease ended


def test_every_step_has_exactly_the_documented_keys() -> None:
    results = run_lab(CASES)
    assert list(results) == list(CASES) and CASES[:4] == STORIES
    for steps in results.values():
        assert steps[0].to_dict() == {"event": steps[0].event, "queue": "ready", "deliveries": 0,
                                      "effects": 0, "receipts": 0}
        for step in steps:
            assert tuple(step.to_dict()) == STEP_KEYS


def test_the_lab_is_deterministic() -> None:
    assert to_json(run_lab()) == to_json(run_lab())


def test_the_lab_uses_real_sqlite_files_and_the_receipts_module(tmp_path: Path) -> None:
    steps = run_case("reuse-effect", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite3", "broker.sqlite3"]
    with closing(sqlite3.connect(tmp_path / "broker.sqlite3")) as conn:
        assert conn.execute("SELECT state, deliveries, lease_until FROM job").fetchone() == ("settled", 2, None)
    with closing(sqlite3.connect(tmp_path / "app.sqlite3")) as conn:
        assert conn.execute("SELECT count(*) FROM ledger").fetchone()[0] == steps[-1].effects == 1
        [receipt] = receipts.all_receipts(conn)
        assert (receipt.tenant, receipt.operation, receipt.effect) == ("north", "order-17:charge", "ledger/1")
        assert conn.execute("SELECT strict FROM pragma_table_list WHERE name = 'receipts'").fetchone() == (1,)


def test_the_lab_refuses_to_reuse_old_files(tmp_path: Path) -> None:
    run_case("normal", tmp_path)
    with pytest.raises(ValueError, match="fresh files"):
        run_case("normal", tmp_path)


def test_the_lab_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run_lab()
    run_case("normal")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_case_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown lab case"):
        run_case("bogus")


# ------------------------------------------------------ the expiry story

@pytest.fixture
def broker(tmp_path: Path) -> tuple[Broker, ModelClock]:
    clock = ModelClock(0)
    return Broker(tmp_path / "broker.sqlite3", clock), clock


def refused(action, code: str) -> None:
    with pytest.raises(Refused) as info:
        action()
    assert info.value.code == code


def test_a_delivery_cannot_be_received_again_before_its_lease_ends(broker) -> None:
    lab, clock = broker
    assert lab.receive() == (1, LEASE_TICKS)
    clock.set(LEASE_TICKS - 1)
    refused(lab.receive, "not_available")
    assert lab.state() == ("in flight", 1)
    clock.set(LEASE_TICKS)
    assert lab.receive() == (2, 2 * LEASE_TICKS)


def test_an_ack_at_the_end_of_the_lease_is_refused(broker) -> None:
    lab, clock = broker
    first, _ = lab.receive()
    clock.set(LEASE_TICKS)
    refused(lambda: lab.ack(first), "delivery_lost")
    assert lab.state() == ("in flight", 1)


def test_an_old_delivery_cannot_ack_after_a_newer_one_was_issued(broker) -> None:
    lab, clock = broker
    first, _ = lab.receive()
    clock.set(LEASE_TICKS)
    second, _ = lab.receive()
    clock.set(LEASE_TICKS + 1)
    refused(lambda: lab.ack(first), "delivery_lost")  # its number is not the newest
    lab.ack(second)
    assert lab.state() == ("settled", 2)
    refused(lambda: lab.ack(second), "delivery_lost")  # settled: nothing left to ACK
    refused(lab.receive, "not_available")


def test_the_expiry_story_shows_each_refusal() -> None:
    events = [step.event for step in run_case("expiry")]
    assert sum("refused, not_available" in e for e in events) == 1
    assert sum("refused, delivery_lost" in e for e in events) == 2
    assert end("expiry", "queue", "deliveries", "effects") == ("settled", 2, 0)


def test_the_lab_app_records_each_charge_once_under_a_receipt(tmp_path: Path) -> None:
    app = App(tmp_path / "app.sqlite3")
    assert "writes the effect" in app.charge(with_receipt=True)
    assert "reuses the effect" in app.charge(with_receipt=True)
    assert app.counts() == (1, 1)
    app.charge(with_receipt=False)
    assert app.counts() == (2, 1)


# ------------------------------------------------------------ the command

def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "queue_core", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_lab_json_reproduces_the_four_end_states(tmp_path: Path) -> None:
    proc = cli("lab", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    data = json.loads(proc.stdout)
    assert list(data) == ["normal", "duplicate-effect", "reuse-effect", "early-ack"]
    ends = {case: data[case][-1] for case in STORIES}
    assert ends["normal"]["effects"] == 1
    assert (ends["duplicate-effect"]["deliveries"], ends["duplicate-effect"]["effects"]) == (2, 2)
    assert tuple(ends["reuse-effect"][k] for k in ("queue", "deliveries", "effects", "receipts")) == \
        ("settled", 2, 1, 1)
    assert (ends["early-ack"]["queue"], ends["early-ack"]["effects"]) == ("settled", 0)
    for steps in data.values():
        assert all(tuple(step) == STEP_KEYS for step in steps)
    assert list(tmp_path.iterdir()) == []  # no database in the working directory


@pytest.mark.parametrize("case", CASES)
def test_lab_one_case(case: str, tmp_path: Path) -> None:
    as_json = json.loads(cli("lab", case, "--json", cwd=tmp_path).stdout)
    assert list(as_json) == [case]
    plain = cli("lab", case, cwd=tmp_path)
    assert plain.returncode == 0
    assert plain.stdout == format_text(run_lab([case]))
    assert plain.stdout.startswith(f"{case}: ")


def test_lab_plain_prints_every_step_of_every_story(tmp_path: Path) -> None:
    proc = cli("lab", cwd=tmp_path)
    assert proc.returncode == 0
    results = run_lab()
    assert proc.stdout == format_text(results)
    for steps in results.values():
        for step in steps:
            assert step.event in proc.stdout


def test_lab_with_an_unknown_case_is_a_usage_error(tmp_path: Path) -> None:
    proc = cli("lab", "bogus", cwd=tmp_path)
    assert proc.returncode == 2 and "usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_markdown_table_has_a_row_per_step() -> None:
    steps = run_case("reuse-effect")
    table = markdown_table(steps).splitlines()
    assert len(table) == 2 + len(steps)
    assert table[-1].endswith("| settled | 2 | 1 | 1 |")
