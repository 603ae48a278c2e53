"""Search finds each chapter by its subject, first, in the built site's own search box.

Material's search (lunr, the ``search`` plugin of mkdocs.yml) ranks a page by
where a word appears; a chapter whose title is a question ("Why does a lease
need a number?") once fell below the API reference, whose short headings name
``Lease``, and "fence" did not find the chapter "Fencing". Each chapter's title
now carries its subject word, and its subject is its search tag (``SUBJECTS``
in overrides/hooks.py), which the search weighs above titles. Here, in
Chromium, a reader types each subject into the search box of the local build,
and the subject's chapter must be the first page listed.

Word forms: Material searches as you type, matching each word as a prefix
(``fence*``). lunr's stemmer, tried in the pipeline, broke that (measured on
this site: "failover" then found nothing, "lease" put the API first), so the
pipeline keeps Material's default, and a subject names the forms a reader
types ("fencing" and "fence"); plurals are found by their prefix.

The negative control serves the same site with the tags taken out of the
search index: then "lease" and "fence" no longer put their chapters first, so
the check can fail and the tags are what makes it pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.site_build import HOOKS, ROOT, open_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# What a reader types, and the chapter that must come first.
FIRST = {
    "fence": "/fencing/",
    "lease": "/lease/",
    "dead letter": "/dead-letters/",
    "receipt": "/receipts/",
    "backoff": "/retry/",
    "power": "/power-cuts/",
    "failover": "/failover/",
    # other forms of the words
    "fencing": "/fencing/",
    "dead letters": "/dead-letters/",
    "receipts": "/receipts/",
    "power cut": "/power-cuts/",
}

# The pages listed, in their order (a page's sections are listed under it).
LISTED = """() => [...new Set([...document.querySelectorAll('.md-search-result__item > a')]
  .map(a => new URL(a.href).pathname))]"""


def search(page, query: str) -> list[str]:
    """Type ``query`` into the search box as a reader does; the pages listed, first one first."""
    box = page.locator("input.md-search__input")
    box.click()
    box.fill("")
    page.keyboard.type(query, delay=30)  # Material searches on keyboard input
    page.wait_for_selector(".md-search-result__item", timeout=15_000)
    # the list settles once the query has been answered for the whole of what was typed
    page.wait_for_function("q => document.querySelector('.md-search-result__meta').textContent.trim() !== ''"
                           " && document.querySelector('input.md-search__input').value === q", arg=query,
                           timeout=15_000)
    page.wait_for_timeout(300)
    listed = page.evaluate(LISTED)
    page.keyboard.press("Escape")
    return listed


def test_every_subject_names_a_page_of_the_site() -> None:
    docs = ROOT / "docs"
    assert all((docs / page).is_file() for page in HOOKS.SUBJECTS), sorted(HOOKS.SUBJECTS)
    for query, path in FIRST.items():
        source = path.strip("/") + ".md"
        assert source in HOOKS.SUBJECTS, (query, source)


def test_each_subject_puts_its_chapter_first(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + "/", python_in_view=False)
    try:
        found = {query: search(page, query) for query in FIRST}
        assert problems == [], problems
    finally:
        context.close()
    wrong = {query: listed[:3] for query, listed in found.items() if not listed or listed[0] != FIRST[query]}
    assert wrong == {}, f"the subject's chapter is not first: {wrong}"


def test_without_the_tags_the_check_fails(browser, served_site: str, built_site: Path) -> None:
    # Negative control: the same site, its search index without the chapters' tags.
    index = json.loads((built_site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert any("tags" in doc for doc in index["docs"]), "the index has no tags to take out"
    for doc in index["docs"]:
        doc.pop("tags", None)
    stripped = json.dumps(index)
    context, page, problems, _ = open_page(browser, served_site + "/", python_in_view=False)
    try:
        page.context.route("**/search/search_index.json",
                           lambda route: route.fulfill(status=200, content_type="application/json", body=stripped))
        page.reload(wait_until="networkidle")
        without = {query: search(page, query) for query in ("lease", "fence")}
    finally:
        context.close()
    assert [without[q][0] if without[q] else None for q in ("lease", "fence")] != ["/lease/", "/fencing/"], without
