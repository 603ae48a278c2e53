"""The crash matrix: every write operation dies at every point it reaches, two ways; prints a summary.

    python scripts/crash_matrix.py            # run it, print the summary as JSON
    python scripts/crash_matrix.py --record   # ... and write evidence/crash-matrix.json (to commit)

The test suite runs the same matrix (tests/test_crash_matrix.py) and leaves its
record in test-artifacts/evidence/, which is not committed; the page "Crashes,
as timelines" draws every case from the committed record, and says which code
it was made for. Exit status 0 when no case violated anything, 1 otherwise.
The functions live in ``proof/matrix.py``; see the page "How we know".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proof import matrix, records  # noqa: E402

RECORD_NAME = "crash-matrix"
RECORDED_BY = "scripts/crash_matrix.py --record"


def summary(rows: list[matrix.CrashRow]) -> dict[str, object]:
    """What the run found, in a few numbers (the record holds every case)."""
    return {
        "cases": len(rows),
        "by_outcome": dict(Counter(row.after_crash for row in rows)),
        "points_uncovered": sorted(matrix.uncovered_points(rows)),
        "losses": sum(row.losses for row in rows),
        "doubles": sum(row.doubles for row in rows),
        "violations": [f"{r.scenario} {r.label} {r.how}: {v}" for r in rows for v in r.violations],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/crash_matrix.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true",
                        help=f"write the run's record to {records.COMMITTED.name}/{RECORD_NAME}.json")
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    args = parser.parse_args(argv)
    began = time.monotonic()
    rows = matrix.crash_matrix()
    seconds = time.monotonic() - began
    found = summary(rows)
    if args.record:
        record = records.save_record(RECORD_NAME, {}, rows, by=RECORDED_BY, seconds=seconds,
                                     folder=records.COMMITTED)
        if not args.quiet:
            print(f"recorded {records.COMMITTED.name}/{record.name}.json (commit {record.commit or '?'})",
                  file=sys.stderr)
            if not record.commit or record.commit.endswith("-dirty"):
                print("warning: the tree has uncommitted changes: the record names no commit of this code",
                      file=sys.stderr)
    print(json.dumps({**found, "seconds": round(seconds, 1)}, indent=2))
    return 0 if not (found["violations"] or found["losses"] or found["doubles"]) else 1


if __name__ == "__main__":
    sys.exit(main())
