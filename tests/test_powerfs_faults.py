"""The power-cut filesystem fails on demand: fsync and write errors at a counted operation.

``PowerFS.fail`` makes the N-th fsync or write from now fail with EIO or
ENOSPC, once or from then on. A failed write changes nothing; a failed fsync
is fsyncgate as Linux does it: the file's unsynced writes are dropped from
the durable image and a later fsync that succeeds does not bring them back,
while the live image (the page cache) still shows them.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from proof.powerfs import PowerFS
from proof.powerfs_daemon import Fault
from proof.powerfs_image import SECTOR, Images

from .fuse_support import powerfs  # noqa: F401


def _fsync_error(fd: int) -> int | None:
    try:
        os.fsync(fd)
    except OSError as exc:
        return exc.errno
    return None


def _write_error(fd: int, data: bytes, offset: int) -> int | None:
    try:
        os.pwrite(fd, data, offset)
    except OSError as exc:
        return exc.errno
    return None


def test_a_fault_counts_only_its_kind_and_files_and_fires_once_or_always() -> None:
    once = Fault.parse("fail write 2 ENOSPC once -wal".split())
    assert once is not None and (once.error, once.always) == (errno.ENOSPC, False)
    fired = [once.fires(kind, path) for kind, path in [
        ("write", "/db-wal"), ("write", "/db"), ("fsync", "/db-wal"),
        ("write", "/db-wal"), ("write", "/db-wal")]]
    assert fired == [False, False, False, True, False]
    always = Fault.parse("fail fsync 1 EIO always".split())
    assert always is not None and [always.fires("fsync", "/x") for _ in range(3)] == [True] * 3
    for bad in ("fail fsync 0 EIO once", "fail read 1 EIO once", "fail write 1 EPERM once",
                "fail write 1 EIO sometimes", "fail write x EIO once"):
        assert Fault.parse(bad.split()) is None, bad


def test_a_failed_sync_drops_the_unsynced_writes_for_good_in_the_bookkeeping() -> None:
    with tempfile.TemporaryDirectory() as folder:
        disk, live = Path(folder, "disk"), Path(folder, "live")
        disk.mkdir()
        (disk / "f").write_bytes(b"0" * SECTOR * 3)
        images = Images.from_disk(disk, live)
        fd = os.open(live / "f", os.O_RDWR)
        try:
            for unit, data in ((0, b"a"), (1, b"b")):
                images.wrote(fd, unit * SECTOR, os.pwrite(fd, data * SECTOR, unit * SECTOR))
            images.sync_failed(fd)  # units 0 and 1 are dropped
            images.wrote(fd, 2 * SECTOR, os.pwrite(fd, b"c" * SECTOR, 2 * SECTOR))
            images.sync_file(fd)  # succeeds: only unit 2 reaches the disk
        finally:
            os.close(fd)
        assert (live / "f").read_bytes() == b"a" * SECTOR + b"b" * SECTOR + b"c" * SECTOR
        images.materialize(Path(folder, "cut"), "drop", seed=0)
        assert Path(folder, "cut", "f").read_bytes() == b"0" * SECTOR * 2 + b"c" * SECTOR
        assert images.lost_units == 2


@pytest.mark.timeout(120)
def test_fsync_eio_once_then_always_and_what_a_cut_keeps(powerfs: PowerFS) -> None:  # noqa: F811
    mnt = powerfs.mount()
    fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"1" * SECTOR, 0)
        os.fsync(fd)
        dir_fd = os.open(mnt, os.O_RDONLY)
        os.fsync(dir_fd)  # the name is durable (directory syncs are not counted)
        os.close(dir_fd)
        powerfs.fail("fsync", 2)
        os.pwrite(fd, b"2" * SECTOR, SECTOR)
        assert _fsync_error(fd) is None  # the first from now
        os.pwrite(fd, b"3" * SECTOR, 2 * SECTOR)
        assert _fsync_error(fd) == errno.EIO  # the second: unit 2 is dropped
        os.pwrite(fd, b"4" * SECTOR, 3 * SECTOR)
        assert _fsync_error(fd) is None  # once: this one succeeds, without unit 2
        assert os.pread(fd, SECTOR, 2 * SECTOR) == b"3" * SECTOR  # the cache still has it
        powerfs.fail("fsync", 1, always=True)
        os.pwrite(fd, b"5" * SECTOR, 4 * SECTOR)
        assert [_fsync_error(fd) for _ in range(3)] == [errno.EIO] * 3
        stats = powerfs.ask("stats")
    finally:
        os.close(fd)
    assert (stats["failed"], stats["lost_units"]) == (4, 2)
    powerfs.cut("drop", 1)
    kept = (powerfs.mount() / "f").read_bytes()
    # unit 2 (failed sync) reads as zeros, unit 4 (never synced) was cut off
    assert kept == b"1" * SECTOR + b"2" * SECTOR + bytes(SECTOR) + b"4" * SECTOR


@pytest.mark.timeout(120)
def test_write_eio_and_enospc_change_nothing(powerfs: PowerFS) -> None:  # noqa: F811
    mnt = powerfs.mount()
    fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
    other = os.open(mnt / "g", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        powerfs.fail("write", 2, "ENOSPC", suffix="f")  # writes to "g" do not count
        assert _write_error(other, b"g", 0) is None
        assert _write_error(fd, b"a", 0) is None
        assert _write_error(fd, b"b", 1) == errno.ENOSPC
        assert _write_error(fd, b"c", 2) is None  # once
        powerfs.fail("write", 1, "EIO", always=True)
        assert [_write_error(fd, b"d", 3) for _ in range(2)] == [errno.EIO] * 2
        assert _write_error(other, b"d", 1) == errno.EIO  # every file now
        powerfs.fail_off()
        assert _write_error(fd, b"e", 3) is None
        assert os.pread(fd, 10, 0) == b"a\0ce"  # the failed writes wrote nothing
    finally:
        os.close(fd)
        os.close(other)
    with pytest.raises(RuntimeError, match="refused"):
        powerfs.ask("fail write 1 EPERM once")
