"""Random kills and contention on one queue file; prints the figures as JSON.

    python scripts/chaos.py                 # the quick run (the one the test suite makes)
    python scripts/chaos.py --long          # a deeper run: more rounds, workers and kills (minutes)
    python scripts/chaos.py --seed 7        # repeat a run's random choices (timing still varies)
    python scripts/chaos.py --contention    # only the eight-worker contention run

Exit status 0 when no invariant was violated (losses = 0, doubles = 0), 1 otherwise.
The functions live in ``queue_core/testing/chaos.py``; see the page "How we know".
"""

from __future__ import annotations

import argparse
import json
import sys

from queue_core.testing import chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/chaos.py", description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help=f"deeper run: {dict(chaos.LONG)}")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random choices (default: random)")
    parser.add_argument("--contention", action="store_true", help="only the contention run")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    runs: list[chaos.ChaosResult | chaos.ContentionResult] = []
    if not args.contention:
        runs.append(chaos.chaos(**(chaos.LONG if args.long else chaos.QUICK), seed=args.seed, progress=progress))
    runs.append(chaos.contention())
    print(json.dumps({"chaos" if isinstance(run, chaos.ChaosResult) else "contention": run.to_dict()
                      for run in runs}, indent=2))
    return 0 if all(run.ok for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
