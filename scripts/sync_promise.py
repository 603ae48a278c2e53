"""Copy the promise (docs/includes/promise.md) into README.md, between its markers.

    python scripts/sync_promise.py          # rewrite README.md's copy
    python scripts/sync_promise.py --check  # exit 1 when README.md's copy differs

The site includes docs/includes/promise.md on its pages; GitHub cannot
include a file in README.md, so README.md carries a generated copy between
``<!-- promise:start -->`` and ``<!-- promise:end -->``, its links rewritten
to point into docs/. tests/test_promise.py checks that the copy is current.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMISE = ROOT / "docs" / "includes" / "promise.md"
README = ROOT / "README.md"
START = "<!-- promise:start -->"
END = "<!-- promise:end -->"
NOTE = "<!-- generated from docs/includes/promise.md by scripts/sync_promise.py -->"


def readme_copy(promise: str) -> str:
    """The promise as README.md shows it: each relative link to a page made docs/<page>."""

    def relink(match: re.Match[str]) -> str:
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return match.group(0)  # an address, an anchor or an absolute path: kept
        return f"](docs/{target})"

    return re.sub(r"\]\(([^)\s]+)\)", relink, promise)


def synced(readme: str, promise: str) -> str:
    """``readme`` with the text between the markers replaced by the promise's copy."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"README.md needs {START} and {END}, once each")
    before, rest = readme.split(START, 1)
    _, after = rest.split(END, 1)
    body = readme_copy(promise).rstrip("\n")
    return f"{before}{START}\n{NOTE}\n{body}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether README.md is current")
    args = parser.parse_args(argv)
    readme = README.read_text(encoding="utf-8")
    wanted = synced(readme, PROMISE.read_text(encoding="utf-8"))
    if readme == wanted:
        print("README.md: the promise is current")
        return 0
    if args.check:
        print("README.md: the promise differs from docs/includes/promise.md; "
              "run python scripts/sync_promise.py", file=sys.stderr)
        return 1
    README.write_text(wanted, encoding="utf-8")
    print("README.md: the promise copied from docs/includes/promise.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
