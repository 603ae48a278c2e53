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

import sys
from pathlib import Path

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuse_tables import Table, main  # noqa: E402

from proof.powercut_table import LONG, NAME, QUICK, run_table, table_lines  # noqa: E402


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


TABLE = Table("scripts/powercut.py", NAME, QUICK, LONG, run_table, table_lines, verdict,
              seed_help="seed of the random choices")

if __name__ == "__main__":
    sys.exit(main(TABLE, __doc__.splitlines()[0]))
