"""The site build's cache of executed blocks: an unchanged block is not run again.

``make serve`` and ``make live`` set ``QUEUE_CORE_EXEC_CACHE`` (to ``.cache/exec``);
``overrides/build_cache.py`` then asks this module for each executed block's
output before markdown-exec runs it. ``make site``, ``make test`` and the
docs-as-tests never set it: they execute every block.

An output is reused only while everything it was made from is the same:

* the block as markdown-exec runs it (its source after the includes) and its
  options (``returncode``, ``id``, ``workdir``, ``width`` and the rest);
* every file of the repository outside ``docs/`` (what ``git ls-files`` lists,
  tracked and untracked-but-not-ignored: queue_core/, docs_support/, proof/,
  evidence/, snippets/, tests/, the pinned requirements...) and that list itself;
* the Python, SQLite and installed distributions that run it, and the
  environment variables a page can print (``REPO_URL``, ``SITE_URL``,
  ``QUEUE_CORE_*``);
* every other file the block opened while it ran (a page under ``docs/``, a
  record under ``test-artifacts/``: seen by an audit hook, ``sys.addaudithook``),
  and every folder it listed. A block that starts another process may read
  anything: it depends on every file under ``docs/`` as well, unless the process
  is this interpreter running the repository's own ``queue_core`` or ``proof``
  (``python -m ...``) with no argument naming ``docs``.

The first three make the entry's key; the last is stored in the entry and checked
again before the output is reused. A block that fails is never stored, and a
block that prints the date or the time of day (``datetime.now()``,
``time.time()``...) runs in every build.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VERSION = 1  # of the entries' format: a new format never reads an old entry
ENVIRONMENT = ("REPO_URL", "SITE_URL")
ENVIRONMENT_PREFIX = "QUEUE_CORE_"
# What a block reads only if it opens it (the rest of the repository is in every key).
TRACKED_BY_READS = ("docs",)
READ_ONLY_IF_OPENED = tuple(f"{folder}/" for folder in TRACKED_BY_READS)
# Never a dependency: what the build and the cache write themselves.
OWN = (".git", ".cache", "site", ".venv", ".venv-docs", ".venv-bench")
# Started another process: it may read anything.
# The repository's own programs, run as ``python -m``: what they read is in every key.
REPOSITORY_PROGRAMS = ("queue_core", "proof")
SPAWNS = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
)
LISTS = ("os.listdir", "os.scandir", "glob.glob")


# A block that prints the date or the time of day runs in every build: its
# output is "now", which no recorded output is. (A duration it measures, with
# time.monotonic or perf_counter, is a measurement of the same code: reused.)
READS_THE_CLOCK = re.compile(
    r"\b(?:datetime\.(?:now|utcnow|today)|date\.today"
    r"|time\.(?:time|time_ns|strftime|gmtime|localtime|ctime|asctime))\s*\("
)


def reads_the_clock(code: str) -> bool:
    return READS_THE_CLOCK.search(code) is not None


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def repository_files(root: Path) -> list[str]:
    """The repository's files, relative: ``git ls-files`` (tracked and untracked, not ignored)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8", "surrogateescape")
        names = {name for name in listed.split("\0") if name}
    except (
        OSError,
        subprocess.CalledProcessError,
    ):  # not a clone: every file but our own
        names = {
            path.relative_to(root).as_posix()
            for path in root.rglob("*")
            if path.is_file()
            and path.relative_to(root).parts[0] not in OWN
            and "node_modules" not in path.parts
            and "__pycache__" not in path.parts
        }
    return sorted(
        name
        for name in names
        if name.split("/")[0] not in OWN and (root / name).is_file()
    )


class Hashes:
    """File contents' hashes, read again only when a file's size or time changed."""

    def __init__(self) -> None:
        self._known: dict[Path, tuple[int, int, str]] = {}

    def of(self, path: Path) -> str | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        if path.is_dir():
            names = [n for n in os.listdir(path) if n != "__pycache__" and n not in OWN]
            return "dir:" + sha("\0".join(sorted(names)).encode())
        known = self._known.get(path)
        if known is not None and known[:2] == (stat.st_mtime_ns, stat.st_size):
            return known[2]
        digest = sha(path.read_bytes())
        self._known[path] = (stat.st_mtime_ns, stat.st_size, digest)
        return digest


def environment() -> dict[str, Any]:
    """What runs a block, beside the repository: interpreter, SQLite, distributions, variables."""
    dists = sorted(
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in importlib.metadata.distributions()
        if dist.metadata["Name"]
    )
    variables = {
        name: value
        for name, value in os.environ.items()
        if name in ENVIRONMENT
        or (
            name.startswith(ENVIRONMENT_PREFIX)
            and not name.startswith("QUEUE_CORE_EXEC")
        )
    }
    return {
        "python": sys.version,
        "executable": sys.executable,
        "sqlite": sqlite3.sqlite_version,
        "platform": sys.platform,
        "distributions": dists,
        "variables": variables,
    }


def reads_no_docs(executable: Any, args: Any) -> bool:
    """A process that cannot read docs/: this interpreter running ``-m`` queue_core or proof.

    Their code is in every key and reads nothing under docs/; any argument naming
    ``docs``, another program or a shell makes the block depend on all of docs/.
    """
    if not isinstance(args, (list, tuple)):
        return False  # a shell command line
    try:
        argv = [os.fsdecode(arg) for arg in args]
        program = os.fsdecode(executable) if executable is not None else argv[0]
    except (TypeError, IndexError):
        return False
    if any("docs" in arg for arg in argv) or "-m" not in argv[:-1]:
        return False
    if os.path.realpath(program) != os.path.realpath(sys.executable):
        return False
    module = argv[argv.index("-m") + 1]
    return module.split(".")[0] in REPOSITORY_PROGRAMS


class Reads:
    """The repository's files and folders opened or listed, and whether a process started.

    One audit hook for the whole process (hooks cannot be removed); it records
    only between ``start()`` and ``stop()``.
    """

    _installed = False
    _current: Reads | None = None
    _lock = threading.Lock()

    def __init__(self, root: Path) -> None:
        self.root = root
        self.opened: set[str] = set()
        self.listed: set[str] = set()
        self.spawned = False

    @classmethod
    def _hook(cls, event: str, args: tuple[Any, ...]) -> None:
        reads = cls._current
        if reads is None:
            return
        if event == "subprocess.Popen" and len(args) >= 2:
            if not reads_no_docs(args[0], args[1]):
                reads.spawned = True
        elif event.startswith(SPAWNS):
            reads.spawned = True
        elif event == "open" or event in LISTS:
            where = args[0] if args else None
            if isinstance(where, (str, bytes, os.PathLike)):
                reads._note(os.fsdecode(where), listed=event != "open")

    def _note(self, where: str, *, listed: bool) -> None:
        try:
            path = Path(os.path.abspath(where))
            relative = path.relative_to(self.root).as_posix()
        except (ValueError, OSError):
            return  # outside the repository: a temporary folder, the interpreter
        if relative.split("/")[0] in OWN or "__pycache__" in relative:
            return
        if relative == "." and listed:
            # The import system lists the repository's root whenever the root
            # changed; the names there that a block can depend on are the
            # repository's files, already in every key.
            return
        (self.listed if listed else self.opened).add(relative)

    def start(self) -> None:
        with Reads._lock:
            if not Reads._installed:
                sys.addaudithook(Reads._hook)
                Reads._installed = True
            Reads._current = self

    def stop(self) -> None:
        Reads._current = None


class ExecCache:
    """Outputs of executed blocks in ``folder``, one JSON file per block and dependencies."""

    def __init__(self, folder: Path, root: Path = ROOT) -> None:
        self.folder = Path(folder)
        self.root = Path(root)
        self.hashes = Hashes()
        self._base: str | None = None
        self._docs: set[str] = set()  # the files under docs/ when the base was taken
        self.ran = 0
        self.reused = 0

    def refresh(self) -> str:
        """The fingerprint of the repository outside ``docs/`` and of the environment, now."""
        files = repository_files(self.root)
        self._docs = {name for name in files if name.startswith(READ_ONLY_IF_OPENED)}
        digest = hashlib.sha256()
        digest.update(json.dumps(environment(), sort_keys=True).encode())
        for name in files:
            digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
            if not name.startswith(READ_ONLY_IF_OPENED):
                digest.update(
                    (self.hashes.of(self.root / name) or "-").encode() + b"\0"
                )
        self._base = digest.hexdigest()
        return self._base

    @property
    def base(self) -> str:
        return self._base if self._base is not None else self.refresh()

    def key(self, code: str, options: Mapping[str, Any]) -> str:
        where = os.path.relpath(os.getcwd(), self.root)
        return sha(
            json.dumps(
                [VERSION, self.base, where, code, dict(options)],
                sort_keys=True,
                default=str,
            ).encode()
        )

    def entry_path(self, key: str) -> Path:
        return self.folder / "blocks" / f"{key}.json"

    def _dependencies(self, reads: Reads) -> dict[str, str | None]:
        names = set(reads.opened) | set(reads.listed)
        if reads.spawned:
            _ = self.base  # takes the list of docs/ files
            names |= self._docs
        return {name: self.hashes.of(self.root / name) for name in sorted(names)}

    def _fresh(self, entry: Mapping[str, Any]) -> bool:
        if entry.get("version") != VERSION:
            return False
        deps: Mapping[str, str | None] = entry.get("dependencies", {})
        if entry.get("spawned"):
            _ = self.base  # takes the list of docs/ files
            if not self._docs <= set(deps):  # a new page it could have read
                return False
        return all(
            self.hashes.of(self.root / name) == digest for name, digest in deps.items()
        )

    def lookup(self, key: str) -> str | None:
        """The recorded output of the block ``key``, if everything it read is unchanged."""
        try:
            entry = json.loads(self.entry_path(key).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if not self._fresh(entry):
            return None
        output: str = entry["output"]
        return output

    def seconds(self, key: str) -> float:
        try:
            return float(json.loads(self.entry_path(key).read_text("utf-8"))["seconds"])
        except (OSError, ValueError, KeyError):
            return 0.0

    def record(self, key: str, run: Callable[[], str], *, page: str = "") -> str:
        """Run the block (``run()``), store its output with what it read, and return it."""
        reads = Reads(self.root)
        began = time.monotonic()
        reads.start()
        try:
            output = run()  # an exception (the block failed) stores nothing
        finally:
            reads.stop()
        entry = {
            "version": VERSION,
            "page": page,
            "seconds": round(time.monotonic() - began, 3),
            "spawned": reads.spawned,
            "dependencies": self._dependencies(reads),
            "output": output,
        }
        self.write(key, entry)
        self.ran += 1
        return output

    def write(self, key: str, entry: Mapping[str, Any]) -> None:
        path = self.entry_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp"
        ) as tmp:
            json.dump(entry, tmp)
        os.replace(tmp.name, path)  # whole or not at all, for a helper reading it

    def output(
        self,
        code: str,
        options: Mapping[str, Any],
        run: Callable[[], str],
        *,
        page: str = "",
    ) -> tuple[str, bool]:
        """``(output, ran)``: the recorded output if it is fresh, else the block's, run now."""
        if reads_the_clock(code):
            self.ran += 1
            return run(), True
        key = self.key(code, options)
        cached = self.lookup(key)
        if cached is not None:
            self.reused += 1
            return cached, False
        return self.record(key, run, page=page), True
