"""I/O errors at every counted point: a failing fsync or write, a power cut after; prints the table.

    python scripts/ioerr.py                  # a quick table (points 1 to 5, a minute or two)
    python scripts/ioerr.py --long           # every point from 1 to 12 (a few minutes)
    python scripts/ioerr.py --long --record  # ... and write it as evidence/io-errors.json
    python scripts/ioerr.py --seed 7         # other payloads

Needs FUSE (/dev/fuse, Debian's fuse3, mfusepy from requirements-test.txt).
Exit status 0 when no fault lost acknowledged work or broke an invariant and
both negative controls (a wrapper that ignores the error; a disk that
recovers with no restart) did lose acknowledged work; 1 otherwise; 2 when
FUSE is missing. The functions live in proof/ioerr.py and proof/ioerr_table.py;
see the page "A power cut, measured", section "I/O errors".
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
from proof.ioerr_table import LONG, NAME, QUICK, run_table, table_lines, verdict  # noqa: E402
from proof.powerfs import fuse_available  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/ioerr.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help=f"the long table: {dict(LONG)}")
    parser.add_argument("--record", action="store_true",
                        help="write the record into evidence/ (records.COMMITTED)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the payloads")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    why = fuse_available()
    if why is not None:
        print(f"python scripts/ioerr.py: cannot mount the power-cut filesystem: {why}",
              file=sys.stderr)
        return 2
    params = dict(LONG if args.long else QUICK)
    if args.seed is not None:
        params["seed"] = args.seed

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="queue-core-ioerr-") as workdir:
        rows = run_table(params, Path(workdir), progress)
    folder = records.COMMITTED if args.record else Path(tempfile.gettempdir())
    record = records.save_record(NAME, params, rows, by="scripts/ioerr.py"
                                 + (" --long" if args.long else ""),
                                 seconds=time.monotonic() - began, folder=folder)
    print("\n".join(table_lines(record)))
    wrong = verdict(rows)
    for line in wrong:
        print(f"WRONG: {line}", file=sys.stderr)
    if args.record:
        print(f"recorded in {folder / f'{NAME}.json'}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
