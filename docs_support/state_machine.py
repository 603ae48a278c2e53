"""The state machine of a message, drawn by hand as an inline SVG.

Mermaid's layouts put a state diagram's edge labels away from their edges once
the graph has several back edges, and let edges run through labels. Here every
node, every edge's path and every label's place is written down, in two
layouts: a wide one for the content column of a laptop and a narrow one for a
phone (the page shows the one that fits: ``extra.css``, a container query).

The layouts are data, and ``defects`` checks them before a browser does: no
label's box (estimated from Helvetica's widths, with a margin for wider fonts)
overlaps another label or a node, no edge runs through a label, and each edge's
label touches its own edge. ``tests/test_state_machine.py`` holds both layouts
to none; ``tests/test_diagrams.py`` then measures what Chromium drew, in both
palettes, at 1280 and at 390 px.

The transitions are the table of ``docs/overview.md`` ("The states of a
message"): one arrow for each row, a lease that ran out drawn as what the next
claim does with it.
"""

from __future__ import annotations

import html
import math
import sys
from dataclasses import dataclass
from pathlib import Path

FONT_PX = 14  # the labels' size in the SVG's own units
LINE_PX = 17  # from one line of a label to the next
GAP = 6  # between a label and its edge

# Helvetica's advance widths (per 1,000 units of the em), for the characters the
# labels use; others count as wide. Estimates are scaled by MARGIN: DejaVu Sans,
# where Helvetica and Arial are missing, is about 12 % wider.
_WIDTHS = {
    " ": 278,
    "(": 333,
    ")": 333,
    "+": 584,
    ",": 278,
    "-": 333,
    ".": 278,
    "=": 584,
    ";": 278,
    ":": 278,
    "0": 556,
    "1": 556,
    "A": 667,
    "C": 722,
    "K": 667,
}
_WIDTHS.update(dict.fromkeys("abdeghnopqu", 556))
_WIDTHS.update(dict.fromkeys("cksvxyz", 500))
_WIDTHS.update(dict.fromkeys("fjt", 278))
_WIDTHS.update(dict.fromkeys("il", 222))
_WIDTHS.update({"m": 833, "r": 333, "w": 722})
MARGIN = 1.15


def text_width(text: str, size: float = FONT_PX) -> float:
    """The width a line of text takes, estimated generously."""
    return sum(_WIDTHS.get(c, 667) for c in text) / 1000 * size * MARGIN


@dataclass(frozen=True)
class Box:
    left: float
    top: float
    right: float
    bottom: float

    def grown(self, by: float) -> Box:
        return Box(self.left - by, self.top - by, self.right + by, self.bottom + by)

    def meets(self, other: Box) -> bool:
        return (
            self.left < other.right
            and other.left < self.right
            and self.top < other.bottom
            and other.top < self.bottom
        )


@dataclass(frozen=True)
class Node:
    id: str
    x: float  # centre
    y: float
    label: str = ""  # a state's name; the start and the ends have none
    kind: str = "state"  # "state", "start" or "end"
    width: float = 96
    height: float = 40

    @property
    def box(self) -> Box:
        if self.kind != "state":
            return Box(self.x - 11, self.y - 11, self.x + 11, self.y + 11)
        return Box(
            self.x - self.width / 2,
            self.y - self.height / 2,
            self.x + self.width / 2,
            self.y + self.height / 2,
        )


Point = tuple[float, float]


@dataclass(frozen=True)
class Edge:
    id: str
    source: str
    target: str
    points: tuple[Point, ...]  # the path, from the source's border to the target's
    lines: tuple[str, ...]  # the label, line by line
    at: Point  # the label's anchor: x as `anchor` says, y its first line's top
    anchor: str = "middle"  # "start", "middle" or "end", as SVG's text-anchor

    @property
    def label_box(self) -> Box:
        width = max(text_width(line) for line in self.lines)
        x, top = self.at
        left = {"start": x, "middle": x - width / 2, "end": x - width}[self.anchor]
        height = LINE_PX * (len(self.lines) - 1) + FONT_PX * 1.2
        return Box(left, top, left + width, top + height)

    def segments(self) -> list[tuple[Point, Point]]:
        return list(zip(self.points, self.points[1:]))


@dataclass(frozen=True)
class Layout:
    name: str  # "wide" or "narrow"
    width: float
    height: float
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    def node(self, id: str) -> Node:
        return next(n for n in self.nodes if n.id == id)


def _segment_meets_box(a: Point, b: Point, box: Box) -> bool:
    """Whether the segment from a to b passes through the box (sampled every pixel)."""
    steps = max(1, int(math.dist(a, b)))
    for i in range(steps + 1):
        x = a[0] + (b[0] - a[0]) * i / steps
        y = a[1] + (b[1] - a[1]) * i / steps
        if box.left < x < box.right and box.top < y < box.bottom:
            return True
    return False


def _distance_to_box(a: Point, b: Point, box: Box) -> float:
    steps = max(1, int(math.dist(a, b)))
    best = math.inf
    for i in range(steps + 1):
        x = a[0] + (b[0] - a[0]) * i / steps
        y = a[1] + (b[1] - a[1]) * i / steps
        dx = max(box.left - x, 0, x - box.right)
        dy = max(box.top - y, 0, y - box.bottom)
        best = min(best, math.hypot(dx, dy))
    return best


def defects(layout: Layout) -> list[str]:
    """What is wrong with a layout, in words (none: it reads at a glance)."""
    found: list[str] = []
    frame = Box(0, 0, layout.width, layout.height)
    labels = [(e, e.label_box) for e in layout.edges]
    for edge, box in labels:
        name = " ".join(edge.lines)
        if not (
            frame.left <= box.left
            and box.right <= frame.right
            and frame.top <= box.top
            and box.bottom <= frame.bottom
        ):
            found.append(f"{layout.name}: {name!r} leaves the drawing")
        for node in layout.nodes:
            if box.meets(node.box.grown(2)):
                found.append(f"{layout.name}: {name!r} covers the node {node.id}")
        for other in layout.edges:
            if other is edge:
                continue
            if any(_segment_meets_box(a, b, box.grown(2)) for a, b in other.segments()):
                found.append(
                    f"{layout.name}: {name!r} is crossed by the edge {other.id}"
                )
        near = min(_distance_to_box(a, b, box) for a, b in edge.segments())
        if near > GAP + 2:
            found.append(f"{layout.name}: {name!r} is {near:.0f} px from its edge")
    for i, (first, a) in enumerate(labels):
        for second, b in labels[i + 1 :]:
            if a.grown(2).meets(b):
                found.append(
                    f"{layout.name}: {' '.join(first.lines)!r} overlaps "
                    f"{' '.join(second.lines)!r}"
                )
    for edge in layout.edges:
        for node in layout.nodes:
            if node.id in (edge.source, edge.target) or node.kind != "state":
                continue
            if any(_segment_meets_box(a, b, node.box) for a, b in edge.segments()):
                found.append(
                    f"{layout.name}: the edge {edge.id} runs through {node.id}"
                )
        for end, node_id in (
            (edge.points[0], edge.source),
            (edge.points[-1], edge.target),
        ):
            if _distance_to_box(end, end, layout.node(node_id).box.grown(1)) > 1:
                found.append(
                    f"{layout.name}: the edge {edge.id} does not reach {node_id}"
                )
    return found


# ---------------------------------------------------------------- the layouts

ENQUEUE = ("enqueue", "(available after its delay)")
CLAIM = ("claim", "(attempts + 1, generation + 1)")
COMPLETE = ("complete", "(effect + ACK,", "one transaction)")
EXPIRED_LEFT = ("lease ran out; the next claim", "leases it again (budget left)")
FAIL_LEFT = ("fail, budget left", "(after a backoff)")
RELEASE = ("release", "(its place kept, attempt returned)")
TO_DEAD = (
    "fail, permanent or the last attempt;",
    "or its last lease ran out",
    "(at the next claim)",
)
REDRIVE = ("redrive", "(attempts = 0)")
PURGE = ("purge",)
# The narrow layout's lines are shorter.
ENQUEUE_NARROW = ("enqueue", "(available after", "its delay)")
CLAIM_NARROW = ("claim", "(attempts + 1,", "generation + 1)")
RELEASE_NARROW = ("release", "(its place kept,", "attempt returned)")
EXPIRED_NARROW = (
    "lease ran out;",
    "the next claim",
    "leases it again",
    "(budget left)",
)
TO_DEAD_NARROW = (
    "fail, permanent or",
    "the last attempt; or",
    "its last lease ran out",
    "(at the next claim)",
)


def _wide() -> Layout:
    start = Node("start", 180, 40, kind="start")
    ready = Node("ready", 180, 200, "ready")
    leased = Node("leased", 500, 200, "leased", width=100)
    done = Node("done", 740, 200, "done", width=90)
    dead = Node("dead", 330, 480, "dead", width=90)
    end_ready = Node("end-ready", 48, 200, kind="end")
    end_dead = Node("end-dead", 120, 480, kind="end")
    nodes = (start, ready, leased, done, dead, end_ready, end_dead)
    edges = (
        Edge(
            "enqueue",
            "start",
            "ready",
            ((180, 51), (180, 180)),
            ENQUEUE,
            (188, 98),
            "start",
        ),
        Edge("claim", "ready", "leased", ((228, 200), (450, 200)), CLAIM, (339, 160)),
        Edge(
            "complete", "leased", "done", ((550, 200), (695, 200)), COMPLETE, (622, 143)
        ),
        Edge(
            "expired",
            "leased",
            "leased",
            ((480, 180), (480, 110), (520, 110), (520, 180)),
            EXPIRED_LEFT,
            (500, 70),
        ),
        Edge(
            "fail",
            "leased",
            "ready",
            ((480, 220), (480, 275), (200, 275), (200, 220)),
            FAIL_LEFT,
            (340, 238),
        ),
        Edge(
            "release",
            "leased",
            "ready",
            ((465, 220), (465, 340), (170, 340), (170, 220)),
            RELEASE,
            (318, 303),
        ),
        Edge(
            "to-dead",
            "leased",
            "dead",
            ((520, 220), (520, 480), (375, 480)),
            TO_DEAD,
            (528, 340),
            "start",
        ),
        Edge(
            "redrive",
            "dead",
            "ready",
            ((300, 460), (300, 400), (150, 400), (150, 220)),
            REDRIVE,
            (225, 364),
        ),
        Edge(
            "purge-ready",
            "ready",
            "end-ready",
            ((132, 200), (59, 200)),
            PURGE,
            (95, 178),
        ),
        Edge(
            "purge-dead",
            "dead",
            "end-dead",
            ((285, 480), (131, 480)),
            PURGE,
            (208, 458),
        ),
    )
    return Layout("wide", 800, 500, nodes, edges)


def _narrow() -> Layout:
    start = Node("start", 175, 20, kind="start")
    ready = Node("ready", 175, 120, "ready")
    leased = Node("leased", 175, 460, "leased", width=100)
    done = Node("done", 175, 760, "done", width=90)
    dead = Node("dead", 245, 860, "dead", width=90)
    end_ready = Node("end-ready", 140, 55, kind="end")
    end_dead = Node("end-dead", 245, 930, kind="end")
    nodes = (start, ready, leased, done, dead, end_ready, end_dead)
    edges = (
        Edge(
            "enqueue",
            "start",
            "ready",
            ((175, 31), (175, 100)),
            ENQUEUE_NARROW,
            (181, 34),
            "start",
        ),
        Edge(
            "claim",
            "ready",
            "leased",
            ((175, 140), (175, 440)),
            CLAIM_NARROW,
            (181, 200),
            "start",
        ),
        Edge(
            "fail",
            "leased",
            "ready",
            ((125, 455), (30, 455), (30, 132), (127, 132)),
            FAIL_LEFT,
            (36, 270),
            "start",
        ),
        Edge(
            "release",
            "leased",
            "ready",
            ((225, 450), (340, 450), (340, 130), (223, 130)),
            RELEASE_NARROW,
            (334, 330),
            "end",
        ),
        Edge(
            "expired",
            "leased",
            "leased",
            ((125, 470), (100, 470), (100, 505), (140, 505), (140, 480)),
            EXPIRED_NARROW,
            (169, 511),
            "end",
        ),
        Edge(
            "complete",
            "leased",
            "done",
            ((175, 480), (175, 740)),
            COMPLETE,
            (169, 600),
            "end",
        ),
        Edge(
            "to-dead",
            "leased",
            "dead",
            ((225, 470), (340, 470), (340, 860), (290, 860)),
            TO_DEAD_NARROW,
            (334, 620),
            "end",
        ),
        Edge(
            "redrive",
            "dead",
            "ready",
            ((200, 860), (15, 860), (15, 110), (127, 110)),
            REDRIVE,
            (21, 700),
            "start",
        ),
        Edge(
            "purge-ready",
            "ready",
            "end-ready",
            ((140, 100), (140, 66)),
            PURGE,
            (134, 70),
            "end",
        ),
        Edge(
            "purge-dead",
            "dead",
            "end-dead",
            ((245, 880), (245, 919)),
            PURGE,
            (251, 886),
            "start",
        ),
    )
    return Layout("narrow", 350, 950, nodes, edges)


WIDE = _wide()
NARROW = _narrow()
LAYOUTS = (WIDE, NARROW)


# ----------------------------------------------------------------- drawing


def _path(points: tuple[Point, ...]) -> str:
    return "M" + " L".join(f"{x:g},{y:g}" for x, y in points)


def _label(edge: Edge, layout: str) -> str:
    x, top = edge.at
    tspans = "".join(
        f'<tspan x="{x:g}" y="{top + FONT_PX * 0.95 + i * LINE_PX:g}">{html.escape(line)}</tspan>'
        for i, line in enumerate(edge.lines)
    )
    return (
        f'<g class="edgeLabel"><g class="label" data-id="{layout}-{edge.id}">'
        f'<text class="qc-sm__label" text-anchor="{edge.anchor}">{tspans}</text></g></g>'
    )


def _node(node: Node) -> str:
    if node.kind == "start":
        return f'<g class="qc-sm__start"><circle cx="{node.x:g}" cy="{node.y:g}" r="9"/></g>'
    if node.kind == "end":
        return (
            f'<g class="qc-sm__end"><circle cx="{node.x:g}" cy="{node.y:g}" r="10"/>'
            f'<circle class="qc-sm__end-dot" cx="{node.x:g}" cy="{node.y:g}" r="5.5"/></g>'
        )
    b = node.box
    return (
        f'<g class="node qc-sm__state" data-id="{node.id}">'
        f'<rect x="{b.left:g}" y="{b.top:g}" width="{node.width:g}" height="{node.height:g}" rx="9"/>'
        f'<text x="{node.x:g}" y="{node.y + 5:g}" text-anchor="middle">{node.label}</text></g>'
    )


def description() -> str:
    """The picture in words, for a screen reader: one sentence per arrow."""
    said = []
    for edge in WIDE.edges:
        source = WIDE.node(edge.source)
        target = WIDE.node(edge.target)
        what = " ".join(edge.lines)
        if source.kind == "start":
            said.append(f"A new message is ready: {what}.")
        elif target.kind == "end":
            said.append(f"{source.label.capitalize()} to removed: {what}.")
        elif source is target:
            said.append(f"{source.label.capitalize()} to {target.label} again: {what}.")
        else:
            said.append(f"{source.label.capitalize()} to {target.label}: {what}.")
    return " ".join(said)


def svg(layout: Layout) -> str:
    title_id = f"qc-sm-title-{layout.name}"
    desc_id = f"qc-sm-desc-{layout.name}"
    marker = f"qc-sm-head-{layout.name}"
    paths = "".join(
        f'<path class="transition qc-sm__edge" data-id="{layout.name}-{e.id}" d="{_path(e.points)}" '
        f'marker-end="url(#{marker})"/>'
        for e in layout.edges
    )
    return (
        f'<svg class="qc-sm qc-sm--{layout.name}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {layout.width:g} {layout.height:g}" role="img" '
        f'aria-labelledby="{title_id} {desc_id}">'
        f'<title id="{title_id}">The states of a message, and what moves it from one to another</title>'
        f'<desc id="{desc_id}">{html.escape(description())}</desc>'
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
        f'markerHeight="9" orient="auto-start-reverse"><path class="qc-sm__head" d="M0,0 L10,5 L0,10 z"/>'
        f"</marker></defs>"
        f'<g class="edgePaths">{paths}</g>'
        f'<g class="nodes">{"".join(_node(n) for n in layout.nodes)}</g>'
        f'<g class="edgeLabels">{"".join(_label(e, layout.name) for e in layout.edges)}</g>'
        f"</svg>"
    )


def figure() -> str:
    """Both layouts in one figure; the page's CSS shows the one that fits."""
    return (
        '<figure class="qc-figure qc-state-machine">'
        + "".join(svg(layout) for layout in LAYOUTS)
        + "</figure>"
    )


INCLUDE = (
    Path(__file__).resolve().parent.parent / "docs" / "includes" / "state-machine.md"
)


def include_text() -> str:
    """docs/includes/state-machine.md as it must read: the figure, drawn from the layouts."""
    return (
        "<!-- Drawn by docs_support/state_machine.py: edit the layouts there, then run\n"
        "     python -m docs_support.state_machine --write (tests/test_state_machine.py\n"
        "     fails while this file and the layouts differ). -->\n" + figure() + "\n"
    )


def main(argv: list[str]) -> int:
    found = [defect for layout in LAYOUTS for defect in defects(layout)]
    for defect in found:
        print(defect)
    if found:
        return 1
    if argv == ["--write"]:
        INCLUDE.write_text(include_text(), encoding="utf-8")
        print(f"wrote {INCLUDE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
