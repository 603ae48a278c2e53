"""PostgreSQL failovers under load, synchronous and asynchronous replication; prints the figures as JSON.

    python scripts/failover.py                   # 5 synchronous and 10 asynchronous failovers
    python scripts/failover.py --sync 2 --async 3
    python scripts/failover.py --record          # also write the committed record evidence/failover.json

Each failover is made on a fresh primary and standby (throwaway servers, as the
tests make them: PostgreSQL's server binaries and psycopg are needed; as root,
the servers run as the ``postgres`` user). The page "A failover, measured"
prints the committed record. Exit status 0 when nothing was doubled and no
invariant broken (and, with synchronous replication, nothing acknowledged
lost), 1 otherwise, 2 when no server can be started here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# the repository's proof package (not installed with queue_core) sit beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proof import failover, records  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/failover.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--sync", type=int, default=5, metavar="N",
                        help="failovers with synchronous replication (default: 5)")
    parser.add_argument("--async", dest="async_", type=int, default=10, metavar="N",
                        help="failovers with asynchronous replication (default: 10)")
    parser.add_argument("--record", action="store_true",
                        help=f"write the record {records.COMMITTED.name}/failover.json")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.sync < 1 or args.async_ < 1:
        parser.error("--sync and --async take at least 1")
    reason = failover.unavailable()
    if reason is not None:
        print(f"python scripts/failover.py: {reason}", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    began = time.monotonic()
    runs = {mode: failover.failovers(mode, count, progress=progress)
            for mode, count in (("sync", args.sync), ("async", args.async_))}
    if args.record:
        record = records.save_record("failover", {"sync": args.sync, "async": args.async_},
                                     {mode: run.to_dict() for mode, run in runs.items()},
                                     by="scripts/failover.py",
                                     seconds=time.monotonic() - began, folder=records.COMMITTED)
        progress(f"recorded {records.COMMITTED / 'failover.json'} (commit {record.commit})")
    print(json.dumps({mode: run.to_dict() for mode, run in runs.items()}, indent=1))
    return 0 if all(run.ok for run in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
