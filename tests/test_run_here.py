"""Run it here: every example that has Run runs in Chromium and prints what the build recorded.

The sites are served under a sub-path (``/queue_core/``), as a project's
published site is, so that every URL the pages and the runtime use must be
relative. For every block with Run, on the published build, in one tab that
goes from page to page by links as a reader's does: click it, wait, and compare
what the browser printed with the output the build recorded under the same block.
Nothing may be requested from another host (when the runtime starts loading,
and what the box shows, is tests/test_run_box.py's). Editing, an exception, Reset, Stop, and what queue_core does
without threads are checked on real blocks too. Timings are printed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from docs_support.run_here import blocks
from tests.site_build import PREFIX, ROOT, SubPathHandler, follow_link, open_page, serving, site_pages, site_server

pytestmark = pytest.mark.timeout(900)

# What differs for a reason the pages state: temporary folders, and the SQLite
# of the Python that runs a block (the overview prints it: the build's there,
# the browser's here, as the page says).
NORMALIZE = [
    (re.compile(r"/tmp/[^\s'\")]+"), "<tmp>"),
    (re.compile(r"(this Python's sqlite3 uses SQLite )\d+\.\d+\.\d+"), r"\1<version>"),
]
RUNTIME = ("/assets/pyodide/", "/assets/run/")
DONE = "box => ['done', 'failed', 'stopped'].includes(box.dataset.state)"


@pytest.fixture(scope="module")
def served_under_prefix(built_site: Path) -> Iterator[str]:
    with serving(site_server(built_site, SubPathHandler)) as url:
        yield url + PREFIX[:-1]


def normalized(text: str) -> str:
    for pattern, replacement in NORMALIZE:
        text = pattern.sub(replacement, text)
    return text.rstrip("\n")


def run_block(page, index: int, timeout_ms: int = 120_000) -> dict[str, object]:
    """Click Run on the ``index``-th runnable block of ``page``; what it printed and how long it took."""
    box = page.locator(".qc-run").nth(index)
    box.scroll_into_view_if_needed()
    box.locator("button", has_text="Run").click()
    box.element_handle().wait_for_element_state("stable")
    page.wait_for_function(DONE, arg=box.element_handle(), timeout=timeout_ms)
    return box.evaluate(
        """box => {
          const blocks = box.querySelectorAll('.highlight');
          return {
            state: box.dataset.state,
            printed: box.querySelector('.qc-run__output').textContent,
            recorded: blocks[blocks.length - 1].querySelector('code').textContent,
            loadMs: Number(box.dataset.loadMs), runMs: Number(box.dataset.runMs),
          };
        }"""
    )


def first_block(page):
    """The first block with Run: its box, its editable code, and the page's code."""
    box = page.locator(".qc-run").first
    code = box.locator(".qc-run__code")
    return box, code, code.text_content()


def edit(code, text: str) -> None:
    """Type ``text`` over the block's code, as a reader's edit ends up."""
    code.evaluate("(c, text) => { c.textContent = text }", text)


def runtime_requests(requested: list[str]) -> list[str]:
    return [url for url in requested if any(part in url for part in RUNTIME)]


def _site_path(page: Path) -> str:
    """The built page's path under the site's root: docs/start.md is /start/."""
    name = page.relative_to(ROOT / "docs").with_suffix("").as_posix()
    return "/" if name == "index" else f"/{name.removesuffix('/index')}/"


# Every page with a block that gets Run, found from the sources as the build
# finds them (docs_support.run_here), so that one page can be run alone:
# ``pytest tests/test_run_here.py -k start``.
RUN_PAGES = [page for page in sorted((ROOT / "docs").rglob("*.md"))
             if any(why is None for _, why in blocks(page))]


def test_enough_pages_and_blocks_have_run() -> None:
    assert len(RUN_PAGES) >= 15, RUN_PAGES
    assert sum(why is None for page in RUN_PAGES for _, why in blocks(page)) >= 50
    assert ROOT / "docs" / "start.md" in RUN_PAGES  # the first page a reader meets


def test_the_pages_with_run_are_the_ones_their_sources_say(built_site: Path) -> None:
    built = [path for path in site_pages(built_site)
             if 'class="qc-run"' in (built_site / path.lstrip("/") / "index.html").read_text("utf-8")]
    assert built == sorted(_site_path(page) for page in RUN_PAGES)


@dataclass
class ReaderTab:
    """One browser tab that goes from page to page as a reader's does: opened on the first
    page, then moved by Material's instant navigation, so that Python, once loaded, stays."""

    browser: Any
    base: str
    page: Any = None
    context: Any = None
    problems: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)

    def visit(self, path: str) -> bool:
        """Bring the tab to ``path``; True when the tab was opened there (a fresh Python)."""
        url = self.base + path
        if self.page is None:
            self.context, self.page, self.problems, self.requested = open_page(self.browser, url)
            self.page.evaluate("() => { window.__same_document = true }")
            return True
        follow_link(self.page, url)
        assert self.page.evaluate("() => window.__same_document === true"), f"{path}: reached by a full reload"
        return False


@pytest.fixture(scope="module")
def reader_tab(browser, served_published: str) -> Iterator[ReaderTab]:
    tab = ReaderTab(browser, served_published)
    try:
        yield tab
    finally:
        if tab.context is not None:
            tab.context.close()


@pytest.mark.parametrize("source", RUN_PAGES,
                         ids=[p.relative_to(ROOT / "docs").with_suffix("").as_posix() for p in RUN_PAGES])
def test_every_block_with_run_prints_what_the_build_recorded(reader_tab: ReaderTab, published_build,
                                                             source: Path) -> None:
    """The published site, under its sub-path: the page the tab opens on loads Python, and
    every page reached from it by a link runs its blocks in that same Python, as a reader's do."""
    path = _site_path(source)
    html = (published_build.out / path.lstrip("/") / "index.html").read_text("utf-8")
    expected = sum(why is None for _, why in blocks(source))
    assert html.count('class="qc-run"') == expected, f"{path}: the build gave Run to other blocks"
    problems_before = len(reader_tab.problems)
    fresh = reader_tab.visit(path)
    page = reader_tab.page
    timings, differs = [], []
    count = page.locator(".qc-run").count()
    assert count == expected
    for index in range(count):
        result = run_block(page, index)
        where = f"{path} block {index + 1} of {count}"
        printed, recorded = normalized(str(result["printed"])), normalized(str(result["recorded"]))
        if result["state"] != "done" or printed != recorded:
            differs.append(f"{where} ({result['state']}):\n{printed}\n--- recorded:\n{recorded}")
        timings.append((index, result["loadMs"], result["runMs"]))
    # Python is loaded once, by the page the tab opened on, and kept by every page after it.
    loads = [load for _, load, _ in timings]
    assert (loads[0] > 0 if fresh else loads[0] == 0) and all(load == 0 for load in loads[1:]), (path, loads)
    assert sum("pyodide.asm.wasm" in url for url in reader_tab.requested) == 1, runtime_requests(reader_tab.requested)
    assert reader_tab.problems[problems_before:] == [], f"{path}: {reader_tab.problems[problems_before:]}"
    assert differs == [], "\n\n".join(differs)
    print(f"\nrun here: {path}: {len(timings)} blocks printed what the build recorded; ms (load + run): "
          + ", ".join(f"block {i + 1}: {load:.0f} + {run:.0f}" for i, load, run in timings))


def test_an_edited_block_runs_its_edit_an_exception_shows_and_reset_restores(
        browser, served_under_prefix: str) -> None:
    context, page, problems, _ = open_page(browser, served_under_prefix + "/lease/")
    try:
        box, code, original = first_block(page)
        edit(code, "print('edited')\nraise ValueError('boom')\n")
        result = run_block(page, 0)
        assert result["state"] == "failed"
        assert str(result["printed"]).startswith("edited\n")
        assert "Traceback" in str(result["printed"]) and "ValueError: boom" in str(result["printed"])
        box.locator("button", has_text="Reset").click()
        assert code.text_content() == original
        again = run_block(page, 0)
        assert again["state"] == "done"
        assert normalized(str(again["printed"])) == normalized(str(again["recorded"]))
        assert problems == [], problems
    finally:
        context.close()


def test_stop_ends_a_run_that_never_finishes_and_the_next_run_starts_afresh(
        browser, served_under_prefix: str) -> None:
    context, page, problems, _ = open_page(browser, served_under_prefix + "/lease/")
    try:
        box, code, original = first_block(page)
        edit(code, "print('looping')\nwhile True:\n    pass\n")
        box.locator("button", has_text="Run").click()
        page.wait_for_function("box => box.querySelector('.qc-run__output').textContent.includes('looping')",
                               arg=box.element_handle(), timeout=120_000)
        page.evaluate("() => { window.qcRunBox.slowAfterMs = 0 }")  # Stop shows once a run is long
        box.locator("button", has_text="Stop").click()
        page.wait_for_function(DONE, arg=box.element_handle(), timeout=10_000)
        assert box.evaluate("box => box.dataset.state") == "stopped"
        edit(code, original)
        again = run_block(page, 0)
        assert again["state"] == "done" and again["loadMs"] > 0  # a new runtime
        assert normalized(str(again["printed"])) == normalized(str(again["recorded"]))
        assert problems == [], problems
    finally:
        context.close()


PROBE = """
import sys, sqlite3, tempfile
from pathlib import Path
from queue_core import ModelClock, NoThreads, Store
print(sys.platform, f"{sys.version_info[0]}.{sys.version_info[1]}", sqlite3.sqlite_version)
with tempfile.TemporaryDirectory() as folder:
    store = Store(Path(folder) / "q.sqlite3", clock=ModelClock(1000))
    store.enqueue('{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 1}}')
    lease = store.claim(lease_seconds=2)
    try:
        store.heartbeat(lease, every=1)
    except NoThreads as error:
        print(error.code)
"""


def test_the_run_here_page_says_what_the_browser_really_runs(browser, built_site: Path,
                                                           served_under_prefix: str) -> None:
    """Its versions are the browser's, and a heartbeat refuses with no_threads there."""
    context, page, problems, _ = open_page(browser, served_under_prefix + "/lease/")
    try:
        _, code, _ = first_block(page)
        edit(code, PROBE)
        result = run_block(page, 0)
        assert result["state"] == "done", result["printed"]
        platform, python, sqlite, refusal = str(result["printed"]).split()
        assert (platform, refusal) == ("emscripten", "no_threads")
        text = (built_site / "run-here" / "index.html").read_text("utf-8")
        pinned = json.loads((ROOT / "site_runtime" / "package.json").read_text("utf-8"))["dependencies"]["pyodide"]
        assert f"Pyodide</a> {pinned}" in text and f"CPython {python}" in text and f"SQLite {sqlite}" in text
        runtime = built_site / "assets" / "pyodide"
        total = sum(f.stat().st_size for f in runtime.iterdir())
        wasm = (runtime / "pyodide.asm.wasm").stat().st_size
        assert f"about {total / 1e6:.1f} MB" in text and f"{wasm / 1e6:.1f} MB of" in text, (total, wasm)
        assert problems == [], problems
    finally:
        context.close()
