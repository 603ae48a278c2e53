"""How wide the code on the built site is: every line of every rendered code block.

A line over ``MAX_COLUMNS`` makes its block scroll sideways on a laptop's
screen. ``python -m docs_support.code_width site`` lists them page by page;
``tests/test_site.py`` holds the built site to none.

Two exceptions, shown as they are and wrapped by the page instead (each such
line is marked ``.qc-wrap`` by overrides/hooks.py and wraps inside its block,
its continuations indented; ``tests/test_site.py`` checks that no block scrolls
sideways):

- in shell sessions, a line that the command line promises to print as one
  line, an error (``queue-core: ...``, one line on stderr, for scripts and
  logs) or a JSON document (``{...}``, one line per document). A session shows
  what the command prints; folding it would show something else;
- a file of the package's SQL shown whole, as the file is (the schema's
  migrations: ``queue_core/...sql`` in the block's title).

A diagram's source (``<pre class="mermaid">``) is not code on the page: it is
drawn, and not counted.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

MAX_COLUMNS = 88

_BLOCK = re.compile(r"<pre\b(?P<attrs>[^>]*)>(?P<code>.*?)</pre>", re.S)
# A package's SQL file shown whole: its title names it, just before its block.
_PACKAGE_FILE = re.compile(r'<span class="filename">queue_core/[^<]*\.sql</span>\s*$')
_TAG = re.compile(r"<[^>]+>")
_PROMPT = '<span class="gp">$ </span>'  # a shell session (see overrides/hooks.py)
ONE_LINE_BY_CONTRACT = ("queue-core: ", "{")


def code_lines(page_html: str) -> list[str]:
    """Every line of every ``<pre>`` block of a page, as the reader sees it.

    A shell session's one-line-by-contract output is left out.
    """
    lines: list[str] = []
    for match in _BLOCK.finditer(page_html):
        block = match["code"]
        if 'class="mermaid"' in match["attrs"]:
            continue
        if _PACKAGE_FILE.search(page_html[max(0, match.start() - 300) : match.start()]):
            continue
        text = html.unescape(_TAG.sub("", block)).split("\n")
        if _PROMPT in block:
            text = [line for line in text if not line.startswith(ONE_LINE_BY_CONTRACT)]
        lines.extend(text)
    return lines


def too_wide(site: Path, limit: int = MAX_COLUMNS) -> dict[str, list[str]]:
    """Page (its path in the site) -> its code lines longer than ``limit``."""
    found: dict[str, list[str]] = {}
    for page in sorted(site.rglob("*.html")):
        wide = [
            line for line in code_lines(page.read_text("utf-8")) if len(line) > limit
        ]
        if wide:
            found[page.relative_to(site).as_posix()] = wide
    return found


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else Path("site")
    found = too_wide(site)
    for page, lines in found.items():
        print(f"{page}: {len(lines)} line(s) over {MAX_COLUMNS} columns")
        for line in lines:
            print(f"  {len(line):>3} {line}")
    print(
        f"{sum(map(len, found.values()))} line(s) over {MAX_COLUMNS} on {len(found)} page(s)"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
