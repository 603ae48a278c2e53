"""MkDocs build hook (mkdocs.yml `hooks:`): progress while the examples run, and their cache.

* Progress. Every build says which page it is on, how many of its examples
  (markdown-exec's ``exec="on"`` blocks) ran or came from the cache, and how
  many examples so far: ``make serve`` is never silent for minutes.
* The cache, only where ``QUEUE_CORE_EXEC_CACHE`` names its folder (``make
  serve`` and ``make live`` set ``.cache/exec``; ``make site``, ``make test``
  and the docs-as-tests never do, so they run every block). An unchanged block
  is not run again: ``docs_support/exec_cache.py`` says what "unchanged" means
  (the block, the repository, the environment, what the block read).
* Helpers, when the cache is cold (a fresh clone, or a change outside docs/):
  the build starts ``QUEUE_CORE_EXEC_HELPERS`` more builds (default: one per CPU) that only run blocks into the cache, the costliest
  pages first, while this build takes the cheapest first. A page is run by whoever
  claims it first; this build waits for a helper's page, block by block, and runs
  a block itself if the helper did not record it. Helpers never write the site.

markdown-exec runs a Python block through ``formatters["python"]``, whose
``base_format`` calls ``run(source, ...)`` with the block's source after the
includes; this hook replaces that formatter with one whose ``run`` asks the cache.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from markdown_exec import base_format
from markdown_exec._internal import main as exec_main
from markdown_exec._internal.formatters import python as exec_python
from mkdocs.structure.files import Files

from docs_support.exec_cache import ExecCache, reads_the_clock
from docs_support.run_here import needs_a_machine

log = logging.getLogger("mkdocs.plugins.queue_core.build_cache")

CACHE = "QUEUE_CORE_EXEC_CACHE"  # the cache's folder; unset: no cache
HELPER = "QUEUE_CORE_EXEC_HELPER"  # in a helper: the folder of the build it helps
HELPERS = "QUEUE_CORE_EXEC_HELPERS"  # how many helpers a cold build starts
EXEC_FENCE = re.compile(
    r'^[ \t]*(`{3,}|~{3,})\s*py(thon)?\b[^\n]*\bexec="(on|1|yes|true)"', re.M
)
KEEP_DAYS = 14  # an entry no build used for this long is removed
WAIT = 0.05  # seconds between two looks at a helper's progress


class Build:
    """One build's state: the cache, the page being built, the counts, the helpers."""

    def __init__(self) -> None:
        # Never under pytest (a test's build runs every block), even if the variable leaked in.
        folder = None if "PYTEST_CURRENT_TEST" in os.environ else os.environ.get(CACHE)
        self.cache = ExecCache(Path(folder).resolve()) if folder else None
        self.helper_of = os.environ.get(HELPER)  # set: this process is a helper
        self.parent = os.getppid()  # a helper stops when the build it helps is gone
        self.run_folder: Path | None = Path(self.helper_of) if self.helper_of else None
        self.helpers: list[subprocess.Popen[bytes]] = []
        self.page = ""
        self.page_number = 0
        self.pages = 0
        self.owned = True  # this process runs the current page's blocks
        self.page_ran = self.page_reused = 0
        self.page_began = 0.0
        self.total = self.ran = 0
        self.began = time.monotonic()
        self.keys: dict[str, list[str]] = {}  # page -> its blocks' keys
        self.waiting = ""  # the helper's page this build said it waits for

    # -- claims between this build and its helpers --------------------------------
    def _marker(self, kind: str, page: str) -> Path:
        assert self.run_folder is not None
        return self.run_folder / kind / page.replace("/", "__")

    def claim(self, page: str) -> bool:
        if self.run_folder is None:
            return True
        path = self._marker("claims", page)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def finished(self, page: str) -> None:
        if self.run_folder is not None and self.owned:
            path = self._marker("done", page)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()

    def helpers_alive(self) -> bool:
        return any(helper.poll() is None for helper in self.helpers)

    # -- running one block --------------------------------------------------------
    def execute(self, code: str, options: dict[str, Any], run: Any) -> str:
        self.total += 1
        if self.cache is None or options.get("session") or reads_the_clock(code):
            self.ran += 1
            self.page_ran += 1
            output: str = run()
            return output
        if self.helper_of and not self.owned:  # another process runs this page
            return ""
        key = self.cache.key(code, options)
        self.keys.setdefault(self.page, []).append(key)
        if (
            not self.owned
        ):  # a helper claimed this page: wait for its record of the block
            while True:
                found = self.cache.lookup(key)
                if found is not None:
                    self.page_reused += 1
                    return found
                if self._marker("done", self.page).exists() or not self.helpers_alive():
                    break
                if self.waiting != self.page:
                    log.info(f"examples: waiting for the helper running {self.page}")
                    self.waiting = self.page
                time.sleep(WAIT)
        found = self.cache.lookup(key)
        if found is not None:
            self.page_reused += 1
            return found
        output = self.cache.record(key, run, page=self.page)
        self.ran += 1
        self.page_ran += 1
        return output

    # -- helpers --------------------------------------------------------------------
    def start_helpers(self, config: Any) -> None:
        assert self.cache is not None
        complete = self.cache.folder / "complete"
        if complete.is_file() and complete.read_text("utf-8") == self.cache.base:
            return  # the last build recorded this repository's blocks: few will run
        count = int(os.environ.get(HELPERS, os.cpu_count() or 1))
        if count <= 0:
            return
        runs = self.cache.folder / "runs"
        for old in runs.glob("*") if runs.is_dir() else []:
            shutil.rmtree(old, ignore_errors=True)
        self.run_folder = runs / str(os.getpid())
        self.run_folder.mkdir(parents=True, exist_ok=True)
        for number in range(count):
            site = tempfile.mkdtemp(prefix="helper-site-", dir=self.run_folder)
            logfile = open(self.run_folder / f"helper-{number}.log", "wb")
            env = {
                **os.environ,
                HELPER: str(self.run_folder),
                CACHE: str(self.cache.folder),
            }
            self.helpers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "mkdocs",
                        "build",
                        "--quiet",
                        "--config-file",
                        config["config_file_path"],
                        "--site-dir",
                        site,
                    ],
                    env=env,
                    stdout=logfile,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            logfile.close()
        log.info(
            f"examples: the cache is cold; {count} helper build(s) run the costliest pages"
            " at the same time"
        )

    def stop_helpers(self) -> None:
        for helper in self.helpers:
            if helper.poll() is None:
                try:
                    os.killpg(
                        helper.pid, signal.SIGKILL
                    )  # the helper and its blocks' children
                except ProcessLookupError:
                    pass
            helper.wait()
        self.helpers = []
        if self.run_folder is not None and not self.helper_of:
            shutil.rmtree(self.run_folder, ignore_errors=True)
            self.run_folder = None

    # -- page order ---------------------------------------------------------------
    def cost(self, src_uri: str, text: str, timings: dict[str, float]) -> float:
        if src_uri in timings:
            return timings[src_uri]
        cost = 0.0
        for match in EXEC_FENCE.finditer(text):
            block = text[match.end() : text.find(match.group(1), match.end())]
            cost += 3.0 if needs_a_machine(block) else 0.1
        return cost


BUILD = Build()
_original_run = exec_python._run_python


def _format_python(**kwargs: Any) -> Any:
    options = {
        name: kwargs.get(name)
        for name in ("returncode", "session", "id", "workdir", "width")
    }
    options["extra"] = kwargs.get("extra", {})

    def run(code: str, **run_kwargs: Any) -> str:
        return BUILD.execute(code, options, partial(_original_run, code, **run_kwargs))

    return base_format(language="python", run=run, **kwargs)


def on_config(config: Any) -> Any:
    global BUILD
    if BUILD.helpers:
        BUILD.stop_helpers()
    BUILD = Build()
    exec_main.formatters["python"] = _format_python
    exec_main.formatters["py"] = _format_python
    return config


def on_pre_build(config: Any) -> None:
    if BUILD.cache is not None and not BUILD.helper_of:
        BUILD.cache.refresh()
        BUILD.start_helpers(config)


def on_files(files: Files, config: Any) -> Files:
    """With helpers, each takes the costliest pages first and this build the cheapest."""
    pages = [f for f in files if f.is_documentation_page()]
    BUILD.pages = len(pages)
    if BUILD.run_folder is None or BUILD.cache is None:
        return files
    try:
        timings = json.loads((BUILD.cache.folder / "pages.json").read_text("utf-8"))
    except (OSError, ValueError):
        timings = {}
    costs = {
        f.src_uri: BUILD.cost(
            f.src_uri, Path(f.abs_src_path or "").read_text("utf-8"), timings
        )
        for f in pages
    }
    pages.sort(key=lambda f: costs[f.src_uri], reverse=bool(BUILD.helper_of))
    return Files([f for f in files if not f.is_documentation_page()] + pages)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if BUILD.helper_of and os.getppid() != BUILD.parent:
        os._exit(0)  # the build this one helped has gone: nothing will read its blocks
    BUILD.page = page.file.src_uri
    BUILD.page_number += 1
    BUILD.page_ran = BUILD.page_reused = 0
    BUILD.page_began = time.monotonic()
    BUILD.owned = BUILD.claim(BUILD.page)
    if BUILD.helper_of and not BUILD.owned:
        return ""  # another process builds this page: nothing here to render
    examples = len(EXEC_FENCE.findall(markdown))
    if examples and not BUILD.helper_of:
        log.info(
            f"examples: page {BUILD.page_number} of {BUILD.pages}, {BUILD.page}:"
            f" {examples} to run ({BUILD.total} so far)"
        )
    return markdown


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    BUILD.finished(BUILD.page)
    if (BUILD.page_ran or BUILD.page_reused) and not BUILD.helper_of:
        log.info(
            f"examples: {BUILD.page} done in {time.monotonic() - BUILD.page_began:.1f} s:"
            f" {BUILD.page_ran} run"
            + (f", {BUILD.page_reused} from the cache" if BUILD.cache else "")
            + ";"
            f" {BUILD.total} examples so far"
        )
    return html


def on_env(env: Any, config: Any, files: Files) -> Any:
    if BUILD.helper_of:  # a helper's work is done: its blocks are in the cache
        logging.shutdown()
        os._exit(0)
    BUILD.stop_helpers()
    log.info(
        f"examples: {BUILD.total} in {time.monotonic() - BUILD.began:.1f} s"
        f" ({BUILD.ran} run here"
        + (f", {BUILD.total - BUILD.ran} from the cache" if BUILD.cache else "")
        + ")"
    )
    return env


def on_post_build(config: Any) -> None:
    cache = BUILD.cache
    if cache is None or BUILD.helper_of:
        return
    # A page's cost is the longest its blocks took (a record the page reuses
    # today may have to be made again after a change): the helpers' order.
    try:
        timings = json.loads((cache.folder / "pages.json").read_text("utf-8"))
    except (OSError, ValueError):
        timings = {}
    for page, keys in BUILD.keys.items():
        took = round(sum(cache.seconds(key) for key in keys), 3)
        timings[page] = max(took, float(timings.get(page, 0.0)))
    cache.folder.mkdir(parents=True, exist_ok=True)
    (cache.folder / "pages.json").write_text(json.dumps(timings, indent=1), "utf-8")
    (cache.folder / "complete").write_text(cache.base, "utf-8")
    # Entries this build used are touched; one no build used for KEEP_DAYS goes
    # (a block no page has any more, another SITE_URL's, an older repository's).
    used = {f"{key}.json" for keys in BUILD.keys.values() for key in keys}
    now = time.time()
    for entry in (cache.folder / "blocks").glob("*.json"):
        try:
            if entry.name in used:
                os.utime(entry, (now, now))
            elif now - entry.stat().st_mtime > KEEP_DAYS * 86400:
                entry.unlink()
        except OSError:
            pass


def on_build_error(error: Exception) -> None:
    BUILD.stop_helpers()


def on_shutdown() -> None:
    BUILD.stop_helpers()


@atexit.register
def _stop_helpers_at_exit() -> None:
    """Ctrl-C during the build: no helper is left running."""
    if not BUILD.helper_of:
        BUILD.stop_helpers()
