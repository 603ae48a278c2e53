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

import sys
from pathlib import Path

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuse_tables import Table, main  # noqa: E402

from proof.ioerr_table import LONG, NAME, QUICK, run_table, table_lines, verdict  # noqa: E402


TABLE = Table("scripts/ioerr.py", NAME, QUICK, LONG, run_table, table_lines, verdict,
              seed_help="seed of the payloads")

if __name__ == "__main__":
    sys.exit(main(TABLE, __doc__.splitlines()[0]))
