"""Reading without writing: ``status``, ``list``, ``metrics``, ``dead`` and ``queues`` on an
SQLite database this process may only read (a read-only bind mount, even for root; a
read-only file, folder, or both, for the user ``nobody``).

The CLI opens such a database with ``Store.open_read_only`` (``mode=ro``, or
``immutable`` where SQLite could not read it otherwise), says so on stderr, and
prints what an ordinary store prints; a write still fails with ``read_only``;
an older schema is refused with ``needs_migration``. Nothing changes the file.
Engine-agnostic behaviour of ``open_read_only`` is in
``tests/conformance/test_read_only_store.py``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from queue_core import ModelClock, StorageError, Store

from .test_storage_faults import (  # noqa: F401  (fixtures)
    NOW,
    assert_clean_failure,
    build_queue,
    cli,
    fingerprint,
    fixed_lease_token,
    line,
    logical,
    mounts,
    nobody_dir,
)

READ_COMMANDS = [["status", "--json"], ["list", "--json"], ["metrics"], ["dead", "--json"], ["queues", "--json"]]
SAID = "queue-core: read-only: "


def outputs(db: Path, as_nobody: bool = False) -> dict[str, str]:
    """Each read command's stdout; each must succeed."""
    found = {}
    for command in READ_COMMANDS:
        proc = cli(db, *command, as_nobody=as_nobody)
        assert proc.returncode == 0, (command, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr
        found[command[0]] = proc.stdout
    return found


def test_the_read_commands_work_on_a_read_only_file_system(tmp_path: Path, mounts) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "q.sqlite3"
    build_queue(db)
    expected = outputs(db)  # the negative control: writable, and no "read-only" line
    assert all(SAID not in cli(db, *c).stderr for c in READ_COMMANDS)
    before, print_before = logical(db), fingerprint(db)
    mounts("bind-ro", folder)
    for command in READ_COMMANDS:
        proc = cli(db, *command)
        assert proc.returncode == 0, (command, proc.stderr)
        assert proc.stderr == f"{SAID}{db} is on a read-only file system; reading without writing\n"
        assert proc.stdout == expected[command[0]], command
    assert json.loads(outputs(db)["status"])["messages"] == {"ready": 3, "leased": 1, "done": 1, "dead": 1}
    assert_clean_failure(cli(db, "redrive", "E0000"), "read_only")  # a write still fails
    assert fingerprint(db) == print_before
    assert logical(db) == before


def test_open_read_only_on_a_read_only_file_system_reads_and_refuses_writes(tmp_path: Path, mounts) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "q.sqlite3"
    build_queue(db)
    print_before = fingerprint(db)
    mounts("bind-ro", folder)
    with Store.open_read_only(db, clock=ModelClock(NOW)) as store:
        assert store.status().count("dead") == 1
        assert [m.event_id for m in store.dead_letters()] == ["E0000"]
        with pytest.raises(StorageError) as info:
            store.redrive(["E0000"])
        assert info.value.code == "read_only" and "opened read-only" in info.value.message
        with pytest.raises(StorageError) as info:
            store.enqueue(line("E0100"))
        assert info.value.code == "read_only"
    assert fingerprint(db) == print_before


@pytest.mark.parametrize("file_mode, dir_mode, reason", [
    (0o444, 0o555, "is read-only for this process"),
    (0o666, 0o555, "the folder of"),
    (0o444, 0o777, "is read-only for this process"),
], ids=["file-and-folder-read-only", "folder-read-only", "file-read-only"])
def test_the_read_commands_work_for_a_user_who_may_only_read(nobody_dir: Path, file_mode: int,
                                                           dir_mode: int, reason: str) -> None:
    folder = nobody_dir / "queue"
    folder.mkdir()
    db = folder / "q.sqlite3"
    build_queue(db)
    expected = outputs(db)
    db.chmod(file_mode)
    folder.chmod(dir_mode)
    before, print_before = logical(db), fingerprint(db)
    for command in READ_COMMANDS:
        proc = cli(db, *command, as_nobody=True)
        assert proc.returncode == 0, (command, proc.stderr)
        assert proc.stderr.startswith(SAID) and reason in proc.stderr, proc.stderr
        assert proc.stdout == expected[command[0]], command
    assert_clean_failure(cli(db, "redrive", "E0000", as_nobody=True), "read_only")
    assert db.read_bytes() == print_before[0] and db.stat().st_mtime_ns == print_before[1]
    assert logical(db) == before


def test_a_file_that_needs_a_migration_is_refused_read_only(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    build_queue(db)
    conn = sqlite3.connect(db)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.execute(f"PRAGMA user_version = {version - 1}")  # as an older queue_core left it
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StorageError) as info:
        Store.open_read_only(db)
    assert info.value.code == "needs_migration" and "cannot migrate" in info.value.message
    assert db.read_bytes() == before
