"""How long a reader waits for a Run box's first output: a measurement, not a test.

Serves a built site on 127.0.0.1 (a port of its own), opens a page in Debian's
Chromium through Playwright, and times, from the click on Run to the first
character of output:

- ``first, at once``: a fresh browser profile, Run clicked as soon as the page
  has loaded (the runtime starts loading when the block scrolls into view);
- ``first, after reading``: a fresh profile, the block scrolled into view, Run
  clicked a few seconds later (a reader reading the code first);
- ``repeat``: Run again on the same page;
- ``after a reload``: the same profile, the page reloaded (the HTTP cache is
  warm, Python starts again), Run clicked at once.

With ``--load`` it runs the same beside ``stress-ng --cpu 2`` (two CPU-bound
processes, as the test suite's timing rule says). Build the site first:

    NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir /tmp/runbox-site
    .venv/bin/python scripts/runbox_timing.py /tmp/runbox-site --repeat 3
    .venv/bin/python scripts/runbox_timing.py /tmp/runbox-site --repeat 3 --load
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import shutil
import statistics
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# In the page: the time of each click on a Run button, and of the first output
# of the box it belongs to.
PROBE = """
window.__runbox = {};
document.addEventListener("click", (event) => {
  const box = event.target.closest(".qc-run");
  if (!box || !event.target.matches("button") || !/^Run/.test(event.target.textContent)) return;
  const output = box.querySelector(".qc-run__output");
  const entry = window.__runbox = { clicked: performance.now(), first: null };
  const seen = new MutationObserver(() => {
    if (entry.first === null && output.textContent.length > 0) {
      entry.first = performance.now();
      seen.disconnect();
    }
  });
  seen.observe(output, { childList: true, subtree: true, characterData: true });
}, true);
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def serving(site: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def first_output_ms(page, *, timeout_ms: int = 120_000) -> float:
    """Click Run on the page's first Run box; milliseconds to its first output."""
    box = page.locator(".qc-run").first
    box.locator("button", has_text="Run").first.click()
    page.wait_for_function("() => window.__runbox && window.__runbox.first !== null",
                           timeout=timeout_ms)
    page.wait_for_function("() => ['done', 'failed', 'stopped'].includes("
                           "document.querySelector('.qc-run').dataset.state)", timeout=timeout_ms)
    entry = page.evaluate("() => window.__runbox")
    return float(entry["first"] - entry["clicked"])


def one_round(browser, url: str, read_s: float) -> dict[str, float]:
    times: dict[str, float] = {}
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.add_init_script(PROBE)
        page = context.new_page()
        page.goto(url, wait_until="load")
        times["first, at once"] = first_output_ms(page)
        times["repeat"] = first_output_ms(page)
        page.reload(wait_until="load")
        times["after a reload"] = first_output_ms(page)
    finally:
        context.close()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.add_init_script(PROBE)
        page = context.new_page()
        page.goto(url, wait_until="load")
        page.locator(".qc-run").first.scroll_into_view_if_needed()
        page.wait_for_timeout(read_s * 1000)
        times["first, after reading"] = first_output_ms(page)
    finally:
        context.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", type=Path, help="a built site (mkdocs build --site-dir ...)")
    parser.add_argument("--page", default="/start/", help="the page whose first Run box is timed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--read", type=float, default=3.0,
                        help="seconds a reader spends on the code before Run (after reading)")
    parser.add_argument("--load", action="store_true", help="beside stress-ng --cpu 2")
    args = parser.parse_args()
    stress = None
    if args.load:
        if shutil.which("stress-ng") is None:
            raise SystemExit("stress-ng is missing: apt-get install -y stress-ng")
        stress = subprocess.Popen(["stress-ng", "--cpu", "2", "--quiet"])
    try:
        with serving(args.site) as root, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                rounds = [one_round(browser, root + args.page, args.read) for _ in range(args.repeat)]
            finally:
                browser.close()
    finally:
        if stress is not None:
            stress.terminate()
            stress.wait()
    print(f"{args.page} first Run box, ms from the click to the first output"
          f" ({'beside stress-ng --cpu 2' if args.load else 'quiet'}, {args.repeat} rounds):")
    for name in rounds[0]:
        values = [r[name] for r in rounds]
        print(f"  {name:22} median {statistics.median(values):7.0f}   "
              + " ".join(f"{v:.0f}" for v in values))


if __name__ == "__main__":
    main()
