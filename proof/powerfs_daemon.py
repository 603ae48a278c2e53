"""The FUSE process of a power-cut filesystem: ``python -m proof.powerfs_daemon ...``.

It mounts a pass-through filesystem over a live directory (a copy of the disk
it was started on) and keeps the durable image beside it (``powerfs_image``).
A control socket, outside the mount, takes one command a connection:

* ``sync``: everything becomes durable (the harness's fixed point);
* ``cut MODE SEED``: freeze (from now on no write, truncate, name change or
  sync reaches either image: each fails with EIO), then write the disk that
  the cut leaves (``drop`` or ``torn``) into the disk directory; the answer
  is a JSON count of what was torn;
* ``arm N``: freeze by itself when the N-th change from now comes (that
  change fails): a cut at a chosen point of the processes' own writes;
* ``fail KIND N ERRNO ONCE|ALWAYS [SUFFIX]``: the N-th ``fsync`` (KIND
  ``fsync``: fsync and fdatasync of a file) or ``write`` from now, counting
  only files whose name ends with SUFFIX if one is given, fails with ERRNO
  (``EIO`` or ``ENOSPC``): that one only (``once``), or every later one too
  (``always``); ``fail off`` clears it. A failed write changes nothing. A
  failed fsync is fsyncgate as Linux does it (``Images.sync_failed``): the
  file's unsynced writes are NOT made durable and are forgotten, so a later
  fsync that succeeds does not bring them back, while processes still read
  them (the page cache keeps them);
* ``hold fsync SUFFIX``: the next ``fsync`` of a file whose name ends with
  SUFFIX waits, before it does anything, until ``release`` (a COMMIT held in
  its fsync, as by a slow disk); ``release`` lets it go on;
* ``stats``: JSON counts (``frozen`` says whether an armed cut came;
  ``fsyncs`` and ``writes`` count the file syncs and writes asked for,
  ``failed`` the ones a ``fail`` made fail, ``held`` the fsyncs waiting now).

Locks are not implemented on purpose: without ``lock`` and ``flock``
operations the kernel keeps POSIX and ``flock`` locks itself, between the
processes of this machine, which is what SQLite and queue_core need. Nor is
``direct_io`` set: SQLite's ``-shm`` file must be shared through ``mmap``,
which the kernel's page cache provides.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from proof.powerfs_image import MODES, Images, Mode

T = TypeVar("T")


FaultKind = Literal["fsync", "write"]
ERRNOS: Final = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}


@dataclass
class Fault:
    """A failure armed by ``fail``: the ``countdown``-th operation of ``kind`` fails."""

    kind: FaultKind
    countdown: int  # operations of this kind until the first failure (1: the next one)
    error: int  # an errno
    always: bool  # every later one fails too
    suffix: str = ""  # only files whose name ends so are counted ("": all)

    def fires(self, kind: FaultKind, path: str) -> bool:
        """Count one operation of ``kind`` on ``path``: whether it fails."""
        if kind != self.kind or not path.endswith(self.suffix):
            return False
        self.countdown -= 1
        return self.countdown == 0 or (self.always and self.countdown < 0)

    @classmethod
    def parse(cls, words: list[str]) -> Fault | None:
        """``fail KIND N ERRNO once|always [SUFFIX]`` as a fault, or None if malformed."""
        if not 5 <= len(words) <= 6 or words[0] != "fail":
            return None
        _, kind, count, name, repeat, *suffix = words
        if kind not in ("fsync", "write") or not count.isdigit() or int(count) < 1:
            return None
        if name not in ERRNOS or repeat not in ("once", "always"):
            return None
        return cls("fsync" if kind == "fsync" else "write", int(count), ERRNOS[name],
                   repeat == "always", suffix[0] if suffix else "")


class PowerOperations:
    """The mount's operations (mfusepy calls them by name), each under one lock."""

    use_ns = True  # times in nanoseconds (mfusepy)

    def __init__(self, images: Images) -> None:
        self.images = images
        self.live = images.live
        self._mutex = threading.Lock()
        self.frozen = False
        self.changes = 0  # changes that reached the live image
        self.armed: int | None = None  # freeze at this many more changes
        self.fault: Fault | None = None
        self.counts = {"fsyncs": 0, "writes": 0, "failed": 0, "held": 0}
        self.hold: str | None = None  # the suffix of the next fsync to hold
        self.released = threading.Event()

    def _real(self, path: str) -> str:
        return os.path.join(self.live, path.lstrip("/"))

    @staticmethod
    def _name(path: str | None, fh: int) -> str:
        """The file's path (libfuse may pass none with an open file: then the handle's)."""
        return path if path is not None else os.readlink(f"/proc/self/fd/{fh}")

    @staticmethod
    def _relative(path: str) -> str:
        return path.strip("/")

    @staticmethod
    def _parent(path: str) -> str:
        return os.path.dirname(path.strip("/"))

    def _change(
        self, action: Callable[[], T], kind: FaultKind | None = None, path: str = "",
        failed: Callable[[], None] | None = None,
    ) -> T:
        """Run a change of the live image, unless the power is cut (then: EIO) or a fault fires.

        ``kind`` and ``path`` say what it is, for ``fail``; ``failed`` runs
        instead of ``action`` when the fault fires, before the error is returned.
        """
        with self._mutex:
            if self.armed is not None:
                self.armed -= 1
                self.frozen = self.frozen or self.armed <= 0
            if self.frozen:
                raise OSError(errno.EIO, "the power is cut")
            if kind is not None:
                self.counts[f"{kind}s"] += 1
                if self.fault is not None and self.fault.fires(kind, path):
                    self.counts["failed"] += 1
                    # the harness reads daemon.log: which operation was made to fail
                    print(f"powerfs: {kind} of {path} fails: {errno.errorcode[self.fault.error]}",
                          file=sys.stderr, flush=True)
                    if failed is not None:
                        failed()
                    raise OSError(self.fault.error, os.strerror(self.fault.error))
            self.changes += 1
            return action()

    def _look(self, action: Callable[[], T]) -> T:
        with self._mutex:
            return action()

    # ------------------------------------------------------------ reading
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        def look() -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
            return {key: getattr(st, key) for key in (
                "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino",
                "st_atime_ns", "st_mtime_ns", "st_ctime_ns")} | {
                "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                "st_ctime": st.st_ctime_ns}
        return self._look(look)

    def readdir(self, path: str, fh: int) -> Iterator[str]:
        return iter([".", "..", *self._look(lambda: os.listdir(self._real(path)))])

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise OSError(errno.EACCES, "no access")
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.live)
        return {key: getattr(st, key) for key in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
            "f_files", "f_flag", "f_frsize", "f_namemax")}

    def open(self, path: str, flags: int) -> int:
        if flags & os.O_TRUNC:
            return self._change(lambda: self._open_truncated(path, flags))
        return self._look(lambda: os.open(self._real(path), flags & ~os.O_CREAT))

    def _open_truncated(self, path: str, flags: int) -> int:
        fd = os.open(self._real(path), flags)
        self.images.resized(self._relative(path))
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self._look(lambda: os.pread(fh, size, offset))

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        return 0

    # ------------------------------------------------------------ writing
    def create(self, path: str, mode: int, flags: int) -> int:
        def create() -> int:
            real = self._real(path)
            existed = os.path.exists(real)
            fd = os.open(real, flags | os.O_CREAT, mode)
            if not existed:
                self.images.new_file(self._relative(path))
                self.images.renamed(self._parent(path))
            return fd
        return self._change(create)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        def write() -> int:
            written = os.pwrite(fh, data, offset)
            self.images.wrote(fh, offset, written)
            return written
        return self._change(write, "write", self._name(path, fh))

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        def truncate() -> int:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._real(path), length)
            self.images.resized(self._relative(path))
            return 0
        return self._change(truncate)

    def _held(self, path: str) -> None:
        """The fsync that ``hold`` named waits here (outside the mutex) until ``release``."""
        with self._mutex:
            if self.hold is None or not path.endswith(self.hold):
                return
            self.hold = None
            self.counts["held"] += 1
        self.released.wait()
        with self._mutex:
            self.counts["held"] -= 1

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._held(self._name(path, fh))
        return self._change(lambda: self.images.sync_file(fh), "fsync", self._name(path, fh),
                            lambda: self.images.sync_failed(fh)) or 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return self._change(lambda: self.images.sync_dir(self._relative(path))) or 0

    def unlink(self, path: str) -> int:
        def unlink() -> int:
            os.unlink(self._real(path))
            self.images.renamed(self._parent(path))
            return 0
        return self._change(unlink)

    def rename(self, old: str, new: str) -> int:
        def rename() -> int:
            if os.path.isdir(self._real(old)):
                # a directory's subtree is kept by path: moving one is not modelled
                raise OSError(errno.EXDEV, "powerfs does not move directories")
            os.rename(self._real(old), self._real(new))
            self.images.renamed(self._parent(old))
            if self._parent(new) != self._parent(old):
                self.images.renamed(self._parent(new))
            return 0
        return self._change(rename)

    def mkdir(self, path: str, mode: int) -> int:
        def mkdir() -> int:
            os.mkdir(self._real(path), mode)
            self.images.renamed(self._parent(path))
            return 0
        return self._change(mkdir)

    def rmdir(self, path: str) -> int:
        def rmdir() -> int:
            os.rmdir(self._real(path))
            self.images.renamed(self._parent(path))
            return 0
        return self._change(rmdir)

    def chmod(self, path: str, mode: int) -> int:
        return self._change(lambda: os.chmod(self._real(path), mode)) or 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return self._change(lambda: os.chown(self._real(path), uid, gid)) or 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        def utimens() -> int:
            if times is None:
                os.utime(self._real(path))
            else:
                os.utime(self._real(path), ns=times)
            return 0
        return self._change(utimens)

    # ------------------------------------------------------------ control
    def command(self, line: str, disk: Path) -> dict[str, Any]:
        words = line.split()
        with self._mutex:
            if words == ["sync"] and not self.frozen:
                self.images.sync_all()
                return {"ok": True}
            if words == ["stats"]:
                return {"ok": True, "syncs": self.images.syncs, "changes": self.changes,
                        "dir_syncs": self.images.dir_syncs, "frozen": self.frozen,
                        "lost_units": self.images.lost_units, **self.counts}
            if words == ["fail", "off"]:
                self.fault = None
                return {"ok": True}
            fault = Fault.parse(words)
            if fault is not None:
                self.fault = fault
                return {"ok": True}
            if len(words) == 3 and words[:2] == ["hold", "fsync"]:
                self.hold = words[2]
                self.released.clear()
                return {"ok": True}
            if words == ["release"]:
                self.released.set()
                return {"ok": True}
            if len(words) == 2 and words[0] == "arm" and words[1].isdigit():
                self.armed = int(words[1])
                return {"ok": True}
            if len(words) == 3 and words[0] == "cut" and words[1] in MODES:
                self.frozen = True
                mode: Mode = "drop" if words[1] == "drop" else "torn"
                counts = self.images.materialize(disk, mode, int(words[2]))
                return {"ok": True, **counts}
        return {"ok": False, "error": f"unknown command {line!r}"}


def _serve(control: Path, operations: PowerOperations, disk: Path) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(control))
    server.listen()
    while True:
        connection, _ = server.accept()
        with connection, connection.makefile("rw", encoding="utf-8") as stream:
            line = stream.readline()
            try:
                answer = operations.command(line, disk)
            except Exception as exc:  # the harness must hear of it, not hang
                answer = {"ok": False, "error": repr(exc)}
            stream.write(json.dumps(answer) + "\n")
            stream.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="powerfs_daemon")
    parser.add_argument("--disk", type=Path, required=True)
    parser.add_argument("--live", type=Path, required=True)
    parser.add_argument("--mount", type=Path, required=True)
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--lying-fsync", action="store_true")
    args = parser.parse_args(argv)
    import mfusepy  # the daemon alone needs libfuse

    images = Images.from_disk(args.disk, args.live, lying_fsync=args.lying_fsync)
    operations = PowerOperations(images)
    thread = threading.Thread(
        target=_serve, args=(args.control, operations, args.disk), daemon=True
    )
    thread.start()
    # kernel_cache: the page cache is not thrown away at each open (every change
    # passes through this mount, so it is never stale), which keeps the pages
    # of SQLite's -shm that other processes have mapped. hard_remove: unlink a
    # file that is still open at once, instead of libfuse renaming it to
    # .fuse_hidden* (a name change the durable image would have to follow).
    mfusepy.FUSE(operations, str(args.mount), foreground=True, fsname="powerfs",
                 kernel_cache=True, hard_remove=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
