"""Storage faults: a full disk, a read-only database, a lock held past the timeout,
a file that is not a queue database, a database from a newer schema version.

Each must give a clear error with a stable code, through the Python API and
through the CLI (exit status, one line on stderr, no traceback), with nothing
half-written: afterwards the database is logically identical (every table,
every row, the schema and the header pragmas) and, where nothing may touch it,
the file is byte-identical with the same mtime.

The faults are real where this machine allows it: a small tmpfs that really
fills up, a read-only bind mount (read-only even for root), the CLI run as
``nobody`` on files it may not write, a lock held by another process. Tests
that need ``mount`` or ``setpriv`` are skipped where those are not permitted.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    Handler,
    Lease,
    ModelClock,
    StorageError,
    Store,
    WrongPath,
    ledger,
)
from queue_core.engines import sqlite as sqlite_engine
from queue_core.engines.sqlite import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parent.parent
NOW = 1000
EXIT = {"disk_full": 1, "read_only": 1, "database_busy": 1, "not_a_queue_database": 2, "schema_too_new": 2}
# The lease that build_queue leaves open on E0003 (deterministic: model clock, first
# claim, and the claim's random token fixed).
LEASE = Lease("E0003", generation=1, attempt=1, lease_until=NOW + 100, token=4242)


# ----------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def fixed_lease_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every claim here draws LEASE's token: a file after an operation is compared
    with the same operation's result on a copy, value for value."""
    monkeypatch.setattr("queue_core.claims.new_lease_token", lambda: LEASE.token)



def line(event_id: str, **payload: Any) -> str:
    return json.dumps({"event_id": event_id, "payload": payload or {"category": "book", "amount_cents": 100}})


def build_queue(path: Path) -> None:
    """A queue with a message in every state, an effect and an open lease; all connections closed."""
    with Store(path, clock=ModelClock(NOW)) as store:
        ledger.install(store)  # the reference application's effects table, as the CLI installs it
        store.enqueue("\n".join([line("E0000", category="toy", amount_cents=3000)]
                                + [line(f"E{n:04d}", category="book", amount_cents=100 * n) for n in range(1, 6)]))
        store.complete(store.claim(100), Handler())  # E0000: dead (toy)
        store.complete(store.claim(100), Handler())  # E0001: done, effect 100
        store.fail(store.claim(100), "flaky")  # E0002: ready again at 1001
        lease = store.claim(100)
        assert lease == LEASE and lease.token == LEASE.token  # E0003: leased until 1100
    # The store is closed: its last connection checkpointed everything into one file.
    assert not path.with_name(path.name + "-wal").exists()


def once(db: Path, operation: Callable[[Store], Any], **options: Any) -> Any:
    """Run ``operation`` on a store of its own and close it, whatever happens (nothing stays open)."""
    with Store(db, clock=ModelClock(NOW), **{"create": False, **options}) as store:
        return operation(store)


def big_batch(first: int = 100, count: int = 40) -> str:
    return "\n".join(line(f"E{n:04d}", category="pen", amount_cents=n, pad="p" * 2000)
                     for n in range(first, first + count))


# Every protocol operation, as the Python API calls it.
OPERATIONS: dict[str, Callable[[Store], Any]] = {
    "enqueue_big": lambda s: s.enqueue(big_batch()),
    "enqueue_one": lambda s: s.enqueue(line("E0050")),
    "claim": lambda s: s.claim(100),
    "complete": lambda s: s.complete(LEASE, Handler()),
    "fail": lambda s: s.fail(LEASE, "flaky"),
    "redrive": lambda s: s.redrive(["E0000"]),
    "extend": lambda s: s.extend(LEASE, 300),
}
WRITES = list(OPERATIONS)
READS: dict[str, Callable[[Store], Any]] = {
    "status": lambda s: s.status(),
    "report": lambda s: ledger.report(s),
    "messages": lambda s: s.messages(),
    "dead_letters": lambda s: s.dead_letters(),
}


def logical(path: Path) -> dict[str, Any]:
    """Everything a reader sees, read from a private copy (db and WAL) so nothing touches the original."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "copy.sqlite3"
        shutil.copyfile(path, copy)
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        conn = sqlite3.connect(copy)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            state: dict[str, Any] = {
                "application_id": conn.execute("PRAGMA application_id").fetchone()[0],
                "user_version": conn.execute("PRAGMA user_version").fetchone()[0],
                "schema": sorted(conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall(), key=repr),
            }
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                state[table] = sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            return state
        finally:
            conn.close()


def fingerprint(path: Path) -> tuple[bytes, int, list[str]]:
    """Bytes and mtime of the file, and the names in its folder."""
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


def expected_after(source: Path, name: str, tmp: Path) -> dict[str, Any]:
    """The state a successful operation leaves, computed on an ordinary disk."""
    copy = tmp / f"expected-{name}.sqlite3"
    shutil.copyfile(source, copy)
    with Store(copy, clock=ModelClock(NOW), create=False) as store:
        OPERATIONS[name](store)
    return logical(copy)


def cli(db: Path, *args: str, as_nobody: bool = False) -> subprocess.CompletedProcess:
    """``python -m queue_core --db DB --now 1000 ...`` as a real process (optionally as ``nobody``)."""
    argv = [sys.executable, "-m", "queue_core", "--db", str(db), "--now", str(NOW), *args]
    if as_nobody:
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


def assert_clean_failure(proc: subprocess.CompletedProcess, code: str) -> None:
    assert proc.returncode == EXIT[code], (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr and "unexpected error" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"queue-core: {code}: "), proc.stderr


CLI_WRITES = [["enqueue", "{batch}"], ["work", "--lease-seconds", "5"], ["redrive", "E0000"]]
CLI_READS = [["status", "--json"], ["dead", "--json"]]


def cli_args(command: list[str], batch: Path) -> list[str]:
    return [arg.replace("{batch}", str(batch)) for arg in command]


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


@pytest.fixture
def mounts() -> Iterator[Callable[..., Path]]:
    """Mount a tmpfs or a read-only bind mount for one test; skip where mount is not permitted."""
    mounted: list[Path] = []

    def mount(kind: str, target: Path, size: str = "1m") -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("needs root and mount(8)")
        if kind == "tmpfs":
            done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target))
        else:
            done = _run("mount", "--bind", str(target), str(target))
            if done.returncode == 0:
                mounted.append(target)
                done = _run("mount", "-o", "remount,bind,ro", str(target))
        if done.returncode != 0:
            pytest.skip(f"mount is not permitted here: {done.stderr.strip()}")
        if kind == "tmpfs":
            mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        if _run("umount", str(target)).returncode != 0:
            _run("umount", "-l", str(target))


def small_disk(tmp_path: Path, mounts: Callable[..., Path]) -> Path:
    """A 1 MiB tmpfs: a disk that really fills up."""
    (tmp_path / "disk").mkdir()
    return mounts("tmpfs", tmp_path / "disk", size="1m")


def fill(folder: Path, leave: int) -> None:
    """Fill the file system of ``folder`` until about ``leave`` bytes are free."""
    stat = os.statvfs(folder)
    size = max(0, stat.f_bavail * stat.f_frsize - leave)
    with open(folder / "filler", "wb") as fh:
        try:
            fh.write(b"\0" * size)
        except OSError:
            pass  # the disk is full: that was the point


# --------------------------------------------------------------- full disk


@pytest.fixture
def cap_pages(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path, int | None], None]:
    """``cap_pages(db, n)``: a database "full" at n pages, by ``PRAGMA max_page_count`` on every
    connection a store opens to it from then on (``None`` lifts the cap for new connections)."""
    caps: dict[str, int] = {}
    real_connect = sqlite_engine.connect

    def connect(path: Path, **options: Any) -> sqlite3.Connection:
        conn = real_connect(path, **options)
        if (pages := caps.get(os.path.abspath(path))) is not None:
            conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    def cap(path: Path, pages: int | None) -> None:
        if pages is None:
            caps.pop(os.path.abspath(path), None)
        else:
            caps[os.path.abspath(path)] = pages

    monkeypatch.setattr(sqlite_engine, "connect", connect)  # the one place where the store makes connections
    return cap


def test_a_database_at_max_page_count_is_disk_full_and_unchanged(tmp_path: Path, cap_pages) -> None:
    db = tmp_path / "q.sqlite3"
    build_queue(db)
    cap_pages(db, len(db.read_bytes()) // 4096)
    with Store(db, clock=ModelClock(NOW), create=False) as capped:
        before, print_before = logical(db), fingerprint(db)
        with pytest.raises(StorageError) as info:
            capped.enqueue(big_batch())
        assert info.value.code == "disk_full"
        assert str(db) in info.value.message and "full" in info.value.message
        assert logical(db) == before
        assert fingerprint(db)[0] == print_before[0]  # not one byte written to the database file
        # Operations that need no new page still work (on a reopened, still capped connection).
        assert capped.claim(100) is not None
    # And a real disk takes the batch.
    cap_pages(db, None)
    with Store(db, clock=ModelClock(NOW)) as store:
        assert store.enqueue(big_batch()).accepted == 40


def test_every_operation_on_a_filling_disk_is_all_or_nothing(tmp_path: Path, mounts) -> None:
    """A real tmpfs, filled to leave 0..320 KiB: each operation either fully succeeds
    (its committed result is there, even if the checkpoint at close failed) or fails
    with ``disk_full`` leaving the database logically and byte-identical."""
    source = tmp_path / "source.sqlite3"
    build_queue(source)
    source_bytes = source.read_bytes()
    before = logical(source)
    expected = {name: expected_after(source, name, tmp_path) for name in WRITES}
    Store(tmp_path / "empty.sqlite3").close()
    empty = logical(tmp_path / "empty.sqlite3")
    disk = small_disk(tmp_path, mounts)
    outcomes: dict[str, set[str]] = {name: set() for name in [*WRITES, *READS, "create"]}
    for leave in [*range(0, 64 * 1024, 4 * 1024), *range(64 * 1024, 320 * 1024 + 1, 16 * 1024)]:
        for name in [*WRITES, *READS, "create"]:
            for entry in disk.iterdir():
                entry.unlink()
            db = disk / "q.sqlite3"
            shutil.copyfile(source, db)
            fill(disk, leave)
            try:
                # Each store is closed before its files are read or deleted (an open
                # connection would also keep a deleted file's space on this disk).
                if name == "create":
                    with Store(disk / "new.sqlite3", clock=ModelClock(NOW)) as store:
                        store.status()
                else:
                    with Store(db, clock=ModelClock(NOW), create=False) as store:
                        (OPERATIONS.get(name) or READS[name])(store)
            except StorageError as exc:
                assert exc.code == "disk_full", (name, leave, exc.code, exc.message)
                outcomes[name].add("disk_full")
                if name == "create":
                    # Nothing half-written: no file, an empty one that a later open
                    # initialises, or a complete empty queue (only opening its WAL failed).
                    new = disk / "new.sqlite3"
                    if new.exists() and new.stat().st_size > 0:
                        assert logical(new) == empty, leave
                    assert not (disk / "new.sqlite3-journal").exists()
                else:
                    assert db.read_bytes() == source_bytes, (name, leave)
                    assert logical(db) == before, (name, leave)
                continue
            outcomes[name].add("ok")
            if name in expected:
                assert logical(db) == expected[name], (name, leave)
            elif name != "create":
                assert logical(db) == before
    # The sweep really covered both sides for every write.
    for name in [*WRITES, "create"]:
        assert outcomes[name] == {"ok", "disk_full"}, (name, outcomes[name])
    # Freeing space is enough: the same database then takes the batch.
    (disk / "filler").unlink()
    assert once(disk / "q.sqlite3", lambda s: s.enqueue(big_batch())).accepted == 40


def test_a_full_disk_before_the_wal_index_exists_is_disk_full_not_io_error(tmp_path: Path, mounts) -> None:
    """The first connection must create the ``-shm`` file; on a full disk SQLite says
    SQLITE_IOERR_SHMSIZE, which is a full disk, not a broken one."""
    disk = small_disk(tmp_path, mounts)
    db = disk / "q.sqlite3"
    build_queue(db)
    before, print_before = logical(db), fingerprint(db)
    fill(disk, 0)
    for name, operation in {**OPERATIONS, **READS}.items():
        with pytest.raises(StorageError) as info:
            once(db, operation)
        assert info.value.code == "disk_full", (name, info.value.code, info.value.message)
        assert db.read_bytes() == print_before[0]
    assert logical(db) == before


def test_the_cli_on_a_full_disk(tmp_path: Path, mounts) -> None:
    disk = small_disk(tmp_path, mounts)
    db = disk / "q.sqlite3"
    build_queue(db)
    batch = tmp_path / "big.jsonl"
    batch.write_text(big_batch())
    once(db, Store.status)  # then closed: leaves a checkpointed file, as every command does
    fill(disk, 40 * 1024)  # room for the WAL index, not for the batch
    before, print_before = logical(db), fingerprint(db)
    proc = cli(db, "enqueue", str(batch))
    assert_clean_failure(proc, "disk_full")
    assert str(db) in proc.stderr
    assert logical(db) == before
    assert db.read_bytes() == print_before[0]
    fill_again = disk / "filler"
    fill_again.unlink()
    fill(disk, 0)  # now not even the WAL index fits
    for command in [*CLI_WRITES, ["status", "--json"]]:
        assert_clean_failure(cli(db, *cli_args(command, batch)), "disk_full")
        assert db.read_bytes() == print_before[0]
    assert logical(db) == before
    # A new database on a full disk: the same clean error, and nothing half-written.
    assert_clean_failure(cli(disk / "new.sqlite3", "enqueue", str(batch)), "disk_full")
    new = disk / "new.sqlite3"
    assert not new.exists() or new.stat().st_size == 0
    fill_again.unlink()
    proc = cli(db, "enqueue", str(batch))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"accepted": 40, "duplicates": 0}


# --------------------------------------------------------------- read-only


def test_a_read_only_file_system_gives_read_only_and_changes_nothing(tmp_path: Path, mounts) -> None:
    """A read-only bind mount refuses writes even to root."""
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "q.sqlite3"
    build_queue(db)
    before, print_before = logical(db), fingerprint(db)
    mounts("bind-ro", folder)
    assert not os.access(folder, os.W_OK)
    for name, operation in OPERATIONS.items():
        with pytest.raises(StorageError) as info:
            once(db, operation)
        assert info.value.code == "read_only", (name, info.value.code, info.value.message)
        assert str(db) in info.value.message
    for name, operation in READS.items():
        # Reading a WAL database needs its -shm file: served, or the same clean refusal.
        try:
            once(db, operation)
        except StorageError as exc:
            assert exc.code == "read_only", (name, exc.code, exc.message)
    # A new database cannot be created in a read-only folder either.
    with pytest.raises(StorageError) as info:
        Store(folder / "new.sqlite3", clock=ModelClock(NOW))
    assert info.value.code == "read_only", info.value.message
    assert fingerprint(db) == print_before
    assert logical(db) == before


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A folder that the user ``nobody`` can reach, for the CLI run with ``setpriv``."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to run the CLI as an unprivileged user")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody'")
    probe = _run("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c",
                 "import queue_core")
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run this Python: {probe.stderr.strip()[-200:]}")
    folder = Path(tempfile.mkdtemp(prefix="qc-faults-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("file_mode, dir_mode", [(0o444, 0o555), (0o666, 0o555), (0o444, 0o777)],
                         ids=["file-and-folder-read-only", "folder-read-only", "file-read-only"])
def test_the_cli_as_an_unprivileged_user_on_a_read_only_database(nobody_dir: Path, file_mode: int,
                                                                 dir_mode: int) -> None:
    folder = nobody_dir / "queue"
    folder.mkdir()
    db = folder / "q.sqlite3"
    build_queue(db)
    batch = nobody_dir / "one.jsonl"
    batch.write_text(line("E0050") + "\n")
    batch.chmod(0o644)
    db.chmod(file_mode)
    folder.chmod(dir_mode)
    before, print_before = logical(db), fingerprint(db)
    for command in CLI_WRITES:
        proc = cli(db, *cli_args(command, batch), as_nobody=True)
        assert_clean_failure(proc, "read_only")
        assert str(db) in proc.stderr
        assert db.read_bytes() == print_before[0] and db.stat().st_mtime_ns == print_before[1]
    for command in CLI_READS:
        proc = cli(db, *command, as_nobody=True)
        if proc.returncode == 0:  # reading may work where SQLite can open the WAL index
            assert "Traceback" not in proc.stderr
            if command[0] == "status":
                assert json.loads(proc.stdout)["messages"] == {"ready": 3, "leased": 1, "done": 1, "dead": 1}
        else:
            assert_clean_failure(proc, "read_only")
    assert db.read_bytes() == print_before[0] and db.stat().st_mtime_ns == print_before[1]
    if dir_mode == 0o555:
        assert fingerprint(db)[2] == print_before[2]  # nothing could be created beside it
    assert logical(db) == before


def test_creating_a_database_in_a_read_only_folder_as_an_unprivileged_user(nobody_dir: Path) -> None:
    folder = nobody_dir / "queue"
    folder.mkdir()
    batch = nobody_dir / "one.jsonl"
    batch.write_text(line("E0050") + "\n")
    batch.chmod(0o644)
    folder.chmod(0o555)
    assert_clean_failure(cli(folder / "new.sqlite3", "enqueue", str(batch), as_nobody=True), "read_only")
    assert list(folder.iterdir()) == []


def test_a_database_in_a_folder_the_user_may_not_enter(nobody_dir: Path) -> None:
    """Even the file's existence cannot be checked: a clean ``cannot_open``, not a crash."""
    folder = nobody_dir / "private"
    folder.mkdir()
    db = folder / "q.sqlite3"
    build_queue(db)
    folder.chmod(0o700)
    batch = nobody_dir / "one.jsonl"
    batch.write_text(line("E0050") + "\n")
    batch.chmod(0o644)
    print_before = fingerprint(db)
    for target in (db, folder / "new.sqlite3"):
        for command in [*CLI_WRITES, *CLI_READS]:
            proc = cli(target, *cli_args(command, batch), as_nobody=True)
            assert proc.returncode == 2, (command, proc.stderr)
            assert proc.stderr.startswith("queue-core: cannot_open: ") and "Permission denied" in proc.stderr
            assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert fingerprint(db) == print_before


def test_a_database_name_too_long_for_the_file_system(tmp_path: Path) -> None:
    db = tmp_path / ("q" * 300 + ".sqlite3")
    for create in (True, False):
        with pytest.raises(WrongPath) as info:
            Store(db, clock=ModelClock(NOW), create=create)
        assert info.value.code == "cannot_open"
    batch = tmp_path / "one.jsonl"
    batch.write_text(line("E0050") + "\n")
    for command in [*CLI_WRITES, *CLI_READS]:
        proc = cli(db, *cli_args(command, batch))
        assert proc.returncode == 2, (command, proc.stderr)
        assert proc.stderr.startswith("queue-core: cannot_open: ") and "File name too long" in proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl"]


# ------------------------------------------------------------ held lock

HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "exclusive":  # readers are locked out as well
    conn.execute("PRAGMA locking_mode = EXCLUSIVE")
    conn.execute("BEGIN EXCLUSIVE")
else:  # the ordinary write lock of another writer
    conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()  # hold the lock until the test closes our stdin
conn.execute("ROLLBACK")
conn.close()
"""
# The CLI waits 60 s for a busy database by default; these runs of the real CLI
# ask for a short wait with its own option.
IMPATIENT = ("--busy-timeout", "0.15")


@pytest.fixture
def lock_holder() -> Iterator[Callable[[Path, str], None]]:
    holders: list[subprocess.Popen] = []

    def hold(db: Path, mode: str) -> None:
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), mode], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        holders.append(holder)
        assert holder.stdout.readline().strip() == "locked"

    yield hold
    for holder in holders:
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0


def impatient(db: Path, operation: Callable[[Store], Any]) -> Any:
    """``operation`` on a store that waits only briefly for a busy database (closed afterwards)."""
    return once(db, operation, busy_timeout_ms=50, busy_retry_seconds=0.15)


@pytest.mark.timeout(45)  # every wait here is 0.15 s: one wait of the default 60 s fails the test
def test_a_write_lock_held_past_the_timeout(tmp_path: Path, lock_holder) -> None:
    db = tmp_path / "q.sqlite3"
    build_queue(db)
    before, print_before = logical(db), fingerprint(db)
    lock_holder(db, "immediate")
    for name, operation in OPERATIONS.items():
        with pytest.raises(StorageError) as info:
            impatient(db, operation)
        assert info.value.code == "database_busy", (name, info.value.code)
        assert str(db) in info.value.message
    # WAL: readers are not blocked by a writer, and see the last committed state.
    snapshot = impatient(db, ledger.report)
    assert dict(snapshot.messages) == {"ready": 3, "leased": 1, "done": 1, "dead": 1}
    assert (snapshot.effects_count, snapshot.total_cents) == (1, 100)
    batch = tmp_path / "one.jsonl"
    batch.write_text(line("E0050") + "\n")
    for command in CLI_WRITES:
        assert_clean_failure(cli(db, *IMPATIENT, *cli_args(command, batch)), "database_busy")
    proc = cli(db, *IMPATIENT, "status", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["effects"]["total_cents"] == 100
    assert logical(db) == before
    assert db.read_bytes() == print_before[0]


@pytest.mark.timeout(45)  # every wait here is 0.15 s: one wait of the default 60 s fails the test
def test_an_exclusive_lock_held_past_the_timeout_blocks_readers_too(tmp_path: Path, lock_holder) -> None:
    db = tmp_path / "q.sqlite3"
    build_queue(db)
    before, print_before = logical(db), fingerprint(db)
    lock_holder(db, "exclusive")
    for name, operation in {**OPERATIONS, **READS}.items():
        with pytest.raises(StorageError) as info:
            impatient(db, operation)
        assert info.value.code == "database_busy", (name, info.value.code, info.value.message)
    batch = tmp_path / "one.jsonl"
    batch.write_text(line("E0050") + "\n")
    for command in [*CLI_WRITES, *CLI_READS]:
        assert_clean_failure(cli(db, *IMPATIENT, *cli_args(command, batch)), "database_busy")
    assert db.read_bytes() == print_before[0]
    assert logical(db) == before


# ------------------------------------------------------ not a queue database


def _foreign(path: Path, wal: bool) -> sqlite3.Connection | None:
    conn = sqlite3.connect(path, isolation_level=None)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE messages (event_id TEXT, payload TEXT)")
    conn.execute("INSERT INTO messages VALUES ('E0001', '{}')")
    if wal:
        return conn  # stays open: its WAL is not checkpointed
    conn.close()
    return None


def _queue_header_without_tables(path: Path, version: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id = {0x51436F72}")
    conn.execute("CREATE TABLE unrelated (x)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()


NOT_QUEUES: dict[str, Callable[[Path], Any]] = {
    "text-file": lambda p: p.write_text("event_id,payload\nE0001,{}\n" * 10),
    "random-bytes-with-sqlite-magic": lambda p: p.write_bytes(
        b"SQLite format 3\x00" + random.Random(7).randbytes(8192)),
    "foreign-sqlite": lambda p: _foreign(p, wal=False),
    "foreign-sqlite-in-wal-mode-still-open": lambda p: _foreign(p, wal=True),
    "queue-header-schema-version-0": lambda p: _queue_header_without_tables(p, 0),
    "binary-zeros": lambda p: p.write_bytes(b"\0" * 4096),
}


@pytest.mark.parametrize("kind", sorted(NOT_QUEUES))
def test_a_file_that_is_not_a_queue_database(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "target.sqlite3"
    keep = NOT_QUEUES[kind](db)  # a connection kept open stands for the other application, still running
    try:
        print_before = fingerprint(db)
        wal = db.with_name(db.name + "-wal")
        wal_before = wal.read_bytes() if wal.exists() else None
        for create in (True, False):
            with pytest.raises(WrongPath) as info:
                Store(db, clock=ModelClock(NOW), create=create)
            assert info.value.code == "not_a_queue_database"
            assert str(db) in info.value.message
        batch = tmp_path / "one.jsonl"
        batch.write_text(line("E0050") + "\n")
        for command in [*CLI_WRITES, *CLI_READS]:
            assert_clean_failure(cli(db, *cli_args(command, batch)), "not_a_queue_database")
        assert fingerprint(db)[:2] == print_before[:2]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(print_before[2] + ["one.jsonl"])
        assert (wal.read_bytes() if wal.exists() else None) == wal_before
    finally:
        if isinstance(keep, sqlite3.Connection):
            keep.close()


@pytest.mark.parametrize("version", [1, SCHEMA_VERSION], ids=["older-version-to-migrate", "current-version"])
def test_a_file_that_claims_to_be_a_queue_but_has_no_tables(tmp_path: Path, version: int) -> None:
    """Only a forged header gets this far: a clean StorageError, never a crash, nothing changed
    (not by the migration of an older version, not by the CLI installing the ledger's table)."""
    db = tmp_path / "forged.sqlite3"
    _queue_header_without_tables(db, version)
    print_before = fingerprint(db)
    for name, operation in {**OPERATIONS, **READS}.items():
        with pytest.raises(StorageError) as info:
            once(db, operation)
        assert info.value.code in ("not_a_queue_database", "storage_error"), (name, info.value.code)
    for command in [*CLI_WRITES, *CLI_READS]:
        proc = cli(db, *cli_args(command, tmp_path / "none.jsonl"))
        assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr and "unexpected error" not in proc.stderr
        assert len(proc.stderr.splitlines()) == 1
    assert fingerprint(db)[:2] == print_before[:2]


# ------------------------------------------------------- newer schema version


def _set_version(db: Path, version: int) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")  # write it into the file header now
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()


def test_a_newer_schema_version_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "q.sqlite3"
    build_queue(db)
    _set_version(db, SCHEMA_VERSION + 1)
    print_before, before = fingerprint(db), logical(db)
    for create in (True, False):
        with pytest.raises(WrongPath) as info:
            Store(db, clock=ModelClock(NOW), create=create)
        assert info.value.code == "schema_too_new"
        assert f"schema version {SCHEMA_VERSION + 1}" in info.value.message
    batch = tmp_path / "one.jsonl"
    batch.write_text(line("E0050") + "\n")
    for command in [*CLI_WRITES, *CLI_READS]:
        assert_clean_failure(cli(db, *cli_args(command, batch)), "schema_too_new")
    assert fingerprint(db)[:2] == print_before[:2]
    assert logical(db) == before


NEWER_CLIENT = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("CREATE TABLE messages_v2_extra (event_id TEXT)")
conn.execute("PRAGMA user_version = %d")
conn.execute("COMMIT")
if sys.argv[2] == "crash":
    os._exit(0)  # dies without closing: the committed upgrade stays only in the WAL
print("upgraded", flush=True)
sys.stdin.read()  # a newer worker that is still running
conn.close()
""" % (SCHEMA_VERSION + 1)


@pytest.mark.parametrize("how", ["newer-client-running", "newer-client-crashed"])
def test_a_newer_schema_version_still_in_the_wal_is_refused(tmp_path: Path, how: str) -> None:
    """A newer queue_core upgraded the file; the new version is committed but only in the
    WAL, so the file header on disk still says version 1. It must still be refused."""
    db = tmp_path / "q.sqlite3"
    build_queue(db)
    newer = subprocess.Popen([sys.executable, "-c", NEWER_CLIENT, str(db),
                              "crash" if how.endswith("crashed") else "run"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if how.endswith("crashed"):
            assert newer.wait(timeout=30) == 0
        else:
            assert newer.stdout.readline().strip() == "upgraded"
        wal = db.with_name(db.name + "-wal")
        assert wal.stat().st_size > 0
        assert int.from_bytes(db.read_bytes()[60:64], "big") == SCHEMA_VERSION  # the stale header
        main_before, wal_before = db.read_bytes(), wal.read_bytes()
        for create in (True, False):
            with pytest.raises(WrongPath) as info:
                Store(db, clock=ModelClock(NOW), create=create)
            assert info.value.code == "schema_too_new"
        batch = tmp_path / "one.jsonl"
        batch.write_text(line("E0050") + "\n")
        for command in [*CLI_WRITES, *CLI_READS]:
            assert_clean_failure(cli(db, *cli_args(command, batch)), "schema_too_new")
        assert db.read_bytes() == main_before
        assert wal.read_bytes() == wal_before
        assert logical(db)["user_version"] == SCHEMA_VERSION + 1
    finally:
        if newer.poll() is None:
            newer.stdin.close()
            newer.wait(timeout=30)
