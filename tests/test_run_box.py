"""The Run box as a reader sees it, in Chromium at 1280x900.

What shows is judged from the computed style and the size of each element
(the ``hidden`` attribute alone proves nothing: a theme's CSS can show a
hidden element), before and after a run. Then the labels of the two outputs,
a traceback without the runtime's frames, an endless loop that says it runs
long and is stopped while another block waits for it, and Python starting to
load when a Run block comes into view. Timings are measured by
``scripts/runbox_timing.py``, never asserted here.
"""

from __future__ import annotations

import re

import pytest

from tests.site_build import PYODIDE_WASM, open_page, python_requests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PAGE = "/lease/"  # five blocks with Run, the first one below the fold at 1280x900
LONG = 120_000  # ms: Python's first start beside two CPU-bound processes
DONE = "box => ['done', 'failed', 'stopped'].includes(box.dataset.state)"
VISIBLE = """el => {
  const style = getComputedStyle(el), rect = el.getBoundingClientRect();
  return style.display !== 'none' && style.visibility !== 'hidden' && rect.width > 0 && rect.height > 0;
}"""
# What a box shows, by name: every element the script adds, and the recorded output.
SHOWN = """(box, visible) => {
  const parts = {
    run: [...box.querySelectorAll('.qc-run__bar button')].find(b => b.textContent.startsWith('Run')),
    stop: [...box.querySelectorAll('.qc-run__bar button')].find(b => /^(Stop|Cancel)$/.test(b.textContent)),
    reset: [...box.querySelectorAll('.qc-run__bar button')].find(b => b.textContent === 'Reset'),
    status: box.querySelector('.qc-run__status'),
    help: box.querySelector('.qc-run__help'),
    your_label: box.querySelector('.qc-run__yours .qc-run__label'),
    your_output: box.querySelector('.qc-run__output'),
    recorded_label: box.querySelector('.qc-run__label--recorded'),
  };
  const isVisible = new Function('return ' + visible)();
  return Object.keys(parts).filter(name => parts[name] && isVisible(parts[name])).sort();
}"""
# Every state a box has been in, in order (data-state), for each box on the page.
STATES = """
new MutationObserver(records => {
  for (const r of records) {
    const box = r.target;
    if (!box.classList.contains('qc-run') || !box.dataset.state) continue;
    (box.__states = box.__states || []).push(box.dataset.state);
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-state']});
"""


def shown(box) -> list[str]:
    return box.evaluate(SHOWN, VISIBLE)


def visible(locator) -> bool:
    return bool(locator.evaluate(VISIBLE))


def edit(box, text: str) -> None:
    box.locator(".qc-run__code").evaluate("(c, text) => { c.textContent = text }", text)


def run(page, box, timeout_ms: int = LONG) -> str:
    """Click Run, wait for the end; what the reader's output box holds."""
    box.scroll_into_view_if_needed()
    box.locator("button", has_text="Run").click()
    page.wait_for_function(DONE, arg=box.element_handle(), timeout=timeout_ms)
    return str(box.locator(".qc-run__output").text_content())


def python_requested(page):
    """Waits (up to 30 s) for the page to request Python's WebAssembly: Python has started loading."""
    return page.expect_request(lambda request: request.url.endswith(PYODIDE_WASM), timeout=30_000)


def state(box) -> str:
    return str(box.evaluate("box => box.dataset.state"))


def test_before_a_run_only_run_and_its_link_show(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE)
    try:
        boxes = page.locator(".qc-run")
        for index in range(boxes.count()):
            assert shown(boxes.nth(index)) == ["help", "run"], f"block {index + 1}"
        box = boxes.first
        run(page, box)
        assert state(box) == "done"
        assert shown(box) == ["help", "recorded_label", "reset", "run", "status", "your_label",
                              "your_output"]
        # Negative control: without the box's own rule, the theme shows what the
        # script hid (the bug a reader met), and the check above sees it.
        removed = page.evaluate("""() => {
          for (const sheet of document.styleSheets) {
            let rules; try { rules = sheet.cssRules } catch { continue }
            for (let i = 0; i < rules.length; i++)
              if (rules[i].selectorText === '.qc-run [hidden]') { sheet.deleteRule(i); return true }
          }
          return false }""")
        assert removed
        assert "stop" in shown(boxes.nth(1)), "the check cannot tell a hidden Stop from a shown one"
        assert problems == [], problems
    finally:
        context.close()


def test_after_a_run_each_output_says_whose_it_is(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE)
    try:
        box = page.locator(".qc-run").first
        printed = run(page, box)
        assert state(box) == "done" and printed.strip()
        yours = box.locator(".qc-run__yours .qc-run__label")
        recorded = box.locator(".qc-run__label--recorded")
        assert visible(yours) and yours.text_content() == "Your run: done"
        assert visible(recorded) and recorded.text_content() == "Recorded when the site was built"
        # Each label names its own box: the reader's output by aria-labelledby,
        # the recorded output by coming right before it, and in that order.
        assert box.evaluate("""box => {
          const output = box.querySelector('.qc-run__output');
          return document.getElementById(output.getAttribute('aria-labelledby')).textContent }""") == "Your run: done"
        assert box.evaluate("""box => {
          const blocks = box.querySelectorAll('.highlight'), last = blocks[blocks.length - 1];
          const label = box.querySelector('.qc-run__label--recorded');
          return label.nextElementSibling === last
            && label.getBoundingClientRect().bottom <= last.getBoundingClientRect().top
            && box.querySelector('.qc-run__output').getBoundingClientRect().bottom
               <= label.getBoundingClientRect().top }""")
        # Negative control: Reset takes the reader's output away, and both labels with it.
        box.locator("button", has_text="Reset").click()
        assert not visible(yours) and not visible(recorded)
        assert shown(box) == ["help", "run"]
        assert problems == [], problems
    finally:
        context.close()


def test_a_traceback_shows_the_readers_frames_only(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE)
    try:
        box = page.locator(".qc-run").first
        edit(box, "print('never')\nprint(\n")  # a syntax error: nothing runs
        printed = run(page, box)
        assert state(box) == "failed"
        assert printed.startswith("Traceback (most recent call last):\n"), printed
        assert 'File "<exec>", line 2' in printed and "SyntaxError" in printed, printed
        assert "_pyodide" not in printed and "/lib/python" not in printed, printed
        note = box.locator(".qc-run__note")
        assert note.count() == 1 and "of Pyodide, the runtime that runs your code, cut here" in str(
            note.text_content()), printed
        # Negative control: frames of the standard library that the reader's own
        # code called are the reader's; only the runtime's are cut.
        edit(box, "import json\ndef parse():\n    json.loads('{')\nparse()\n")
        printed = run(page, box)
        assert state(box) == "failed"
        assert 'File "<exec>", line 4, in <module>' in printed and 'line 3, in parse' in printed, printed
        assert "/json/decoder.py" in printed and "JSONDecodeError" in printed, printed
        assert "_pyodide" not in printed, printed
        # And a run that raises nothing has no note.
        box.locator("button", has_text="Reset").click()
        run(page, box)
        assert state(box) == "done" and box.locator(".qc-run__note").count() == 0
        assert problems == [], problems
    finally:
        context.close()


def test_a_long_run_says_so_stop_ends_it_only_and_a_queued_run_waits(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE)
    try:
        page.evaluate(STATES)
        # Far off at first: the negative control that a run under the threshold offers no Stop.
        page.evaluate("() => { window.qcRunBox.slowAfterMs = 3_600_000 }")
        looping, queued, cancelled = (page.locator(".qc-run").nth(i) for i in range(3))
        edit(looping, "print('looping')\nwhile True:\n    pass\n")
        looping.scroll_into_view_if_needed()
        looping.locator("button", has_text="Run").click()
        page.wait_for_function("box => box.querySelector('.qc-run__output').textContent.includes('looping')",
                               arg=looping.element_handle(), timeout=LONG)
        assert state(looping) == "running" and "stop" not in shown(looping)
        assert "Still running" not in str(looping.locator(".qc-run__status").text_content())

        # A Run pressed meanwhile waits, and says so; it can be taken out of the line.
        for box in (queued, cancelled):
            box.scroll_into_view_if_needed()
            box.locator("button", has_text="Run").click()
            assert state(box) == "waiting"
            assert str(box.locator(".qc-run__status").text_content()).startswith("Waiting: another block")
            assert box.locator("button", has_text="Cancel").is_visible()
        cancelled.locator("button", has_text="Cancel").click()
        assert state(cancelled) == "cancelled" and shown(cancelled) == ["help", "run", "status"]

        # Past the threshold: the run says so, and Stop says what it does.
        page.evaluate("() => { window.qcRunBox.slowAfterMs = 200 }")
        page.wait_for_function("box => box.dataset.state === 'slow'", arg=looping.element_handle(),
                               timeout=10_000)
        status = str(looping.locator(".qc-run__status").text_content())
        assert status.startswith("Still running after 0.2 s."), status
        assert "Stop restarts Python for every block on this page" in status, status
        # and says how long that restart takes: as long as this page's Python took to start
        assert re.search(r"a new start, which took \d+\.\d s here", status), status
        stop = looping.locator("button", has_text="Stop")
        assert visible(stop) and "restarts Python" in str(stop.get_attribute("title"))
        page.evaluate("() => { window.qcRunBox.slowAfterMs = 3_600_000 }")  # for the queued run
        stop.click()
        page.wait_for_function(DONE, arg=looping.element_handle(), timeout=10_000)
        assert state(looping) == "stopped"

        # Stop ended the loop only: the waiting run starts on the new Python and
        # prints what the build recorded; the cancelled one never ran.
        page.wait_for_function(DONE, arg=queued.element_handle(), timeout=LONG)
        assert queued.evaluate("box => box.__states") == ["waiting", "starting", "running", "done"]
        printed = queued.locator(".qc-run__output").text_content()
        recorded = queued.evaluate("box => { const b = box.querySelectorAll('.highlight');"
                                   " return b[b.length - 1].querySelector('code').textContent }")
        assert str(printed).rstrip("\n") == str(recorded).rstrip("\n")
        states = looping.evaluate("box => box.__states")  # "starting" first if Python was not ready yet
        assert "waiting" not in states and states[-3:] == ["running", "slow", "stopped"], states
        assert cancelled.evaluate("box => box.__states") == ["waiting", "cancelled"]
        assert str(cancelled.locator(".qc-run__output").text_content()) == ""
        assert problems == [], problems
    finally:
        context.close()


def test_python_starts_loading_when_a_run_block_comes_into_view(browser, served_site: str) -> None:
    context, page, problems, requested = open_page(browser, served_site + PAGE)
    try:
        # Negative control: the page has loaded, no Run block is in view, nothing of Python loaded.
        assert page.evaluate("() => document.querySelector('.qc-run__bar').getBoundingClientRect().top"
                             " > innerHeight")
        assert python_requests(requested) == []
        with python_requested(page):
            page.locator(".qc-run").first.scroll_into_view_if_needed()
        assert problems == [], problems
    finally:
        context.close()
    # Focus on Run (a keyboard reader) starts it too, with the block still out of view.
    context, page, problems, requested = open_page(browser, served_site + PAGE)
    try:
        assert python_requests(requested) == []
        with python_requested(page):
            page.evaluate("() => document.querySelector('.qc-run__bar button').focus({preventScroll: true})")
        assert page.evaluate("() => document.querySelector('.qc-run__bar').getBoundingClientRect().top"
                             " > innerHeight")
        assert problems == [], problems
    finally:
        context.close()
    # With qcRunBox.loadInView false (the every-page check's setting), a Run block in view
    # loads nothing; pointing at Run still does.
    context, page, problems, requested = open_page(browser, served_site + PAGE, python_in_view=False)
    try:
        page.locator(".qc-run").first.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)  # the observer would have fired: above, scrolling alone loads it
        assert python_requests(requested) == []
        with python_requested(page):
            page.locator(".qc-run__bar button", has_text="Run").first.hover()
        assert problems == [], problems
    finally:
        context.close()


def test_the_recorded_output_is_labelled_as_soon_as_run_is_pressed(browser, served_site: str) -> None:
    """Before a slow first run prints, what sits under the status line is the build's output: it says so."""
    context, page, problems, _ = open_page(browser, served_site + PAGE, python_in_view=False)
    try:
        box = page.locator(".qc-run").first
        box.scroll_into_view_if_needed()
        recorded = box.locator(".qc-run__label--recorded")
        assert not visible(recorded)  # negative control: before Run, no label
        box.locator("button", has_text="Run").click()
        assert state(box) in ("starting", "running"), state(box)  # Python is still starting
        assert box.locator(".qc-run__output").text_content() == ""  # nothing printed yet
        assert visible(recorded) and recorded.text_content() == "Recorded when the site was built"
        page.wait_for_function(DONE, arg=box.element_handle(), timeout=LONG)
        assert problems == [], problems
    finally:
        context.close()


# The look of the reader's output box: its border and its label.
LOOK = """box => { const out = box.querySelector('.qc-run__output'), style = getComputedStyle(out);
  return {border: style.borderLeftColor + ' ' + style.borderLeftWidth,
          label: box.querySelector('.qc-run__yours .qc-run__label').textContent,
          labelColor: getComputedStyle(box.querySelector('.qc-run__yours .qc-run__label')).color,
          scrolls: out.scrollWidth > out.clientWidth + 1,
          right: out.getBoundingClientRect().right, boxRight: box.getBoundingClientRect().right} }"""


def apart(done: dict, failed: dict) -> bool:
    """A success and a failure look different: in the border and in the label's words."""
    return done["border"] != failed["border"] and done["label"] != failed["label"]


def test_a_success_and_a_failure_look_different_and_a_long_error_wraps(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE)
    try:
        box = page.locator(".qc-run").first
        run(page, box)
        assert state(box) == "done"
        done = box.evaluate(LOOK)
        # An error whose one line is far wider than the box, and which names a shell command.
        edit(box, "from queue_core import Store\nStore('queue-' + 'q' * 120 + '.sqlite3', queue='orders')\n")
        printed = run(page, box)
        assert state(box) == "failed", printed
        assert "queue-core create" in printed and "UnknownQueue" in printed, printed
        failed = box.evaluate(LOOK)
        assert apart(done, failed), (done, failed)
        assert failed["label"] == "Your run: it raised an exception" and done["label"] == "Your run: done"
        assert not apart(done, done)  # negative control: the same look is not "apart"
        # the long line wraps inside the box: nothing scrolls, nothing runs off the right edge
        assert not failed["scrolls"] and failed["right"] <= failed["boxRight"] + 1, failed
        # and the command it advises is said to run on the reader's machine, not here
        note = box.locator(".qc-run__note", has_text="runs in a shell on your machine")
        assert note.count() == 1 and note.locator("a").get_attribute("href").endswith("/reference/api/")
        assert problems == [], problems
    finally:
        context.close()
