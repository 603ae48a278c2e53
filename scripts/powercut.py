"""Power cuts on a filesystem that loses what was not synced; prints the table.

    python scripts/powercut.py                  # a quick table (a few cuts per row, about a minute)
    python scripts/powercut.py --long           # the long table: 200 cuts of the queue at FULL, and more
    python scripts/powercut.py --long --record  # ... and write it as evidence/power-cuts.json
    python scripts/powercut.py --seed 7         # other random choices (timing still varies)

Needs FUSE (/dev/fuse, Debian's fuse3, mfusepy from requirements-test.txt).
Exit status 0 when raw SQLite at FULL and the queue at FULL lost, doubled and
corrupted nothing and the negative controls (raw SQLite at OFF, the queue at
NORMAL) did lose acknowledged commits; 1 otherwise; 2 when FUSE is missing.
The functions live in proof/powercut.py; see the page "A power cut, measured".
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proof import records  # noqa: E402
from proof.powercut_table import LONG, NAME, QUICK, run_table, table_lines  # noqa: E402
from proof.powerfs import fuse_available  # noqa: E402


def verdict(rows: list[dict[str, object]]) -> list[str]:
    """What is wrong with a table: a loss where none may be, or a control that lost nothing."""
    wrong = []
    for row in rows:
        name = f"{row['subject']} {row['mode']}"
        if row["subject"] in ("sqlite FULL", "queue FULL") and not row["ok"]:
            wrong.append(f"{name}: {row['lost']} lost, {row['doubles']} doubled, "
                         f"{row['corruptions']} corrupt, violations {row['violations']}")
        if row["subject"] in ("sqlite OFF", "queue NORMAL") and not row["lost"]:
            wrong.append(f"{name}: the negative control lost nothing")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/powercut.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help=f"the long table: {dict(LONG)}")
    parser.add_argument("--record", action="store_true",
                        help="write the record into evidence/ (records.COMMITTED)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random choices")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    why = fuse_available()
    if why is not None:
        print(f"python scripts/powercut.py: cannot mount the power-cut filesystem: {why}",
              file=sys.stderr)
        return 2
    params = dict(LONG if args.long else QUICK)
    if args.seed is not None:
        params["seed"] = args.seed

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="queue-core-powercut-") as workdir:
        rows = run_table(params, Path(workdir), progress)
    folder = records.COMMITTED if args.record else Path(tempfile.gettempdir())
    record = records.save_record(NAME, params, rows, by="scripts/powercut.py"
                                 + (" --long" if args.long else ""),
                                 seconds=time.monotonic() - began, folder=folder)
    print("\n".join(table_lines(record)))
    wrong = verdict(rows)
    for line in wrong:
        print(f"WRONG: {line}", file=sys.stderr)
    if args.record:
        print(f"recorded in {folder / 'power-cuts.json'}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
