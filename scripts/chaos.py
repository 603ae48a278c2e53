"""Random kills and contention on one queue file; prints the figures as JSON.

    python scripts/chaos.py                 # the quick run (the one the test suite makes)
    python scripts/chaos.py --long          # the long run: over a thousand SIGKILLs (minutes)
    python scripts/chaos.py --long --record # ... and write its record to evidence/ (to commit)
    python scripts/chaos.py --seed 7        # repeat a run's random choices (timing still varies)
    python scripts/chaos.py --contention    # only the eight-worker contention run
    python scripts/chaos.py --postgres      # the random-kill run against a throwaway PostgreSQL
                                            # server this script starts and removes (initdb, pg_ctl)
    python scripts/chaos.py --db postgresql://user@/db?host=/run/postgresql
                                            # the random-kill run against that fresh, empty PostgreSQL
                                            # database (the contention run, about SQLite's lock, is not made)

Exit status 0 when no invariant was violated (losses = 0, doubles = 0), 1 otherwise,
2 when the run could not start (the --db database is not empty, or cannot be reached;
no PostgreSQL server can be started for --postgres).
The functions live in ``proof/chaos.py``; see the page "How we know".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queue_core import StorageError  # noqa: E402
from proof import chaos, long_runs, postgres_cluster, records  # noqa: E402

RECORDED_BY = "scripts/chaos.py --long --record"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/chaos.py", description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help=f"the long run: {dict(chaos.LONG)}")
    parser.add_argument("--record", action="store_true",
                        help=f"with --long: write the run's record to {records.COMMITTED.name}/"
                             f"chaos-long-<engine>.json (the page prints it)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random choices (default: random)")
    parser.add_argument("--contention", action="store_true", help="only the contention run")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--db", metavar="URL", default=None,
                        help="run the random kills against this fresh, empty PostgreSQL database "
                             "(a postgresql:// URL) instead of a new SQLite file")
    parser.add_argument("--postgres", action="store_true",
                        help="run the random kills against a fresh database of a throwaway PostgreSQL "
                             "server started (and removed) by this script")
    args = parser.parse_args(argv)
    if args.db is not None and not args.db.startswith(("postgresql://", "postgres://")):
        parser.error(f"--db takes a postgresql:// URL, got {args.db!r}")
    if args.db is not None and args.postgres:
        parser.error("--db and --postgres exclude each other")
    if (args.db is not None or args.postgres) and args.contention:
        parser.error("--contention runs on SQLite only: it is about SQLite's write lock")
    if args.record and not args.long:
        parser.error("--record writes the record of the long run: add --long")
    if args.record and args.contention:
        parser.error("--record records the random-kill run, which --contention leaves out")

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    if not args.postgres:
        return _run(args, args.db, progress)
    reason = postgres_cluster.unavailable()
    bindir = postgres_cluster.find_bindir()
    if reason is not None or bindir is None:
        print(f"python scripts/chaos.py: no PostgreSQL server can be started here: {reason}", file=sys.stderr)
        return 2
    cluster = postgres_cluster.Cluster(bindir)
    try:
        cluster.start()
        progress(f"a throwaway PostgreSQL server in {cluster.root} (binaries: {bindir})")
        return _run(args, postgres_cluster.url(cluster, cluster.create_database()), progress)
    except postgres_cluster.ServerError as exc:
        print(f"python scripts/chaos.py: {exc}", file=sys.stderr)
        return 2
    finally:
        cluster.stop()


def _run(args: argparse.Namespace, db: str | None, progress: chaos.Progress) -> int:
    """The random-kill run (on SQLite, or against ``db``), then the contention run on SQLite."""
    runs: list[chaos.ChaosResult | chaos.ContentionResult] = []
    if not args.contention:
        size = chaos.LONG if args.long else chaos.QUICK
        try:
            result = chaos.chaos(**size, seed=args.seed, progress=progress, target=db)
        except (ValueError, StorageError) as exc:  # a database that is not empty, or cannot be reached
            print(f"python scripts/chaos.py: {exc}", file=sys.stderr)
            return 2
        runs.append(result)
        if args.record:
            record = records.save_record(long_runs.record_name(result.engine), size, result, by=RECORDED_BY,
                                         seconds=result.seconds, folder=records.COMMITTED)
            progress(f"recorded {records.COMMITTED.name}/{record.name}.json (commit {record.commit or '?'})")
            if not record.commit or record.commit.endswith("-dirty"):
                progress("warning: the tree has uncommitted changes: the record names no commit of this code")
    if db is None:
        runs.append(chaos.contention())
    print(json.dumps({"chaos" if isinstance(run, chaos.ChaosResult) else "contention": run.to_dict()
                      for run in runs}, indent=2))
    return 0 if all(run.ok for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
