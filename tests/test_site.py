"""The documentation site: a strict build, then a real browser on the built pages.

The browser test serves the built site on 127.0.0.1 and opens every page in
Debian's headless Chromium (driven by Playwright, never its own browser
download). It fails on any console error, on any request that leaves this
machine, on a diagram that is not rendered to SVG, and if search cannot find
"generation". Screenshots land in ``test-artifacts/screenshots/``.

Where Chromium is missing the browser tests are skipped, except under CI
(``CI=true``), where a missing browser is a failure: ``.ci/run`` installs it.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Closed shadow roots hide Material's rendered diagrams from the test: open them.
OPEN_SHADOW_ROOTS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) { return attach.call(this, {...init, mode: "open"}); };
"""


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the site once with ``mkdocs build --strict``; fail on any warning."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=600,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert warnings == [], "\n".join(warnings)
    return out


def test_strict_build_produces_every_page(built_site: Path) -> None:
    pages = sorted(p.relative_to(built_site).as_posix() for p in built_site.rglob("index.html"))
    assert "index.html" in pages
    assert (built_site / "search" / "search_index.json").exists()
    # Nothing on any page points at a font or script CDN.
    for page in built_site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        for host in ("fonts.googleapis.com", "fonts.gstatic.com", "unpkg.com", "cdn.jsdelivr.net"):
            assert host not in html, f"{page} refers to {host}"


def site_pages(site: Path) -> list[str]:
    return sorted(
        "/" + p.parent.relative_to(site).as_posix().strip(".") + ("/" if p.parent != site else "")
        for p in site.rglob("index.html")
        if "assets" not in p.parts
    )


@pytest.fixture(scope="session")
def served_site(built_site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="session")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed; .ci/run must install Debian's chromium")
        pytest.skip("Chromium is not installed (apt-get install chromium); CI requires it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def open_page(browser, url: str):
    """Open ``url``; collect console errors and any request that leaves 127.0.0.1."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(OPEN_SHADOW_ROOTS)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}"))

    def outside(request) -> None:
        host = urlparse(request.url).hostname
        if request.url.startswith(("http:", "https:")) and host != "127.0.0.1":
            problems.append(f"request leaves the machine: {request.url}")

    page.on("request", outside)
    page.goto(url, wait_until="networkidle")
    return context, page, problems


def test_every_page_loads_offline_without_errors_and_renders_diagrams(browser, served_site: str,
                                                                      built_site: Path) -> None:
    pages = site_pages(built_site)
    assert len(pages) >= 1
    diagrams = 0
    for path in pages:
        context, page, problems = open_page(browser, served_site + path)
        try:
            expected = page.locator("pre.mermaid, div.mermaid").count()
            if expected:
                page.wait_for_function(
                    "() => [...document.querySelectorAll('div.mermaid')]"
                    ".filter(d => d.shadowRoot && d.shadowRoot.querySelector('svg')).length"
                    f" >= {expected}", timeout=15_000)
                assert page.locator("pre.mermaid").count() == 0, f"{path}: a diagram stayed raw text"
                diagrams += expected
            assert page.locator("h1").count() >= 1, f"{path}: no heading"
            assert problems == [], f"{path}: {problems}"
        finally:
            context.close()
    print(f"browser: {len(pages)} pages loaded, {diagrams} diagrams rendered as SVG")


def test_search_finds_generation(browser, served_site: str) -> None:
    context, page, problems = open_page(browser, served_site + "/")
    try:
        # Type like a person: Material searches on keyboard input, not on a programmatic fill.
        page.click("input.md-search__input")
        page.keyboard.type("generation", delay=30)
        page.wait_for_selector(".md-search-result__item", timeout=15_000)
        assert page.locator(".md-search-result__item").count() >= 1
        assert problems == []
    finally:
        context.close()


SCREENSHOT_PAGES = ["/", "/fencing/", "/crash/"]


def test_screenshots_of_three_pages(browser, served_site: str, built_site: Path) -> None:
    available = site_pages(built_site)
    chosen = [p for p in SCREENSHOT_PAGES if p in available] or available[:3]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for path in chosen:
        context, page, problems = open_page(browser, served_site + path)
        try:
            name = (path.strip("/") or "home").replace("/", "-") + ".png"
            page.screenshot(path=str(ARTIFACTS / name), full_page=True)
            assert (ARTIFACTS / name).stat().st_size > 10_000
            assert problems == []
        finally:
            context.close()
