"""The site stays a book a newcomer can walk through: no page too long, no Learn chapter too long, the Learn part short enough.

Words are counted in each page's Markdown source (whitespace-separated, as
``wc -w`` counts them). The Learn part is read from the navigation in
mkdocs.yml, so a chapter moved into it is counted.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MAX_PAGE_WORDS = 3_500
MAX_LEARN_WORDS = 18_000
MAX_LEARN_CHAPTER_WORDS = 2_200


def words(page: Path) -> int:
    return len(page.read_text(encoding="utf-8").split())


def part(name: str) -> list[Path]:
    """The pages listed under ``- <name>:`` in mkdocs.yml's nav, in order."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    block = re.search(rf"^  - {re.escape(name)}:\n((?:      - .*\n|  #.*\n)+)", nav, re.M)
    assert block is not None, f"no part {name!r} in the navigation"
    return [DOCS / m for m in re.findall(r":\s*(\S+\.md)\s*$", block.group(1), re.M)]


def test_no_page_is_over_the_word_limit() -> None:
    long = {p.relative_to(DOCS).as_posix(): words(p) for p in DOCS.rglob("*.md") if words(p) > MAX_PAGE_WORDS}
    assert long == {}


def test_the_navigation_has_the_three_parts_and_learn_is_short_enough() -> None:
    learn, further, reference = part("Learn"), part("Go further"), part("Reference")
    assert [p.name for p in learn] == ["problem.md", "envelope.md", "lease.md", "fencing.md", "effect-and-ack.md",
                                       "retry.md", "dead-letters.md", "receipts.md", "crash.md", "outbox.md",
                                       "limits.md", "own-program.md"]
    assert further and reference
    total = sum(words(p) for p in learn)
    assert total <= MAX_LEARN_WORDS, f"the Learn part has {total} words"


def test_no_learn_chapter_is_over_the_chapter_limit() -> None:
    long = {p.name: words(p) for p in part("Learn") if words(p) > MAX_LEARN_CHAPTER_WORDS}
    assert long == {}, f"Learn chapters over {MAX_LEARN_CHAPTER_WORDS} words: {long}"


def test_the_budget_check_counts_a_long_page(tmp_path: Path) -> None:
    # A negative control: a page of 3,501 words, with Markdown around them, is over the limit.
    page = tmp_path / "long.md"
    page.write_text("# Title\n\n" + "word " * (MAX_PAGE_WORDS - 1) + "\n", encoding="utf-8")
    assert words(page) == MAX_PAGE_WORDS + 1 > MAX_PAGE_WORDS


def test_the_chapter_check_counts_a_long_chapter(tmp_path: Path) -> None:
    # A negative control: a chapter of 2,201 words, with Markdown around them, is over the chapter limit,
    # and one of 2,200 is not.
    page = tmp_path / "chapter.md"
    page.write_text("# Title\n\n" + "word " * (MAX_LEARN_CHAPTER_WORDS - 1) + "\n", encoding="utf-8")
    assert words(page) == MAX_LEARN_CHAPTER_WORDS + 1 > MAX_LEARN_CHAPTER_WORDS
    page.write_text("# Title\n\n" + "word " * (MAX_LEARN_CHAPTER_WORDS - 2) + "\n", encoding="utf-8")
    assert words(page) == MAX_LEARN_CHAPTER_WORDS
