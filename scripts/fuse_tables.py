"""The command line both FUSE table scripts share: run a quick or long table, print it, judge it.

``scripts/powercut.py`` (power cuts) and ``scripts/ioerr.py`` (I/O errors)
each describe their table with a ``Table`` and call ``main``: the options
(--long, --record, --seed, --quiet), the FUSE check, the run in a temporary
folder, the record, the table and the verdict are the same for both.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proof import records  # noqa: E402
from proof.powerfs import fuse_available  # noqa: E402

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Table:
    """What one script runs: its record's name, its two sizes and its table's functions."""

    script: str  # "scripts/powercut.py"
    name: str  # the record's name
    quick: Mapping[str, Any]
    long: Mapping[str, Any]
    run: Callable[[dict[str, Any], Path, Callable[[str], None]], Rows]
    lines: Callable[[records.Record], list[str]]
    verdict: Callable[[Rows], list[str]]  # what is wrong with the rows; [] when nothing is
    seed_help: str


def main(table: Table, description: str, argv: list[str] | None = None) -> int:
    """Exit status 0 when the verdict finds nothing wrong, 1 otherwise, 2 without FUSE."""
    parser = argparse.ArgumentParser(prog=f"python {table.script}", description=description)
    parser.add_argument("--long", action="store_true", help=f"the long table: {dict(table.long)}")
    parser.add_argument("--record", action="store_true",
                        help="write the record into evidence/ (records.COMMITTED)")
    parser.add_argument("--seed", type=int, default=None, help=table.seed_help)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    why = fuse_available()
    if why is not None:
        print(f"python {table.script}: cannot mount the power-cut filesystem: {why}", file=sys.stderr)
        return 2
    params = dict(table.long if args.long else table.quick)
    if args.seed is not None:
        params["seed"] = args.seed

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    began = time.monotonic()
    prefix = f"queue-core-{Path(table.script).stem}-"
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir:
        rows = table.run(params, Path(workdir), progress)
    folder = records.COMMITTED if args.record else Path(tempfile.gettempdir())
    record = records.save_record(table.name, params, rows,
                                 by=table.script + (" --long" if args.long else ""),
                                 seconds=time.monotonic() - began, folder=folder)
    print("\n".join(table.lines(record)))
    wrong = table.verdict(rows)
    for line in wrong:
        print(f"WRONG: {line}", file=sys.stderr)
    if args.record:
        print(f"recorded in {folder / f'{table.name}.json'}", file=sys.stderr)
    return 1 if wrong else 0
