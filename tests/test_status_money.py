"""``status`` shows money only where the reference application is installed.

``queue-core enqueue`` creates the queue and nothing of the ledger; ``work``
with the ledger's handler (the default) installs its ``effects`` table. Until
then, and in a database whose worker runs a handler of its own, ``status``
shows the queue's figures alone: no money lines, no ``effects`` field.
"""

from __future__ import annotations

import io
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from queue_core import ModelClock, Store, ledger
from queue_core.cli import main

DEMO = (Path(__file__).resolve().parent.parent / "snippets" / "demo.jsonl").read_text(encoding="utf-8")
MONEY_LINES = ("effects: ", "category  total_cents")


def cli(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    status = main(list(args), stdout=out, stderr=err)
    assert status == 0, (args, status, err.getvalue())
    return out.getvalue()


def tables(db: Path) -> set[str]:
    with closing(sqlite3.connect(db)) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "batch.jsonl").write_text(DEMO, encoding="utf-8")
    return tmp_path / "q.sqlite3"


def test_enqueue_creates_the_queue_and_not_the_ledger_s_table(db: Path) -> None:
    cli("--db", str(db), "--now", "1000", "enqueue", "batch.jsonl")
    assert "messages" in tables(db) and "effects" not in tables(db)
    text = cli("--db", str(db), "--now", "1000", "status")
    assert text.startswith("state    messages\nready           4\n")
    assert not any(line.startswith(MONEY_LINES) for line in text.splitlines()), text
    assert text.endswith("expired leases taken over: 0, pruned payloads: 0\n")
    snap = json.loads(cli("--db", str(db), "--now", "1000", "status", "--json"))
    assert list(snap) == ["messages", "metrics"]
    assert "effects" not in tables(db)  # status only reads


def test_work_with_the_ledger_installs_it_and_status_then_shows_the_money(db: Path) -> None:
    cli("--db", str(db), "--now", "1000", "enqueue", "batch.jsonl")
    cli("--db", str(db), "--now", "1000", "work", "--quiet")
    assert "effects" in tables(db)
    text = cli("--db", str(db), "--now", "1000", "status")
    assert text.endswith(
        "\neffects: 3, total_cents: 17000\ncategory  total_cents\nbook            15000\npen              2000\n")
    snap = json.loads(cli("--db", str(db), "--now", "1000", "status", "--json"))
    assert list(snap) == ["messages", "effects", "metrics"]
    assert snap["effects"] == {"count": 3, "total_cents": 17000, "by_category": {"book": 15000, "pen": 2000}}


def test_a_worker_with_its_own_handler_leaves_status_without_money(db: Path, tmp_path: Path) -> None:
    (tmp_path / "status_money_handlers.py").write_text("def noop(tx, message):\n    pass\n", encoding="utf-8")
    cli("--db", str(db), "--now", "1000", "enqueue", "batch.jsonl")
    cli("--db", str(db), "--now", "1000", "work", "--quiet", "--handler", "status_money_handlers:noop")
    assert "effects" not in tables(db)
    text = cli("--db", str(db), "--now", "1000", "status")
    assert "done            4" in text and not any(line.startswith(MONEY_LINES) for line in text.splitlines())
    assert "effects" not in json.loads(cli("--db", str(db), "--now", "1000", "status", "--json"))


def test_installed_says_whether_the_ledger_is_in_the_database(tmp_path: Path) -> None:
    with Store(tmp_path / "q.sqlite3", clock=ModelClock(1000)) as store:
        assert ledger.installed(store) is False
        assert ledger.totals(store).to_dict() == {"count": 0, "total_cents": 0, "by_category": {}}
        ledger.install(store)
        assert ledger.installed(store) is True
        assert store.read(ledger.installed_tx) is True
