"""Random kills and contention on one queue file; prints the figures as JSON.

    python scripts/chaos.py                 # the quick run (the one the test suite makes)
    python scripts/chaos.py --long          # a deeper run: more rounds, workers and kills (minutes)
    python scripts/chaos.py --seed 7        # repeat a run's random choices (timing still varies)
    python scripts/chaos.py --contention    # only the eight-worker contention run
    python scripts/chaos.py --db postgresql://user@/db?host=/run/postgresql
                                            # the random-kill run against that fresh, empty PostgreSQL
                                            # database (the contention run, about SQLite's lock, is not made)

Exit status 0 when no invariant was violated (losses = 0, doubles = 0), 1 otherwise,
2 when the run could not start (the --db database is not empty, or cannot be reached).
The functions live in ``queue_core/testing/chaos.py``; see the page "How we know".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queue_core import StorageError  # noqa: E402
from proof import chaos  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/chaos.py", description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help=f"deeper run: {dict(chaos.LONG)}")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random choices (default: random)")
    parser.add_argument("--contention", action="store_true", help="only the contention run")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--db", metavar="URL", default=None,
                        help="run the random kills against this fresh, empty PostgreSQL database "
                             "(a postgresql:// URL) instead of a new SQLite file")
    args = parser.parse_args(argv)
    if args.db is not None and not args.db.startswith(("postgresql://", "postgres://")):
        parser.error(f"--db takes a postgresql:// URL, got {args.db!r}")
    if args.db is not None and args.contention:
        parser.error("--db and --contention exclude each other: the contention run is about SQLite's write lock")

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    runs: list[chaos.ChaosResult | chaos.ContentionResult] = []
    if not args.contention:
        try:
            size = chaos.LONG if args.long else chaos.QUICK
            runs.append(chaos.chaos(rounds=size["rounds"], events_per_round=size["events_per_round"],
                                    workers=size["workers"], max_kills_per_round=size["max_kills_per_round"],
                                    seed=args.seed, progress=progress, target=args.db))
        except (ValueError, StorageError) as exc:  # a database that is not empty, or cannot be reached
            print(f"python scripts/chaos.py: {exc}", file=sys.stderr)
            return 2
    if args.db is None:
        runs.append(chaos.contention())
    print(json.dumps({"chaos" if isinstance(run, chaos.ChaosResult) else "contention": run.to_dict()
                      for run in runs}, indent=2))
    return 0 if all(run.ok for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
