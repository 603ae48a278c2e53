"""The adversary: what user code does, drawn by Hypothesis, against the promise; prints the run as JSON.

    python scripts/adversary.py                    # the quick run on SQLite (the one the test suite makes)
    python scripts/adversary.py --long             # the long run: 2000 examples of up to 50 steps
    python scripts/adversary.py --postgres         # on a fresh database of a throwaway PostgreSQL server
                                                   # this script starts and removes (initdb, pg_ctl)
    python scripts/adversary.py --families scopes  # only these attack families (comma-separated; ""
                                                   # for the base attacks alone, which always run)
    python scripts/adversary.py --no-shrink        # report a broken clause as found, unshrunk
    python scripts/adversary.py --long --record    # ... and write evidence/adversary-<engine>.json

Every step is checked against every clause of the promise (proof/adversary_model.py). A
broken clause is shrunk to a short sequence of steps, printed on stderr.
Exit status 0 when every clause held, 1 when one broke, 2 when the run could not start
(no PostgreSQL server can be started for --postgres).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proof import adversary, postgres_cluster, records  # noqa: E402
from proof.adversary_db import PostgresTarget, SqliteTarget, Target  # noqa: E402
from proof.adversary_user import ALL_FAMILIES, FAMILIES  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/adversary.py", description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true",
                        help=f"the long run: {adversary.LONG.examples} examples of up to "
                             f"{adversary.LONG.steps} steps")
    parser.add_argument("--record", action="store_true",
                        help=f"with --long: write the run's record to {records.COMMITTED.name}/"
                             "adversary-<engine>.json")
    parser.add_argument("--postgres", action="store_true",
                        help="run against a fresh database of a throwaway PostgreSQL server")
    parser.add_argument("--families", default=",".join(sorted(ALL_FAMILIES)),
                        help="the attack families, comma-separated (default: all): "
                             + "; ".join(f"{name}: {what}" for name, what in FAMILIES.items()))
    parser.add_argument("--examples", type=int, default=None, help="examples instead of the budget's")
    parser.add_argument("--steps", type=int, default=None, help="steps per example instead of the budget's")
    parser.add_argument("--no-shrink", action="store_true", help="report a broken clause unshrunk")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    families = frozenset(name.strip() for name in args.families.split(",") if name.strip())
    if families - ALL_FAMILIES:
        parser.error(f"--families: unknown {sorted(families - ALL_FAMILIES)}; they are {sorted(ALL_FAMILIES)}")
    if args.record and not args.long:
        parser.error("--record writes the record of the long run: add --long")
    if args.record and (families != ALL_FAMILIES or args.examples or args.steps):
        parser.error("--record records the long run with every attack family and its own budget")
    for name in ("examples", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be 1 or more")
    base = adversary.LONG if args.long else adversary.QUICK
    budget = adversary.Budget(args.examples or base.examples, args.steps or base.steps)

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    if not args.postgres:
        with tempfile.TemporaryDirectory(prefix="qc-adversary-") as folder:
            return _run(SqliteTarget(folder), budget, families, args, progress)
    reason = postgres_cluster.unavailable()
    bindir = postgres_cluster.find_bindir()
    if reason is not None or bindir is None:
        print(f"python scripts/adversary.py: no PostgreSQL server can be started here: {reason}",
              file=sys.stderr)
        return 2
    cluster = postgres_cluster.Cluster(bindir)
    try:
        cluster.start()
        progress(f"a throwaway PostgreSQL server in {cluster.root} (binaries: {bindir})")
        return _run(PostgresTarget(cluster), budget, families, args, progress)
    except postgres_cluster.ServerError as exc:
        print(f"python scripts/adversary.py: {exc}", file=sys.stderr)
        return 2
    finally:
        cluster.stop()


def _run(target: Target, budget: adversary.Budget, families: frozenset[str], args: argparse.Namespace,
         progress: adversary.Progress) -> int:
    result = adversary.run(target, budget, families, shrink=not args.no_shrink, progress=progress)
    if result.found is not None:
        progress(f"the steps:\n{result.found['steps']}")
    if args.record:
        record = adversary.save(result)
        progress(f"recorded {records.COMMITTED.name}/{record.name}.json (commit {record.commit or '?'})")
        if not record.commit or record.commit.endswith("-dirty"):
            progress("warning: the tree has uncommitted changes: the record names no commit of this code")
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
