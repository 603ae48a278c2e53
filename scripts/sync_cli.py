"""Write README.md's table of commands from the command table (queue_core/cli/table.py).

    python scripts/sync_cli.py          # rewrite README.md's table
    python scripts/sync_cli.py --check  # exit 1 when README.md's table differs

The site's CLI reference page prints its sections from the command table when
it is built (docs_support/cli_reference.py); README.md is read as it is
stored, so it carries a generated copy of the table of commands between
``<!-- cli:start -->`` and ``<!-- cli:end -->``. tests/test_cli_table.py
checks that the copy is current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docs_support.cli_reference import README_END, README_NOTE, README_START, readme_table  # noqa: E402

README = ROOT / "README.md"


def synced(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced by ``table``."""
    if readme.count(README_START) != 1 or readme.count(README_END) != 1:
        raise ValueError(f"README.md needs {README_START} and {README_END}, once each")
    before, rest = readme.split(README_START, 1)
    _, after = rest.split(README_END, 1)
    return f"{before}{README_START}\n{README_NOTE}\n{table.rstrip(chr(10))}\n{README_END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether README.md is current")
    args = parser.parse_args(argv)
    readme = README.read_text(encoding="utf-8")
    wanted = synced(readme, readme_table())
    if readme == wanted:
        print("README.md: the table of commands is current")
        return 0
    if args.check:
        print("README.md: the table of commands differs from queue_core/cli/table.py; "
              "run python scripts/sync_cli.py", file=sys.stderr)
        return 1
    README.write_text(wanted, encoding="utf-8")
    print("README.md: the table of commands written from queue_core/cli/table.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
