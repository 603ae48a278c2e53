"""Cut the network between a worker and PostgreSQL, at three points; print the timelines.

    sudo .venv/bin/python scripts/netcut.py            # run, print the timelines as JSON
    sudo .venv/bin/python scripts/netcut.py --record   # and write evidence/network-cut.json

Needs root, ip (iproute2) and PostgreSQL's server binaries: it makes a network
namespace and a veth pair of its own and a throwaway cluster
(proof/postgres_cluster.py) listening on the link, and removes them all at
the end. The harness is ``proof/netcut.py``; the page "A network cut" prints
the committed record. Exit status 0 when every cut ended as it must (see
``verdicts``), 1 otherwise, 2 when it cannot run here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proof import netcut, records  # noqa: E402
from proof import postgres_cluster as postgres_server  # noqa: E402

# the bound checks and their controls: (name, scenario, URL parameters over SHORT, bounded)
CHECKS = (
    ("keepalives alone, a lost reply", "commit", {"tcp_user_timeout": "0"}, True),
    ("no keepalives, a lost reply", "commit", {"tcp_user_timeout": "0", "keepalives": "0"}, False),
    ("tcp_user_timeout alone, an unacknowledged request", "claim", {"keepalives_idle": "3600"},
     True),
    ("keepalives alone, an unacknowledged request", "claim", {"tcp_user_timeout": "0"}, False),
    ("keepalives=0 (tcp_user_timeout=2000), an unacknowledged request", "claim",
     {"keepalives": "0"}, False),
)
SLACK = 3.0  # seconds of scheduling beyond the bound, as the tests allow
PARAMS: dict[str, Any] = {"scenarios": list(netcut.WHENS), "url": netcut.SHORT,
                          "bound": netcut.SHORT_BOUND, "server": "the session's own bounds, set by the store",
                          "checks": [name for name, *_ in CHECKS]}


def verdicts(cuts: list[dict[str, Any]], checks: list[dict[str, Any]]) -> list[str]:
    """What went wrong (empty: every cut ended as it must)."""
    wrong = []
    for cut in cuts:
        late = cut["error_after_cut"] is None or cut["error_after_cut"] > netcut.SHORT_BOUND + SLACK
        if cut["error_code"] != "connection_lost" or late:
            wrong.append(f"{cut['when']}: no connection_lost within the bound")
        if cut["effects"] != 1 or cut["violations"] or cut["retry_code"] != "lease_lost":
            wrong.append(f"{cut['when']}: effects {cut['effects']}, retry {cut['retry_code']}, "
                         f"{cut['violations']}")
    for check in checks:
        if check["bounded"] != (check["error_after_cut"] is not None):
            wrong.append(f"{check['name']}: error after {check['error_after_cut']}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/netcut.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true",
                        help=f"write the record to {records.COMMITTED}/network-cut.json")
    args = parser.parse_args(argv)
    reason = postgres_server.unavailable() or netcut.unavailable()
    bindir = postgres_server.find_bindir()
    if reason is not None or bindir is None:
        print(f"python scripts/netcut.py: {reason}", file=sys.stderr)
        return 2
    began = time.monotonic()
    cuts: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    with netcut.Link.made() as link:
        cluster = postgres_server.Cluster(bindir)
        try:
            cluster.settings = netcut.server_settings(cluster.root, link)
            cluster.start()
            runs = [(when, when, {}, None) for when in netcut.WHENS]
            runs += [(name, when, extra, 4 * netcut.SHORT_BOUND) for name, when, extra, _ in CHECKS]
            for name, when, extra, hang_check in runs:
                database = cluster.create_database()
                admin = f"postgresql://{postgres_server.SERVER_USER}@/{database}" \
                        f"?host={cluster.root}&port={postgres_server.PORT}"
                try:
                    netcut.prepare(admin, when)
                    settings = {**netcut.SHORT, **extra}
                    result = netcut.run_cut(link, netcut.tcp_url(link, database, settings), admin,
                                            when, params=settings, hang_check=hang_check).to_dict()
                finally:
                    cluster.drop_database(database)
                print(f"{name}: error after {result['error_after_cut']} s", file=sys.stderr)
                if hang_check is None:
                    cuts.append(result)
                else:
                    bounded = next(b for n, _, _, b in CHECKS if n == name)
                    checks.append({"name": name, "when": when, "params": settings,
                                   "bounded": bounded, "waited": hang_check,
                                   "error_after_cut": result["error_after_cut"]})
        finally:
            cluster.stop()
    wrong = verdicts(cuts, checks)
    result = {"cuts": cuts, "checks": checks, "wrong": wrong}
    print(json.dumps(result, indent=1))
    if args.record:
        records.save_record("network-cut", PARAMS, result, by="scripts/netcut.py --record",
                            seconds=time.monotonic() - began, folder=records.COMMITTED)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
