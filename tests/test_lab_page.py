"""The lab page (docs/lab.md) in Chromium: the reader's steps, on the real queue_core in Pyodide.

Each scenario is played with Next, step by step; after every step the rows and
the effects the page shows must equal what the database file holds, read by
the test itself through the lab's own entry point (``window.qcLab.call``, a
SELECT on the same file in the same Python). The negative control: with the
fence switched off the page shows the doubled effect, and with it on it does
not. Then the lab is driven from the keyboard alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from docs_support.lab_engine import ACKS
from docs_support.lab_story import SCENARIOS
from tests.site_build import ARTIFACTS, open_page, python_requests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the first test may build the site (minutes, loaded)

PAGE = "/lab/"
LONG = 120_000  # ms: Python's first start beside two CPU-bound processes
STEP = 30_000
ROWS_SQL = ("SELECT event_id, state, attempts, generation, lease_token, lease_until, available_at,"
            " last_error FROM messages ORDER BY event_id")
EFFECTS_SQL = "SELECT n, event_id, worker, generation, amount_cents, at, fence_held FROM lab_effects ORDER BY n"
RENDERS = "() => Number(document.querySelector('.qc-lab').dataset.renders || 0)"


def token(value: int) -> str:
    return "#" + f"{value:016x}"[:6] if value else "0"


def query(page, sql: str) -> list[list[Any]]:
    answer = page.evaluate("sql => window.qcLab.call({do: 'query', sql})", sql)
    assert "rows" in answer, answer
    return answer["rows"]


def database(page) -> tuple[list[list[str]], list[list[str]]]:
    """The rows and effects as the file holds them, written as the page writes them."""
    rows = [[e, s, str(a), str(g), token(t), "NULL" if u is None else str(u), str(av),
             "NULL" if err is None else err]
            for e, s, a, g, t, u, av, err in query(page, ROWS_SQL)]
    effects = [[str(n), e, w, str(g), str(c), str(at), "yes" if held else "no"]
               for n, e, w, g, c, at, held in query(page, EFFECTS_SQL)]
    return rows, effects


def shown(page) -> tuple[list[list[str]], list[list[str]]]:
    """The rows and effects as the page shows them."""
    cells = """table => [...table.querySelectorAll('tbody tr')]
      .map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent))"""
    return (page.locator(".qc-lab__rows").evaluate(cells),
            page.locator(".qc-lab__effects").evaluate(cells))


def after(page, do) -> None:
    """Do something, then wait until the lab has drawn its answer."""
    before = page.evaluate(RENDERS)
    do()
    page.wait_for_function(f"n => ({RENDERS})() > n && !document.querySelector('.qc-lab').dataset.busy",
                           arg=before, timeout=LONG)


def choose(page, label: str, value: str) -> None:
    after(page, lambda: page.get_by_label(label, exact=True).select_option(value))


def verdicts(page) -> dict[str, str]:
    return dict(page.locator(".qc-lab__judged").evaluate_all(
        "spans => spans.map(s => [s.textContent.split(':')[0], s.dataset.kind])"))


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_shows_what_the_database_holds_step_by_step(browser, served_site: str,
                                                                    scenario: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE)
    try:
        choose(page, "Scenario", scenario)
        assert shown(page) == database(page)
        status = page.locator(".qc-lab__status")
        assert status.get_attribute("role") == "status" and status.get_attribute("aria-live") == "polite"
        steps = SCENARIOS[scenario].steps
        for number, (action, caption) in enumerate(steps, 1):
            assert caption in str(page.locator(".qc-lab__caption").text_content())
            after(page, lambda: page.locator(".qc-lab button[data-action='next']").click())
            assert page.locator(".qc-lab").get_attribute("data-steps") == str(number)
            assert shown(page) == database(page), (scenario, number, action)
            said = str(status.text_content())
            assert said.startswith(f"Step {number}, at "), said
            log = page.locator(".qc-lab__log li")
            assert log.count() == number and said.endswith(str(log.nth(number - 1).text_content())
                                                           .split(" ", 1)[1])
            # the timeline has a column per step: a mark for each worker's step
            marks = page.locator(".qc-lab__svg .qc-tl__mark").count()
            assert marks == sum(a.split(".")[0] in "AB" for a, _ in steps[:number])
        assert "Done:" in str(page.locator(".qc-lab__caption").text_content())
        assert set(verdicts(page).values()) <= {"once", "none"}
        assert problems == [], problems
    finally:
        context.close()


def test_without_the_fence_the_page_shows_the_doubled_effect(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE)
    try:
        choose(page, "Scenario", "gc-pause")
        for _ in SCENARIOS["gc-pause"].steps:
            after(page, lambda: page.locator(".qc-lab button[data-action='next']").click())
        _, effects = shown(page)
        assert [row[2] for row in effects] == ["B"] and verdicts(page) == {"E0001": "once"}
        # The same steps with no fence: both completions commit, the money counts twice.
        choose(page, "The ACK", "none")
        rows, effects = shown(page)
        assert (rows, effects) == database(page)
        assert [row[2] for row in effects] == ["A", "B"] and verdicts(page) == {"E0001": "doubled"}
        assert query(page, "SELECT sum(amount_cents) FROM lab_effects") == [[20000]]
        assert page.locator(".qc-tl__effect").count() == 2
        assert ACKS["none"] in str(page.locator(".qc-lab__status").text_content())
        # What a reader sees of the doubled effect, in both palettes (test-artifacts/screenshots/).
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for scheme, palette in (("light", "default"), ("dark", "slate")):
            page.emulate_media(color_scheme=scheme)
            page.wait_for_function(
                f"() => document.body.getAttribute('data-md-color-scheme') === '{palette}'", timeout=10_000)
            shot = ARTIFACTS / f"lab-gc-pause-no-fence-{scheme}.png"
            page.locator(".qc-lab").screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000, shot
        # ... and the fence back on: once again.
        choose(page, "The ACK", "fenced")
        _, effects = shown(page)
        assert [row[2] for row in effects] == ["B"] and verdicts(page) == {"E0001": "once"}
        assert query(page, "SELECT count(*) FROM lab_effects") == [[1]]
        assert problems == [], problems
    finally:
        context.close()


def test_the_lab_works_from_the_keyboard(browser, served_site: str) -> None:
    context, page, problems, requested = open_page(browser, served_site + PAGE, python_in_view=False)
    try:
        # Python waits for the reader (loadInView false): focus alone starts it.
        assert python_requests(requested) == []
        scenario = page.get_by_label("Scenario", exact=True)
        scenario.focus()
        page.wait_for_function(f"() => ({RENDERS})() > 0", timeout=LONG)
        assert python_requests(requested) != []
        # A keyboard user chooses with the arrows: the first scenario after "Free".
        after(page, lambda: page.keyboard.press("ArrowDown"))
        assert scenario.input_value() == list(SCENARIOS)[0]
        # Tab reaches every control in order; each shows where the focus is.
        order = []
        for _ in range(7):
            page.keyboard.press("Tab")
            order.append(page.evaluate("""() => { const e = document.activeElement;
              return [e.tagName, e.dataset.action || e.id.replace(/-\\d+$/, ''),
                      getComputedStyle(e).outlineStyle] }"""))
        assert [o[:2] for o in order[:5]] == [["SELECT", "qc-lab-select"], ["BUTTON", "back"],
                                              ["BUTTON", "next"], ["BUTTON", "reset"], ["BUTTON", "A.claim"]]
        assert all(style != "none" for _, _, style in order), order
        # Enter presses a worker's button: A claims.
        page.locator(".qc-lab button[data-action='A.claim']").focus()
        after(page, lambda: page.keyboard.press("Enter"))
        assert "A claims E0001" in str(page.locator(".qc-lab__status").text_content())
        # A button that cannot act now stays reachable and says why (A holds a lease already).
        page.locator(".qc-lab button[data-action='A.claim']").focus()
        assert page.locator(".qc-lab button[data-action='A.claim']").get_attribute("aria-disabled") == "true"
        page.keyboard.press("Space")
        page.wait_for_function("() => document.querySelector('.qc-lab__status').textContent"
                               ".startsWith('Not now: A holds a lease already')", timeout=STEP)
        assert page.locator(".qc-lab").get_attribute("data-steps") == "1"
        # The timeline scrolls from the keyboard too: it takes the focus.
        assert page.locator(".qc-lab__timeline").get_attribute("tabindex") == "0"
        assert problems == [], problems
    finally:
        context.close()
