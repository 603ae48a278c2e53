"""A filesystem that loses what was not synced: mount it, work on it, cut the power.

``PowerFS(root)`` keeps a *disk* (``root/disk``, a plain directory) and mounts
it at ``root/mnt`` through FUSE (``powerfs_daemon``, a process of its own).
Processes see the live image; only ``fsync``/``fdatasync`` of a file (its bytes
and size) and ``fsync`` of a directory (its names) reach the durable image
(``powerfs_image``). ``cut(mode, seed, victims)`` is a power cut:

1. the filesystem freezes: no further write reaches either image, and the
   disk the cut leaves is written (``drop``: the durable image; ``torn``: a
   seeded mixture of the versions of every unsynced 512-byte unit, size and
   directory);
2. every process using the mount is SIGKILLed (``victims``; any other process
   still holding a file there is an error of the harness, reported);
3. the filesystem is unmounted.

``hold_fsync(suffix)`` makes the next fsync of such a file wait until
``release()``: a COMMIT held in its fsync. ``fail(kind, at, ...)`` makes the filesystem fail instead: the ``at``-th
``fsync`` or ``write`` from now returns EIO or ENOSPC, once or from then on; a
failed fsync loses the file's unsynced writes for good (fsyncgate, modelled as
Linux behaves: ``powerfs_image``). A remount clears it.

``mount()`` again then shows only what the cut left. The kernel keeps the
locks (POSIX and ``flock``) and shares ``mmap`` pages, so SQLite in WAL mode
works across processes as on a local disk.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from proof.powerfs_daemon import FaultKind
from proof.powerfs_image import Mode

__all__ = ["MOUNT_SECONDS", "PowerFS", "fuse_available", "mounted"]

MOUNT_SECONDS: Final = 30.0  # far more than a mount takes, even on a loaded machine


def fuse_available() -> str | None:
    """None if this machine can mount the power-cut filesystem; else why not."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot load libfuse 3: {exc}"
    return None


class PowerFS:
    """A disk under ``root`` that can be mounted, written, and cut."""

    def __init__(self, root: str | Path, *, lying_fsync: bool = False) -> None:
        self.root = Path(root)
        self.disk = self.root / "disk"
        self.mountpoint = self.root / "mnt"
        self.control = self.root / "control.sock"
        self.lying_fsync = lying_fsync
        self.daemon: subprocess.Popen[str] | None = None
        self._cut = False
        self.disk.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)

    def mount(self) -> Path:
        """Mount the disk; returns the mount point. Everything on the disk is durable."""
        if self.daemon is not None:
            raise RuntimeError("already mounted")
        self._cut = False
        self.control.unlink(missing_ok=True)
        command = [
            sys.executable, "-m", "proof.powerfs_daemon", "--disk", str(self.disk),
            "--live", str(self.root / "live"), "--mount", str(self.mountpoint),
            "--control", str(self.control),
        ]
        if self.lying_fsync:
            command.append("--lying-fsync")
        # its messages go to a file: a pipe nobody reads could fill and stop it
        with open(self.root / "daemon.log", "a", encoding="utf-8") as messages:
            self.daemon = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=messages, text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
        deadline = time.monotonic() + MOUNT_SECONDS
        while not (os.path.ismount(self.mountpoint) and self.control.exists()):
            if self.daemon.poll() is not None:
                self.daemon = None
                log = (self.root / "daemon.log").read_text(encoding="utf-8")
                raise RuntimeError(f"the powerfs daemon exited: {log[-2000:]}")
            if time.monotonic() > deadline:
                self._stop_daemon()
                raise TimeoutError("the powerfs mount did not appear")
            time.sleep(0.01)
        return self.mountpoint

    def ask(self, line: str) -> dict[str, Any]:
        """One control command (``sync``, ``stats``, ``cut MODE SEED``, ``fail ...``); its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(MOUNT_SECONDS)
            connection.connect(str(self.control))
            connection.sendall(line.encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = connection.recv(65536)
                if not chunk:
                    break
                answer += chunk
        data: dict[str, Any] = json.loads(answer)
        if not data.get("ok"):
            raise RuntimeError(f"powerfs refused {line!r}: {data.get('error')}")
        return data

    def sync(self) -> None:
        """Make everything durable (as a clean shutdown's ``sync`` would)."""
        self.ask("sync")

    def fail(
        self, kind: FaultKind, at: int, error: str = "EIO", *, always: bool = False,
        suffix: str = "",
    ) -> None:
        """Make the ``at``-th ``kind`` (``fsync`` or ``write``) from now fail with ``error``.

        ``always``: every later one fails too. ``suffix``: only files whose name
        ends with it are counted (e.g. ``-wal``). ``fail_off()`` clears it.
        """
        repeat = "always" if always else "once"
        self.ask(" ".join(["fail", kind, str(at), error, repeat, *([suffix] if suffix else [])]))

    def hold_fsync(self, suffix: str) -> None:
        """The next ``fsync`` of a file whose name ends with ``suffix`` waits until ``release()``.

        ``stats()["held"]`` counts the fsyncs waiting now.
        """
        self.ask(f"hold fsync {suffix}")

    def release(self) -> None:
        """A held ``fsync`` goes on."""
        self.ask("release")

    def stats(self) -> dict[str, Any]:
        """The daemon's counts (``stats``)."""
        return self.ask("stats")

    def fail_off(self) -> None:
        """No operation fails any more (the counts in ``stats`` stay)."""
        self.ask("fail off")

    def cut(
        self, mode: Mode, seed: int, victims: Iterable[subprocess.Popen[Any]] = ()
    ) -> dict[str, Any]:
        """Cut the power: freeze, SIGKILL ``victims``, unmount. Returns what was torn."""
        counts = self.ask(f"cut {mode} {seed}")
        self._cut = True
        for process in victims:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in victims:
            process.wait()
        strangers = users_of(self.mountpoint)
        self.unmount()
        if strangers:
            raise RuntimeError(f"processes outside the run used the mount: {strangers}")
        return counts

    def unmount(self) -> None:
        """Unmount; without a cut, cleanly: everything is synced and kept on the disk first."""
        if self.daemon is None:
            return
        if not self._cut and self.daemon.poll() is None:
            try:
                self.ask("sync")
                self.ask("cut drop 0")
            except (OSError, RuntimeError):
                pass  # frozen or gone: the disk keeps what the last cut wrote
        self._cut = False
        if os.path.ismount(self.mountpoint):
            done = subprocess.run(["fusermount3", "-u", str(self.mountpoint)],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)],
                               capture_output=True, check=False)
        self._stop_daemon()

    def _stop_daemon(self) -> None:
        assert self.daemon is not None
        try:
            self.daemon.wait(timeout=MOUNT_SECONDS)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait()
        self.daemon = None


def users_of(mountpoint: Path) -> list[int]:
    """The processes (other than this one) with a file or their directory under ``mountpoint``."""
    prefix = str(mountpoint.resolve()) + os.sep
    users = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            links = [os.readlink(f"/proc/{pid}/cwd")] + [
                os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
            ]
        except OSError:
            continue
        if any((link + os.sep).startswith(prefix) for link in links):
            users.append(int(pid))
    return users


@contextmanager
def mounted(fs: PowerFS) -> Iterator[Path]:
    """``fs`` mounted for the block; unmounted after it (a cut inside may already have done so)."""
    path = fs.mount()
    try:
        yield path
    finally:
        fs.unmount()
