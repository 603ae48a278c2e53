"""The two images of a power-cut filesystem: what processes see, and what a power cut keeps.

``Images`` is the bookkeeping of ``powerfs_daemon``: the LIVE image is a plain
directory (every name and byte that processes see); the DURABLE image is held
here, in memory, and changes only where POSIX says a write becomes durable:

* ``fsync``/``fdatasync`` of a file makes its current contents and size durable
  (not its name);
* ``fsync`` of a directory makes its current names durable (creates, renames,
  unlinks, mkdirs), each name pointing at a file's identity, not its bytes.

A failed ``fsync`` (``sync_failed``, armed through the daemon's ``fail``) is
fsyncgate as Linux does it: the kernel marks the pages it could not write
clean and drops the error, so the file's writes since its last sync never
reach the durable image, and a later ``fsync`` that succeeds does not bring
them back (it writes only what changed after the failure). The live image
keeps them: processes still read them, as from the page cache.

Everything since the last sync is remembered as history, for the torn mode:
each 512-byte unit of a file keeps every version it had since the file's last
sync, each file its sizes, each directory its name sets. A power cut then
writes (``materialize``) the disk a remount finds:

* ``drop``: the durable image, nothing else;
* ``torn``: per 512-byte unit, independently, one of its versions (the durable
  one, an intermediate one, or the latest); per file one of its sizes; per
  directory one of its name sets (a prefix of its unsynced history). Seeded.

Nothing here touches the mount: the daemon calls in under its one lock.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

__all__ = ["MODES", "SECTOR", "Images", "Mode"]

SECTOR: Final = 512
Mode = Literal["drop", "torn"]
MODES: Final[tuple[Mode, ...]] = ("drop", "torn")

# A directory entry: a file's identity, or a subdirectory (by its path).
Entry = tuple[Literal["f", "d"], int]
Names = dict[str, Entry]


@dataclass
class _File:
    """One file's durable bytes, and what happened to it since its last sync."""

    durable: bytearray = field(default_factory=bytearray)
    sizes: list[int] = field(default_factory=list)  # each size it had, oldest first
    versions: dict[int, list[bytes]] = field(default_factory=dict)  # unit -> versions
    # found in the live directory, not made through the mount: its next sync reads it whole
    found: bool = False


@dataclass
class Images:
    """The durable image of the live directory ``live``, and the unsynced history."""

    live: Path
    lying_fsync: bool = False  # a negative control: fsync says yes and keeps nothing
    files: dict[int, _File] = field(default_factory=dict)  # identity -> file
    identity: dict[int, int] = field(default_factory=dict)  # live st_ino -> identity
    durable_dirs: dict[str, Names] = field(default_factory=dict)  # "" is the root
    dir_history: dict[str, list[Names]] = field(default_factory=dict)
    syncs: int = 0  # file syncs that reached the durable image
    dir_syncs: int = 0
    lost_units: int = 0  # unsynced 512-byte units a failed fsync dropped

    # ------------------------------------------------------------------ start
    @classmethod
    def from_disk(cls, disk: Path, live: Path, *, lying_fsync: bool = False) -> Images:
        """A fresh live image copied from ``disk``: after a (re)mount, all of it is durable."""
        if live.exists():
            shutil.rmtree(live)
        shutil.copytree(disk, live)
        images = cls(live, lying_fsync=lying_fsync)
        images.sync_all()
        images.syncs = images.dir_syncs = 0
        return images

    def _path(self, relative: str) -> Path:
        return self.live / relative if relative else self.live

    def new_file(self, relative: str) -> None:
        """``relative`` was just created: a new identity, with nothing durable yet."""
        ino = os.stat(self._path(relative)).st_ino
        self.identity[ino] = len(self.files) + 1
        self.files[self.identity[ino]] = _File()

    def _file_of(self, ino: int) -> _File:
        if ino not in self.identity:  # copied from the disk at the mount
            self.identity[ino] = len(self.files) + 1
            self.files[self.identity[ino]] = _File(found=True)
        return self.files[self.identity[ino]]

    # ----------------------------------------------------------------- files
    def wrote(self, fd: int, offset: int, length: int) -> None:
        """A write of ``length`` bytes at ``offset`` landed in the live file ``fd``: remember its units."""
        st = os.fstat(fd)
        f = self._file_of(st.st_ino)
        if length:
            for unit in range(offset // SECTOR, (offset + length - 1) // SECTOR + 1):
                f.versions.setdefault(unit, []).append(
                    os.pread(fd, SECTOR, unit * SECTOR)
                )
        self._sized(f, st.st_size)

    def resized(self, relative: str) -> None:
        """The live file ``relative`` was truncated or extended."""
        st = os.stat(self._path(relative))
        self._sized(self._file_of(st.st_ino), st.st_size)

    @staticmethod
    def _sized(f: _File, size: int) -> None:
        if not f.sizes or f.sizes[-1] != size:
            f.sizes.append(size)

    def sync_file(self, fd: int) -> None:
        """``fsync``/``fdatasync``: the live contents and size of ``fd`` become durable."""
        if self.lying_fsync:
            return
        st = os.fstat(fd)
        f = self._file_of(st.st_ino)
        if f.found:
            f.durable = bytearray(os.pread(fd, st.st_size, 0))
            f.found = False
        # Bytes past the smallest size it had since its last sync were cut off
        # (and, if it grew again, are zeros or were written, hence in versions).
        keep = min([len(f.durable), *f.sizes])
        del f.durable[keep:]
        f.durable.extend(bytes(max(0, st.st_size - keep)))
        for unit in f.versions:
            data = os.pread(fd, SECTOR, unit * SECTOR)
            f.durable[unit * SECTOR : unit * SECTOR + len(data)] = data
        del f.durable[st.st_size :]
        f.sizes.clear()
        f.versions.clear()
        self.syncs += 1

    def sync_failed(self, fd: int) -> None:
        """An ``fsync`` of ``fd`` failed: its unsynced writes are dropped, never to be durable.

        The durable bytes stay as the last successful sync left them; a later
        sync writes only units changed after this (the rest of a grown file
        reads as zeros on the disk, as unwritten blocks do).
        """
        # (a mount syncs every file it finds: no file here is still "found")
        f = self._file_of(os.fstat(fd).st_ino)
        self.lost_units += len(f.versions)
        # shrinks since the last sync stay forgotten too: the durable size is kept
        f.sizes.clear()
        f.versions.clear()

    # ----------------------------------------------------------- directories
    def names(self, relative: str) -> Names:
        """The live names of directory ``relative`` (files by identity)."""
        names: Names = {}
        with os.scandir(self._path(relative)) as entries:
            for entry in entries:
                child = f"{relative}/{entry.name}" if relative else entry.name
                if entry.is_dir(follow_symlinks=False):
                    names[entry.name] = ("d", 0)
                    self.durable_dirs.setdefault(child, {})
                else:
                    ino = entry.stat(follow_symlinks=False).st_ino
                    self._file_of(ino)
                    names[entry.name] = ("f", self.identity[ino])
        return names

    def renamed(self, relative: str) -> None:
        """A name in directory ``relative`` was made, removed or moved: remember its names."""
        self.dir_history.setdefault(relative, []).append(self.names(relative))

    def sync_dir(self, relative: str) -> None:
        """``fsync`` of directory ``relative``: its current names become durable."""
        if self.lying_fsync:
            return
        self.durable_dirs[relative] = self.names(relative)
        self.dir_history.pop(relative, None)
        self.dir_syncs += 1

    def sync_all(self) -> None:
        """Everything live becomes durable (a clean shutdown's ``sync``): the harness's fixed point."""
        lying, self.lying_fsync = self.lying_fsync, False
        for folder, _, files in os.walk(self.live):
            relative = os.path.relpath(folder, self.live)
            relative = "" if relative == "." else relative
            self.sync_dir(relative)
            for name in files:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                try:
                    self.sync_file(fd)
                finally:
                    os.close(fd)
        self.lying_fsync = lying

    # -------------------------------------------------------------- the cut
    def materialize(self, disk: Path, mode: Mode, seed: int) -> dict[str, int]:
        """Write the disk a power cut leaves (``mode``, ``seed``) into ``disk``; what was torn, counted."""
        rng = random.Random(seed)
        counts = {"files": 0, "units_unsynced": 0, "units_kept_latest": 0,
                  "units_kept_older": 0, "units_lost": 0, "names_unsynced": 0}
        if disk.exists():
            shutil.rmtree(disk)
        disk.mkdir(parents=True)
        self._write_dir("", disk, mode, rng, counts)
        return counts

    def _write_dir(
        self, relative: str, target: Path, mode: Mode, rng: random.Random,
        counts: dict[str, int],
    ) -> None:
        choices = [self.durable_dirs.get(relative, {})]
        if mode == "torn":
            history = self.dir_history.get(relative, [])
            counts["names_unsynced"] += len(history)
            choices += history
        names = rng.choice(choices) if mode == "torn" else choices[0]
        for name, (kind, identity) in sorted(names.items()):
            child = f"{relative}/{name}" if relative else name
            if kind == "d":
                (target / name).mkdir()
                self._write_dir(child, target / name, mode, rng, counts)
            else:
                (target / name).write_bytes(self._contents(identity, mode, rng, counts))
                counts["files"] += 1

    def _contents(
        self, identity: int, mode: Mode, rng: random.Random, counts: dict[str, int]
    ) -> bytes:
        f = self.files[identity]
        data = bytearray(f.durable)
        if mode == "drop":
            return bytes(data)
        size = rng.choice([len(f.durable), *f.sizes])
        for unit, versions in sorted(f.versions.items()):
            counts["units_unsynced"] += 1
            pick = rng.randrange(len(versions) + 1)  # 0: the durable version
            if pick == 0:
                counts["units_lost"] += 1
                continue
            counts["units_kept_latest" if pick == len(versions) else "units_kept_older"] += 1
            version = versions[pick - 1]
            start = unit * SECTOR
            if len(data) < start:
                data.extend(bytes(start - len(data)))
            data[start : start + len(version)] = version
        del data[size:]
        data.extend(bytes(size - len(data)))
        return bytes(data)
