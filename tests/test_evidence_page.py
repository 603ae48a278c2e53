"""The page "Crashes, as timelines" in Chromium: its filters, from the keyboard.

Each filter is a labelled <select> (assets/javascripts/evidence-timelines.js);
a choice shows exactly the cases that carry it, as the computed style says
(the ``hidden`` attribute alone proves nothing where a theme styles the
element), and the status line counts them. Back to "all" shows every case
again: the negative control that the filter hid what it hid.
"""

from __future__ import annotations

import pytest

from tests.site_build import ARTIFACTS, open_page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the first test may build the site (minutes, loaded)

PAGE = "/evidence-timelines/"
SHOWN = """box => [...box.querySelectorAll('ol.qc-evidence__items > li')].map(li => {
  const style = getComputedStyle(li), rect = li.getBoundingClientRect();
  return [li.dataset.operation || li.dataset.who, li.dataset.outcome || li.dataset.doing,
          style.display !== 'none' && rect.height > 0];
})"""


def test_the_filters_show_what_they_say_from_the_keyboard(browser, served_site: str) -> None:
    context, page, problems, _ = open_page(browser, served_site + PAGE, python_in_view=False)
    try:
        matrix = page.locator(".qc-evidence").first
        cases = matrix.evaluate(SHOWN)
        assert len(cases) > 100 and all(visible for _, _, visible in cases)
        count = matrix.locator(".qc-evidence__count")
        assert count.get_attribute("role") == "status"
        assert count.text_content() == f"Showing {len(cases)} of {len(cases)}."

        # From the keyboard: a focused filter chooses with the arrows, Tab goes on to the next.
        operation = page.get_by_label("Operation", exact=True)
        operation.focus()
        assert page.evaluate("() => document.activeElement.dataset.filter") == "operation"
        page.keyboard.press("ArrowDown")  # the first operation after "all"
        chosen = operation.input_value()
        assert chosen != ""
        shown = [(op, outcome) for op, outcome, visible in matrix.evaluate(SHOWN) if visible]
        assert shown and {op for op, _ in shown} == {chosen}
        assert len(shown) == sum(op == chosen for op, _, _ in cases)
        assert count.text_content() == f"Showing {len(shown)} of {len(cases)}."
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.dataset.filter") == "outcome"
        page.get_by_label("Outcome", exact=True).select_option("committed")
        both = [(op, outcome) for op, outcome, visible in matrix.evaluate(SHOWN) if visible]
        assert both and set(both) == {(chosen, "committed")}
        # Negative control: "all" again shows every case.
        operation.select_option("")
        page.get_by_label("Outcome", exact=True).select_option("")
        assert all(visible for _, _, visible in matrix.evaluate(SHOWN))
        assert count.text_content() == f"Showing {len(cases)} of {len(cases)}."

        # The kills, where a committed record keeps a sample: the marks follow the filter too.
        for box in page.locator(".qc-evidence").all()[1:]:
            kills = box.evaluate(SHOWN)
            select = box.locator("select[data-filter='who']")
            select.select_option("producer")
            shown = [who for who, _, visible in box.evaluate(SHOWN) if visible]
            assert set(shown) <= {"producer"} and len(shown) == sum(w == "producer" for w, _, _ in kills)
            marks = box.evaluate("box => [...box.querySelectorAll('svg g.qc-evidence__item')]"
                                 ".filter(g => getComputedStyle(g).display !== 'none').map(g => g.dataset.who)")
            assert set(marks) <= {"producer"} and len(marks) == len(shown)
            select.select_option("")
        # The first cases as a reader sees them, in both palettes (test-artifacts/screenshots/).
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for scheme, palette in (("light", "default"), ("dark", "slate")):
            page.emulate_media(color_scheme=scheme)
            page.wait_for_function(
                f"() => document.body.getAttribute('data-md-color-scheme') === '{palette}'", timeout=10_000)
            shot = ARTIFACTS / f"evidence-timelines-{scheme}.png"
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000, shot
        assert problems == [], problems
    finally:
        context.close()
