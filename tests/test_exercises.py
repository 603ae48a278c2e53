"""The solutions of docs/exercises.md, checked independently of the page.

Each solution is a program in snippets/exercise_*.py that defines ``solve(store,
clock)`` (and, for the metric, ``dlq_metrics(store)``). tests/test_snippets.py
runs each program and compares its output; here each ``solve`` is loaded and
applied to a starting state built by this file, not by the snippet, and the
result is checked in three ways at once: money, number of effects, and the
state of every message. A wrong solution fails here even if its own printed
checks were weakened.
"""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queue_core import MAX_ATTEMPTS, Handler, ModelClock, Store, UnknownEvent, ledger, work
from queue_core.app.demo import run_demo

from .support import DEMO_LINES

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "snippets"
PAGE = ROOT / "docs" / "exercises.md"

START = {"E0001": "done", "E0002": "done", "E0003": "done", "E0004": "dead"}


def start_state(folder: Path) -> tuple[Store, ModelClock]:
    """The reference demo's ``final`` state: E0001..E0003 done (17000), E0004 dead."""
    clock = ModelClock(1000)
    store = Store(folder / "queue.sqlite3", clock=clock)
    ledger.install(store)
    store.enqueue(DEMO_LINES)
    work(store, Handler(), lease_seconds=2)
    return store, clock


def load(name: str) -> dict[str, Any]:
    """Run an exercise program (its own checks included) and return its functions."""
    return runpy.run_path(str(SNIPPETS / f"{name}.py"), run_name="exercise")


def observe(store: Store) -> tuple[int, int, dict[str, str], list[tuple[str, str, int]]]:
    """Money, number of effects, each message's state, and the effects themselves."""
    totals = ledger.totals(store)
    states = {message.event_id: message.state for message in store.messages()}
    return totals.total_cents, totals.count, states, ledger.effects(store)


BOOK_PEN = [("E0001", "book", 10000), ("E0002", "pen", 2000), ("E0003", "book", 5000)]


def test_the_start_state_is_the_demos_final_snapshot(tmp_path: Path) -> None:
    store, _ = start_state(tmp_path)
    assert ledger.report(store).to_dict() == run_demo(tmp_path).snapshots["final"].to_dict()
    assert observe(store) == (17000, 3, START, BOOK_PEN)


def test_every_exercise_solution_is_on_the_page_in_a_folded_solution() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for name in EXPECTED:
        include = f'--8<-- "snippets/{name}.py"'
        assert include in page, name
        before = page[: page.index(include)]
        assert before.rfind('??? success "Solution"') > before.rfind("## "), f"{name} is not folded away"


def expect(total: int, effects: int, states: dict[str, str], rows: list[tuple[str, str, int]]):
    def check(store: Store, returned: Any, module: dict[str, Any]) -> None:
        assert observe(store) == (total, effects, states, rows)
    return check


def metric_check(store: Store, returned: Any, module: dict[str, Any]) -> None:
    expect(17000, 3, {**START, "E0005": "dead"}, BOOK_PEN)(store, returned, module)
    wanted = {"dead_letters": 2, "attempts_total": 1 + MAX_ATTEMPTS, "attempts_max": MAX_ATTEMPTS}
    assert returned == wanted
    assert module["dlq_metrics"](store) == wanted
    letters = {m.event_id: (m.attempts, m.last_error) for m in store.dead_letters()}
    assert letters == {"E0004": (1, "invalid_payload"), "E0005": (MAX_ATTEMPTS, "downstream_unavailable")}


def conflict_check(store: Store, returned: Any, module: dict[str, Any]) -> None:
    expect(17000, 3, START, BOOK_PEN)(store, returned, module)
    with pytest.raises(UnknownEvent):
        store.message("E0005")
    assert store.message("E0001").payload_object == {"category": "book", "amount_cents": 10000}


def old_generation_check(store: Store, returned: Any, module: dict[str, Any]) -> None:
    expect(20000, 4, {**START, "E0004": "done"}, [*BOOK_PEN, ("E0004", "toy", 3000)])(store, returned, module)
    # Two claims after the redrive: the stale one (generation 2) and the one that won (3).
    assert store.message("E0004").generation == 3


EXPECTED: dict[str, Callable[[Store, Any, dict[str, Any]], None]] = {
    "exercise_total_19000": expect(19000, 4, {**START, "E0005": "done"}, [*BOOK_PEN, ("E0005", "pen", 2000)]),
    "exercise_conflict_rollback": conflict_check,
    "exercise_recover_toy": expect(20000, 4, {**START, "E0004": "done"}, [*BOOK_PEN, ("E0004", "toy", 3000)]),
    "exercise_old_generation": old_generation_check,
    "exercise_dlq_metric": metric_check,
}


def test_every_exercise_program_is_checked_here() -> None:
    assert {p.stem for p in SNIPPETS.glob("exercise_*.py")} == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_solution_gives_the_right_money_effects_and_states(name: str, tmp_path: Path) -> None:
    module = load(name)
    store, clock = start_state(tmp_path)
    returned = module["solve"](store, clock)
    EXPECTED[name](store, returned, module)


def test_the_dlq_metric_of_an_empty_queue(tmp_path: Path) -> None:
    module = load("exercise_dlq_metric")
    store = Store(tmp_path / "empty.sqlite3", clock=ModelClock(1000))
    assert module["dlq_metrics"](store) == {"dead_letters": 0, "attempts_total": 0, "attempts_max": 0}
