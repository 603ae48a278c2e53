"""Records of the evidence runs: what a run found, for which code, on which machine.

The tests run the crash matrix, the random kills and the contention run and
leave a record of each (JSON) in a folder the caller names; the page "How we
know" shows a record only if it was made for exactly this code (the same
fingerprint) and the same parameters, and otherwise runs the evidence itself
while the site is built. Either way the page shows figures measured on this
code. Nothing here guesses where records live: every caller passes the folder
(the tests and the docs build pass ``<repository>/test-artifacts/evidence``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import sqlite3
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# queue_core/, whose code a record is made for, and this proof machinery
PACKAGE = Path(__file__).resolve().parent.parent / "queue_core"
PROOF = Path(__file__).resolve().parent
# Long runs (minutes to an hour: thousands of kills, hundreds of power cuts) are
# not made by the test suite; their records are committed here, and the pages
# print them with the commit and fingerprint they were made for.
COMMITTED = PROOF.parent / "evidence"

__all__ = [
    "COMMITTED",
    "Record",
    "commit_of_tree",
    "fingerprint",
    "load_committed",
    "load_record",
    "recorded",
    "save_record",
]


def fingerprint() -> str:
    """A short hash of queue_core's code, schemas and proof machinery: a record is fresh only for the same code."""
    digest = hashlib.sha256()
    files = [
        *PACKAGE.rglob("*.py"),
        *PACKAGE.rglob("*.sql"),
        *PROOF.glob("*.py"),
    ]
    for path in sorted(files):
        root = PACKAGE if path.is_relative_to(PACKAGE) else PROOF
        digest.update(
            (root.name + "/" + path.relative_to(root).as_posix()).encode()
            + b"\0"
            + path.read_bytes()
            + b"\0"
        )
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Record:
    """One run's result (as JSON values) and where it comes from."""

    name: str
    fingerprint: str
    params: Mapping[str, Any]
    by: str  # who ran it: a test, or the page itself
    recorded_at: str
    seconds: float
    python: str
    sqlite: str
    system: str
    # the run's result as JSON values (a ``to_dict()``)
    result: Any = field(default=None)
    # the git commit the run was made on ("<sha>-dirty" with uncommitted
    # changes, "" outside a git checkout)
    commit: str = ""

    @property
    def machine(self) -> str:
        return f"Python {self.python}, SQLite {self.sqlite}, {self.system}"

    @property
    def for_this_code(self) -> bool:
        return self.fingerprint == fingerprint()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "params": dict(self.params)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        # records made before ``commit`` existed lack it
        return cls(**{name: data[name] for name in cls.__dataclass_fields__
                      if name in data or name != "commit"})


def commit_of_tree() -> str:
    """The checkout's HEAD commit, with ``-dirty`` if files other than the records differ; "" outside git."""
    root = PROOF.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        # the committed records themselves are not code: a long run that writes
        # one while another runs must not make the other's tree "dirty"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no",
                                "--", ".", f":(exclude){COMMITTED.name}"],
                               cwd=root, capture_output=True, text=True, timeout=30,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{head}-dirty" if dirty else head


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def save_record(
    name: str,
    params: Mapping[str, Any],
    result: Any,
    *,
    by: str,
    seconds: float,
    folder: str | Path,
) -> Record:
    """Write ``result`` (JSON values, or objects with ``to_dict()``) as ``folder/name.json``; return the record.

    A folder that cannot be written (a read-only tree) is not an error: the
    record is still returned.
    """
    record = Record(
        name=name,
        fingerprint=fingerprint(),
        params=json.loads(json.dumps(dict(params))),
        by=by,
        recorded_at=datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M UTC"
        ),
        seconds=round(seconds, 1),
        python=platform.python_version(),
        sqlite=sqlite3.sqlite_version,
        system=f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        result=_jsonable(result),
        commit=commit_of_tree(),
    )
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # whole or not at all: a page that reads the record while a test
        # process writes it (pytest-xdist workers) never sees half of it
        part = folder / f".{name}.{os.getpid()}.json"
        part.write_text(json.dumps(record.to_dict(), indent=1) + "\n", encoding="utf-8")
        os.replace(part, folder / f"{name}.json")
    except OSError:
        pass
    return record


def load_record(
    name: str, params: Mapping[str, Any], *, folder: str | Path
) -> Record | None:
    """The record ``folder/name.json`` if it exists and was made for this code and these parameters."""
    try:
        data = json.loads((Path(folder) / f"{name}.json").read_text(encoding="utf-8"))
        record = Record.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not record.for_this_code or record.params != json.loads(
        json.dumps(dict(params))
    ):
        return None
    return record


def load_committed(name: str) -> Record | None:
    """The committed long-run record ``evidence/name.json``, whatever code it was made for.

    A page that prints it says which commit and fingerprint it was made for,
    and whether that is this code (``Record.for_this_code``).
    """
    try:
        data = json.loads((COMMITTED / f"{name}.json").read_text(encoding="utf-8"))
        return Record.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def recorded(
    name: str,
    params: Mapping[str, Any],
    run: Callable[[], Any],
    *,
    by: str,
    folder: str | Path,
) -> Record:
    """The fresh record ``name`` in ``folder``, or run ``run()`` now and record it (``by`` says who ran it)."""
    record = load_record(name, params, folder=folder)
    if record is None:
        began = time.monotonic()
        result = run()
        record = save_record(
            name, params, result, by=by, seconds=time.monotonic() - began, folder=folder
        )
    return record
