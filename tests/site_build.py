"""The built site, for the tests that read it or open it in a browser (a pytest plugin).

``tests/conftest.py`` registers this module, so that every test module shares
one pair of builds, one server each and one browser per session (per worker
under pytest-xdist, where the local build is made once for all workers):

- ``built_site``: the local build, as ``make site`` makes it;
- ``published_build`` and ``served_published``: the build the Pages workflow
  makes, served at the very address its SITE_URL names;
- ``served_site``: the local build served on 127.0.0.1;
- ``browser``: Debian's Chromium, driven by Playwright (skipped where it is
  missing, except under CI).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
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
LOCAL_SITE_URL = "http://127.0.0.1:8000/"  # mkdocs.yml's default: `make serve`
PUBLISHED_REPO_URL = "https://github.com/example/queue_core"  # any repository: nothing fetches it
MERMAID = "assets/javascripts/mermaid.min.js"
# axe-core, the accessibility engine behind Lighthouse: `make test` installs the
# version locked in tests/browser/package-lock.json (npm ci), never a CDN copy.
AXE = ROOT / "tests" / "browser" / "node_modules" / "axe-core" / "axe.min.js"
# Called with a list of rule ids, runs only those; without, every rule.
RUN_AXE = """async (rules) => (await axe.run(document, rules ? {resultTypes: ["violations"], runOnly: rules}
                                                    : {resultTypes: ["violations"]})).violations
  .filter(v => v.impact === "serious" || v.impact === "critical")
  .map(v => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(", ")}`)"""
# `python -c DOCS_ONLY_MKDOCS build ...`: mkdocs, with what only `make test`
# installs (and the test suite itself) unimportable.
TEST_ONLY = ("pytest", "_pytest", "hypothesis", "playwright", "psycopg", "mfusepy", "tests")
DOCS_ONLY_MKDOCS = f"""
import sys

class TestOnly:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {TEST_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}: test-only, and `make site` does not "
                                      "install it; a page must not import it at build time", name=name)
        return None

sys.meta_path.insert(0, TestOnly())
from mkdocs.__main__ import cli
sys.argv[0] = "mkdocs"
cli()
"""


# ------------------------------------------------------------------- builds

@dataclass
class Build:
    out: Path
    process: subprocess.Popen[bytes]
    log: Path
    site_url: str
    repo_url: str | None

    def wait(self) -> Path:
        returncode = self.process.wait(timeout=900)
        log = self.log.read_text(encoding="utf-8", errors="replace")
        assert returncode == 0, log
        warnings = [line for line in log.splitlines() if "WARNING" in line]
        assert warnings == [], "\n".join(warnings)
        return self.out


def _start_build(out: Path, *, site_url: str | None, repo_url: str | None) -> Build:
    env = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "REPO_URL")}
    env["NO_MKDOCS_2_WARNING"] = "1"
    if site_url is not None:
        env["SITE_URL"] = site_url
    if repo_url is not None:
        env["REPO_URL"] = repo_url
    log = out.with_name(out.name + ".log")
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", DOCS_ONLY_MKDOCS, "build", "--strict", "--site-dir", str(out)],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env=env,
        )
    return Build(out, process, log, site_url or LOCAL_SITE_URL, repo_url)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder without a log line per request."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


# A project's published site lives under a sub-path (https://owner.github.io/queue_core/),
# so every URL its pages and the runtime use must be relative.
PREFIX = "/queue_core/"
# The runtime's WebAssembly: a request for it is how a test sees that Python started loading.
PYODIDE_WASM = "/pyodide.asm.wasm"


def python_requests(requested: list[str]) -> list[str]:
    """The requests, of those ``open_page`` collected, for Python's runtime (Pyodide and the
    queue_core package it imports): none means the page never started loading Python."""
    return [url for url in requested if "/assets/pyodide/" in url or "/assets/run/" in url]


class SubPathHandler(QuietHandler):
    """The site under PREFIX, as on a project's Pages host; anything else is 404."""

    def translate_path(self, path: str) -> str:
        if not path.startswith(PREFIX):
            return str(Path(self.directory) / "__outside_the_site__")
        return super().translate_path("/" + path[len(PREFIX):])


class SiteServer(http.server.ThreadingHTTPServer):
    """A test server of a built site that says nothing when the browser drops a request.

    Chromium cancels requests it no longer needs (a page left, a prefetch); the
    standard server then prints the write's BrokenPipeError as a traceback, which
    reads like a failure in a test log. Any other error is still printed.
    """

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


def site_server(directory: Path, handler_class: type[QuietHandler] = QuietHandler) -> SiteServer:
    handler = functools.partial(handler_class, directory=str(directory))
    return SiteServer(("127.0.0.1", 0), handler)


def _shared_folder(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder every pytest-xdist worker of this run shares, or None without workers."""
    if not hasattr(config, "workerinput"):  # set by pytest-xdist in its workers only
        return None
    # each worker's base folder is <run>/popen-gwN: the run's folder is their parent
    return tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def built_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local build (``mkdocs build --strict``, no SITE_URL/REPO_URL); fails on any warning.

    Built once per run: under pytest-xdist the first worker that needs it builds
    it under a lock in the run's shared folder, and the others wait and read it
    (a build they would each repeat costs more than the tests that read it).
    """
    shared = _shared_folder(request.config, tmp_path_factory)
    if shared is None:
        return _start_build(tmp_path_factory.mktemp("site-local"), site_url=None, repo_url=None).wait()
    out, verdict = shared / "site-local", shared / "site-local.verdict"
    with open(shared / "site-local.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not verdict.exists():
            try:
                _start_build(out, site_url=None, repo_url=None).wait()
            except AssertionError as failed:
                verdict.write_text(f"failed\n{failed}", encoding="utf-8")
                raise
            verdict.write_text("built", encoding="utf-8")
    text = verdict.read_text(encoding="utf-8")
    assert text == "built", f"the local build failed in another worker:\n{text}"
    return out


@pytest.fixture(scope="session")
def _published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Build, http.server.ThreadingHTTPServer]]:
    """The published build and its server, bound first so that its SITE_URL names the
    address the browser will really use, under PREFIX as a project's Pages site is
    (so its tests share one worker: tests/conftest.py)."""
    out = tmp_path_factory.mktemp("site-published")
    server = site_server(out, SubPathHandler)
    build = _start_build(out, site_url=f"http://127.0.0.1:{server.server_address[1]}{PREFIX}",
                         repo_url=PUBLISHED_REPO_URL)
    try:
        yield build, server
    finally:
        if build.process.poll() is None:
            build.process.kill()
            build.process.wait()
        server.server_close()


@pytest.fixture(scope="session")
def published_build(_published: tuple[Build, http.server.ThreadingHTTPServer]) -> Build:
    """The build the Pages workflow makes: SITE_URL and REPO_URL set; fails on any warning."""
    build = _published[0]
    build.wait()
    return build


def _load_hooks():
    """The site's build hooks (overrides/hooks.py), loaded from their file as MkDocs loads them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("queue_core_site_hooks", ROOT / "overrides" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _load_hooks()


def site_pages(site: Path) -> list[str]:
    return sorted(
        "/" + p.parent.relative_to(site).as_posix().strip(".") + ("/" if p.parent != site else "")
        for p in site.rglob("index.html")
        if "assets" not in p.parts
    )


def html_of(site: Path, path: str) -> str:
    return (site / path.lstrip("/") / "index.html").read_text(encoding="utf-8")


def source_of(path: str) -> str:
    """The Markdown file a page is built from: "/" -> index.md, "/reference/api/" -> reference/api.md."""
    name = path.strip("/") or "index"
    for candidate in (f"{name}.md", f"{name}/index.md"):
        if (ROOT / "docs" / candidate).is_file():
            return candidate
    raise AssertionError(f"no Markdown source for {path}")


def canonical(html: str) -> str:
    match = re.search(r'<link rel="canonical" href="([^"]+)"', html)
    assert match, "no canonical link"
    return match.group(1)


def sitemap_urls(site: Path) -> set[str]:
    return set(re.findall(r"<loc>([^<]+)</loc>", (site / "sitemap.xml").read_text(encoding="utf-8")))


def diagrams_in(html: str) -> int:
    """A page's Mermaid diagrams (the figures drawn by hand need no Mermaid: ``figures_in``)."""
    return len(re.findall(r'<pre class="mermaid"', html))


def figures_in(html: str) -> int:
    """A page's figures drawn by hand as inline SVG (docs_support/state_machine.py)."""
    return len(re.findall(r'<figure class="qc-figure\b', html))



# ----------------------------------------------------------------- browser

@contextlib.contextmanager
def serving(server: http.server.ThreadingHTTPServer) -> Iterator[str]:
    """Serve in a thread until the block ends; the server's base URL."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def served_site(built_site: Path) -> Iterator[str]:
    with serving(site_server(built_site)) as url:
        yield url


@pytest.fixture(scope="session")
def served_published(_published: tuple[Build, http.server.ThreadingHTTPServer],
                     published_build: Build) -> Iterator[str]:
    """The published build at the very address its SITE_URL names (instant navigation needs it)."""
    server = _published[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield published_build.site_url.rstrip("/")
    finally:
        server.shutdown()


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


def open_page(browser, url: str, *, color_scheme: str = "light", python_in_view: bool = True):
    """Open ``url``; collect console errors, any request that leaves 127.0.0.1, and every URL requested.

    ``python_in_view=False``: Python loads only when Run is pointed at, focused or pressed, not
    when a Run block comes into view (run-here.js, ``qcRunBox.loadInView``): for a check of the
    page itself, to which starting Python in the background adds seconds of CPU and nothing else.
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=color_scheme)
    context.add_init_script(OPEN_SHADOW_ROOTS)
    if not python_in_view:
        context.add_init_script("window.qcRunBox = Object.assign(window.qcRunBox || {}, {loadInView: false});")
    page = context.new_page()
    problems: list[str] = []
    requested: list[str] = []
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}"))

    def outside(request) -> None:
        requested.append(request.url)
        host = urlparse(request.url).hostname
        if request.url.startswith(("http:", "https:")) and host != "127.0.0.1":
            problems.append(f"request leaves the machine: {request.url}")

    page.on("request", outside)
    page.goto(url, wait_until="networkidle")
    return context, page, problems, requested


# The code blocks that scroll sideways, as (longest line, scroll width, visible width). A
# session's line that is one line by contract (docs_support/code_width.py) is no excuse: it
# wraps in its block (overrides/hooks.py marks it .qc-wrap), so that its end is read.
SIDEWAYS = """() => [...document.querySelectorAll('pre > code')]
  .filter(code => code.scrollWidth > code.clientWidth + 1)
  .map(code => [Math.max(...code.textContent.split('\\n').map(line => line.length)),
                code.scrollWidth, code.clientWidth])"""


def follow_link(page, url: str) -> None:
    """Click the navigation's link to ``url`` as a reader does, and wait until the new page's
    content has replaced the old one (instant navigation changes the address first, so
    waiting for the address alone can still find the old page's elements)."""
    page.evaluate("() => { window.__leaving = document.querySelector('.md-content') }")
    page.evaluate("url => [...document.querySelectorAll('a.md-nav__link')]"
                  ".find(a => a.href === url).click()", url)
    page.wait_for_function(
        "url => location.href === url && window.__leaving && !window.__leaving.isConnected"
        " && document.querySelector('.md-content') !== null", arg=url, timeout=15_000)


def wait_for_diagrams(page, expected: int) -> None:
    page.wait_for_function(
        "() => [...document.querySelectorAll('div.mermaid')]"
        ".filter(d => d.shadowRoot && d.shadowRoot.querySelector('svg')).length"
        f" >= {expected}", timeout=15_000)


def mermaid_loads(requested: list[str]) -> list[str]:
    return [url for url in requested if urlparse(url).path.endswith("/" + MERMAID)]
