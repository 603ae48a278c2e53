"""The power-cut filesystem itself: it loses exactly what was not synced, and SQLite works on it.

Each test mounts a fresh disk (``proof.powerfs``), writes through the mount
with real system calls and real processes, cuts, remounts and reads what the
cut left. The last tests are the negative controls the power-cut proof leans
on: a filesystem whose fsync lies loses the queue's work, raw SQLite at
``synchronous=OFF`` and the queue forced to ``NORMAL`` lose acknowledged commits.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proof.powercut import queue_cuts, raw_sqlite
from proof.powerfs import PowerFS
from proof.powerfs_image import SECTOR, Images

from .fuse_support import powerfs, require_fuse  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def _write(path: Path, data: bytes, *, sync: bool, offset: int = 0) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 5000), st.binary(min_size=1, max_size=1500)),
    st.tuples(st.just("truncate"), st.integers(0, 6000), st.just(b"")),
    st.tuples(st.just("sync"), st.just(0), st.just(b"")),
), max_size=25)


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_the_durable_image_is_each_file_as_it_was_at_its_last_sync(operations: list) -> None:
    # The bookkeeping alone (no mount): writes, truncations and syncs on a real
    # file, in any order; a drop cut must give back the file as its last sync saw it.
    with tempfile.TemporaryDirectory() as folder:
        disk, live = Path(folder, "disk"), Path(folder, "live")
        disk.mkdir()
        (disk / "f").write_bytes(b"start" * 300)
        images = Images.from_disk(disk, live)
        expected = (live / "f").read_bytes()
        fd = os.open(live / "f", os.O_RDWR)
        try:
            for kind, number, data in operations:
                if kind == "write":
                    images.wrote(fd, number, os.pwrite(fd, data, number))
                elif kind == "truncate":
                    os.ftruncate(fd, number)
                    images.resized("f")
                else:
                    images.sync_file(fd)
                    expected = (live / "f").read_bytes()
        finally:
            os.close(fd)
        images.materialize(Path(folder, "cut"), "drop", seed=0)
        assert Path(folder, "cut", "f").read_bytes() == expected


def test_a_write_without_fsync_is_gone_after_a_drop_cut_and_kept_with_it(powerfs: PowerFS) -> None:
    mnt = powerfs.mount()
    _write(mnt / "synced", b"old", sync=True)
    _write(mnt / "unsynced", b"old", sync=True)
    _sync_dir(mnt)  # both names durable, with "old"
    _write(mnt / "synced", b"new", sync=True)
    _write(mnt / "unsynced", b"new", sync=False)
    assert (mnt / "unsynced").read_bytes() == b"new"  # the live image has it
    powerfs.cut("drop", 1)
    mnt = powerfs.mount()
    assert (mnt / "synced").read_bytes() == b"new"
    assert (mnt / "unsynced").read_bytes() == b"old"


def test_a_new_name_needs_the_directory_synced(powerfs: PowerFS) -> None:
    mnt = powerfs.mount()
    _write(mnt / "kept", b"data", sync=True)
    _sync_dir(mnt)
    _write(mnt / "file-synced-name-not", b"data", sync=True)  # fsync of the file alone
    os.rename(mnt / "kept", mnt / "renamed")  # not synced
    powerfs.cut("drop", 1)
    mnt = powerfs.mount()
    assert sorted(os.listdir(mnt)) == ["kept"]
    assert (mnt / "kept").read_bytes() == b"data"
    os.rename(mnt / "kept", mnt / "renamed")
    _sync_dir(mnt)
    powerfs.cut("drop", 2)
    assert sorted(os.listdir(powerfs.mount())) == ["renamed"]


def test_an_unlink_without_a_directory_sync_comes_back(powerfs: PowerFS) -> None:
    mnt = powerfs.mount()
    _write(mnt / "a", b"a", sync=True)
    _write(mnt / "b", b"b", sync=True)
    _sync_dir(mnt)
    os.unlink(mnt / "a")
    os.unlink(mnt / "b")
    _sync_dir(mnt)
    # a third file, created and synced, its name never synced
    _write(mnt / "c", b"c", sync=True)
    os.unlink(mnt / "c")
    powerfs.cut("drop", 1)
    assert os.listdir(powerfs.mount()) == []


def test_a_truncation_is_durable_only_when_synced(powerfs: PowerFS) -> None:
    mnt = powerfs.mount()
    _write(mnt / "f", b"x" * 3000, sync=True)
    _sync_dir(mnt)
    os.truncate(mnt / "f", 10)
    _write(mnt / "f", b"y" * 100, sync=False, offset=2000)
    powerfs.cut("drop", 1)
    mnt = powerfs.mount()
    assert (mnt / "f").read_bytes() == b"x" * 3000
    os.truncate(mnt / "f", 10)
    _write(mnt / "f", b"y" * 100, sync=True, offset=2000)
    powerfs.cut("drop", 1)
    assert (powerfs.mount() / "f").read_bytes() == b"x" * 10 + bytes(1990) + b"y" * 100


def test_torn_mode_keeps_each_unit_in_some_version_and_mixes_them(powerfs: PowerFS) -> None:
    units = 16
    mnt = powerfs.mount()
    _write(mnt / "f", b"0" * SECTOR * units, sync=True)
    _sync_dir(mnt)
    powerfs.unmount()
    seen: set[bytes] = set()
    mixtures = 0
    for seed in range(8):
        mnt = powerfs.mount()
        for version in b"123":  # three unsynced versions of every unit
            _write(mnt / "f", bytes([version]) * SECTOR * units, sync=False)
        counts = powerfs.cut("torn", seed)
        assert counts["units_unsynced"] == units
        data = (powerfs.mount() / "f").read_bytes()
        powerfs.unmount()
        assert len(data) == SECTOR * units
        kept = [data[i * SECTOR:(i + 1) * SECTOR] for i in range(units)]
        for unit in kept:
            assert unit in {bytes([v]) * SECTOR for v in b"0123"}  # whole units, each one version
        seen |= set(kept)
        mixtures += len(set(kept)) > 1
        # put the durable "0" back for the next seed
        mnt = powerfs.mount()
        _write(mnt / "f", b"0" * SECTOR * units, sync=True)
        powerfs.unmount()
    assert seen == {bytes([v]) * SECTOR for v in b"0123"}  # none, intermediate, latest
    assert mixtures >= 6


def test_torn_mode_tears_sizes_and_names_too(powerfs: PowerFS) -> None:
    outcomes = set()
    for seed in range(12):
        mnt = powerfs.mount()
        _write(mnt / "grown", b"g" * 4000, sync=False)
        _write(mnt / f"n{seed}", b"", sync=False)
        powerfs.cut("torn", seed)
        mnt = powerfs.mount()
        names = frozenset(os.listdir(mnt))
        size = (mnt / "grown").stat().st_size if "grown" in names else None
        outcomes.add((f"n{seed}" in names, "grown" in names, size))
        for name in names:
            os.unlink(mnt / name)
        _sync_dir(mnt)
        powerfs.unmount()
    assert {names for names, _, _ in outcomes} == {True, False}
    assert {size for _, _, size in outcomes} >= {None, 0, 4000}


def test_posix_locks_flock_and_shared_mmap_work_across_processes(powerfs: PowerFS) -> None:
    import mmap

    mnt = powerfs.mount()
    path = mnt / "locked"
    _write(path, bytes(4096), sync=True)
    holder = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(holder, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with mmap.mmap(holder, 4096) as shared:
            shared[:5] = b"hello"
            probe = textwrap.dedent(f"""
                import fcntl, mmap, os, sys
                fd = os.open({str(path)!r}, os.O_RDWR)
                seen = mmap.mmap(fd, 4096)[:5]
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
                    posix = "free"
                except OSError:
                    posix = "held"
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    whole = "free"
                except OSError:
                    whole = "held"
                print(seen.decode(), posix, whole)
            """)
            out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                 timeout=60, check=True).stdout.split()
    finally:
        os.close(holder)
    assert out == ["hello", "held", "held"]


WAL_WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA synchronous = FULL")
for n in range(int(sys.argv[3])):
    conn.execute("INSERT INTO t VALUES (?, ?)", (sys.argv[2], n))
print(conn.execute("PRAGMA journal_mode").fetchone()[0])
"""


def test_sqlite_in_wal_mode_from_several_processes(powerfs: PowerFS) -> None:
    mnt = powerfs.mount()
    db = mnt / "wal.sqlite3"
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.execute("CREATE TABLE t (who TEXT, n INTEGER)")
    writers = [subprocess.Popen([sys.executable, "-c", WAL_WRITER, str(db), who, "200"],
                                stdout=subprocess.PIPE, text=True) for who in "abc"]
    outs = [w.communicate(timeout=100)[0].strip() for w in writers]
    assert outs == ["wal"] * 3 and all(w.returncode == 0 for w in writers)
    assert conn.execute("SELECT who, count(*) FROM t GROUP BY who ORDER BY who").fetchall() == [
        ("a", 200), ("b", 200), ("c", 200)]
    # the -shm index is shared through mmap: a reader sees the writers' commits from it
    assert (mnt / "wal.sqlite3-shm").exists()
    conn.close()
    powerfs.cut("drop", 1)
    conn = sqlite3.connect(powerfs.mount() / "wal.sqlite3")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 600
    finally:
        conn.close()


# ------------------------------------------------------------ negative controls


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_raw_sqlite_at_synchronous_off_loses_committed_rows(tmp_path: Path) -> None:
    require_fuse()
    off = raw_sqlite(tmp_path / "off", synchronous="OFF", cuts=3, seed=1)
    assert off.acknowledged > 0 and off.lost > 0 and not off.ok, off.to_dict()
    full = raw_sqlite(tmp_path / "full", synchronous="FULL", cuts=3, seed=1)
    assert full.acknowledged > 0 and full.ok, full.to_dict()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_filesystem_whose_fsync_lies_loses_the_queues_work(tmp_path: Path) -> None:
    require_fuse()
    run = queue_cuts(tmp_path, cuts=2, seed=1, lying_fsync=True)
    assert run.acknowledged > 0 and run.lost == run.acknowledged and not run.ok, run.to_dict()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_queue_forced_to_synchronous_normal_loses_acknowledged_work(tmp_path: Path) -> None:
    require_fuse()
    run = queue_cuts(tmp_path, cuts=3, seed=1, normal=True)
    assert run.lost > 0 and not run.ok, run.to_dict()
    assert any("was acknowledged and is gone" in v for v in run.violations)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_that_fails_leaves_no_mount_and_no_process(tmp_path: Path) -> None:
    require_fuse()

    def stop(line: str) -> None:
        raise KeyboardInterrupt(line)

    with pytest.raises(KeyboardInterrupt):
        queue_cuts(tmp_path, cuts=3, seed=1, progress=stop)
    mounts = Path("/proc/mounts").read_text(encoding="utf-8")
    assert str(tmp_path) not in mounts
    assert not any(str(tmp_path) in " ".join(_command_line(pid)) for pid in _pids())


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(encoding="utf-8").split("\0")
    except OSError:
        return []
