"""A path that is not a queue database is refused, and left exactly as it was."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from queue_core import ModelClock, Store, WrongPath
from queue_core.engines import sqlite as sqlite_engine

from .support import line


def fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def refused(path: Path, code: str, create: bool = True) -> None:
    with pytest.raises(WrongPath) as info:
        Store(path, clock=ModelClock(1000), create=create)
    assert info.value.code == code
    assert str(path) in info.value.message


def test_a_new_file_is_created_and_marked(tmp_path: Path) -> None:
    db = tmp_path / "new.sqlite3"
    Store(db)
    header = db.read_bytes()[:100]
    assert header.startswith(b"SQLite format 3\x00")
    assert header[68:72] == b"QCor"  # application_id
    # user_version = schema version (2 since issue 8: messages.last_detail, receipts in the schema)
    assert int.from_bytes(header[60:64], "big") == sqlite_engine.SCHEMA_VERSION


def test_an_empty_file_becomes_a_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.sqlite3"
    db.touch()
    Store(db).enqueue(line("E0001"))
    assert Store(db, create=False).status().messages == {"ready": 1, "leased": 0, "done": 0, "dead": 0}


def test_a_missing_file_is_not_created_without_create(tmp_path: Path) -> None:
    refused(tmp_path / "missing.sqlite3", "no_database", create=False)
    assert not (tmp_path / "missing.sqlite3").exists()


def test_an_empty_file_is_not_a_queue_without_create(tmp_path: Path) -> None:
    db = tmp_path / "empty.sqlite3"
    db.touch()
    refused(db, "not_a_queue_database", create=False)
    assert db.read_bytes() == b""


def test_a_directory(tmp_path: Path) -> None:
    refused(tmp_path, "not_a_file")


def test_a_missing_parent_directory(tmp_path: Path) -> None:
    refused(tmp_path / "no" / "such" / "q.sqlite3", "cannot_open")
    assert not (tmp_path / "no").exists()


def test_a_text_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("SQLite is nice\n" * 20)
    before = fingerprint(path)
    refused(path, "not_a_queue_database")
    assert fingerprint(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_foreign_sqlite_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE messages (x)")
        conn.commit()
    finally:
        conn.close()
    before = fingerprint(path)
    refused(path, "not_a_queue_database")
    assert fingerprint(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    original = tmp_path / "q.sqlite3"
    Store(original).enqueue(line("E0001"))
    newer = tmp_path / "newer.sqlite3"
    shutil.copy(original, newer)
    conn = sqlite3.connect(newer)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA user_version = 99")
    finally:
        conn.close()
    before = fingerprint(newer)
    refused(newer, "schema_too_new")
    assert fingerprint(newer) == before


def test_two_stores_initialising_one_file_agree(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    first = Store(db)
    second = Store(db)  # already initialised: opens, does not re-create
    first.enqueue(line("E0001"))
    assert second.status().messages == {"ready": 1, "leased": 0, "done": 0, "dead": 0}


@pytest.mark.parametrize("with_wal", [False, True])
def test_a_copy_without_its_wal_file_loses_the_latest_commits(tmp_path: Path, with_wal: bool) -> None:
    # limits.md, "how to lose data", 1: the latest commits live in the -wal file until a
    # checkpoint, so a copy of the database file alone shows a done message back in
    # leased. The negative control copies the -wal file with it and keeps everything.
    db, copy = tmp_path / "queue.sqlite3", tmp_path / "copy" / "queue.sqlite3"
    copy.parent.mkdir()
    with Store(db, clock=ModelClock(1000)) as store:
        store.enqueue(line("E0001"))
        lease = store.claim(30)
        other = sqlite3.connect(db)  # the claim into the database file itself
        assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0  # not busy
        other.close()
        store.complete(lease, lambda tx, message: None)  # in the -wal file only
        assert db.with_name(db.name + "-wal").stat().st_size > 0
        shutil.copyfile(db, copy)  # while the store is open: its WAL is not checkpointed
        if with_wal:
            shutil.copyfile(db.with_name(db.name + "-wal"), copy.with_name(copy.name + "-wal"))
    with Store(copy, clock=ModelClock(1000), create=False) as copied:
        assert copied.message("E0001").state == ("done" if with_wal else "leased")
