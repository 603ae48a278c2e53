"""The state machine's figure (docs_support/state_machine.py) reads at a glance, in both layouts.

What a browser draws is measured by tests/test_diagrams.py; here the layouts
themselves are checked, before any browser: no label overlaps another or a
node, no edge runs through a label, each label touches its own edge, and the
arrows are the moves of the table on the overview page. Each check has a
negative control, a layout spoiled the way the check names.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from docs_support import state_machine as sm

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("layout", sm.LAYOUTS, ids=lambda layout: layout.name)
def test_each_layout_has_no_defect(layout: sm.Layout) -> None:
    assert sm.defects(layout) == []


def test_the_include_is_drawn_from_the_layouts() -> None:
    assert sm.INCLUDE.read_text(encoding="utf-8") == sm.include_text(), (
        "docs/includes/state-machine.md differs from the layouts: "
        "python -m docs_support.state_machine --write"
    )


def _moved(layout: sm.Layout, edge_id: str, **changes: object) -> sm.Layout:
    edges = tuple(
        dataclasses.replace(e, **changes) if e.id == edge_id else e for e in layout.edges
    )
    return dataclasses.replace(layout, edges=edges)


def test_a_label_moved_off_its_edge_is_found() -> None:
    # "claim" where mermaid put it once: beside `dead`, far from ready -> leased.
    spoiled = _moved(sm.WIDE, "claim", at=(560, 420))
    found = sm.defects(spoiled)
    assert any("'claim (attempts + 1, generation + 1)' is" in d and "from its edge" in d for d in found), found


def test_a_label_on_another_edge_is_found() -> None:
    # the claim's label put across the fail loop's lower segment
    spoiled = _moved(sm.WIDE, "claim", at=(340, 262))
    found = sm.defects(spoiled)
    assert any("is crossed by the edge fail" in d for d in found), found


def test_two_labels_on_one_another_are_found() -> None:
    fail = next(e for e in sm.WIDE.edges if e.id == "fail")
    spoiled = _moved(sm.WIDE, "release", at=(fail.at[0] + 10, fail.at[1] + 5))
    found = sm.defects(spoiled)
    assert any("overlaps" in d and "release" in d for d in found), found


def test_an_edge_through_a_node_is_found() -> None:
    spoiled = _moved(sm.WIDE, "redrive", points=((375, 480), (600, 480), (600, 200), (228, 200)))
    found = sm.defects(spoiled)
    assert any("the edge redrive runs through" in d for d in found), found


def _overview_moves() -> set[tuple[str, str]]:
    """The moves of the table "The states of a message" on the overview page."""
    text = (ROOT / "docs" / "overview.md").read_text(encoding="utf-8")
    moves: set[tuple[str, str]] = set()
    for source, target in re.findall(r"^\| ([a-z ]+?) → ([a-z]+) \|", text, re.M):
        for one in source.split(" or "):
            moves.add((one, target))
    return moves


@pytest.mark.parametrize("layout", sm.LAYOUTS, ids=lambda layout: layout.name)
def test_the_arrows_are_the_moves_of_the_overview_table(layout: sm.Layout) -> None:
    def name(node_id: str) -> str:
        node = layout.node(node_id)
        return {"start": "enqueued", "end": "removed"}.get(node.kind, node.label)

    drawn = {(name(e.source), name(e.target)) for e in layout.edges}
    table = _overview_moves()
    assert table, "no move found in the overview's table"
    # every move of the table is drawn, and nothing else but the enqueue that starts it all
    assert drawn - {("enqueued", "ready")} == table
    assert ("leased", "leased") in drawn and ("dead", "removed") in drawn


def test_the_figure_says_in_words_what_it_draws() -> None:
    figure = sm.figure()
    assert figure.count('role="img"') == 2 and figure.count("<desc") == 2
    words = sm.description()
    for edge in sm.WIDE.edges:
        assert " ".join(edge.lines) in words
