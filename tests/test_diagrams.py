"""Every rendered diagram, measured in Chromium as a reader sees it.

On every page of the local build that has a diagram, at 1280 x 900 in the
light and the dark palette, and at 390 px wide (a phone, ``NARROW``), each
Mermaid SVG (Material draws it inside a closed shadow root;
``OPEN_SHADOW_ROOTS`` opens it) and each figure drawn by hand (the state
machine: ``figure.qc-figure``, an inline SVG per layout) is measured. The
measuring is done by tests/test_site.py's every-page check, which loads each
page once for all its checks (``diagram_defects`` in each view, then
``diagram_verdict``):

- **overlap**: no two labels' text boxes intersect;
- **crossed**: no label is crossed by a drawn line (an edge, a message, a
  section's border) other than its own edge; a node's label by none. Lifelines
  run behind every sequence diagram's messages by design and are not counted;
- **far**: an edge's label sits on its own edge: within 10 px of it;
- **cut**: no label's text leaves the SVG or the shape that holds it (a node,
  a participant, a note), and nothing opaque is painted over it;
- **small**: every label is at least 12 px on screen (its font size times
  the SVG's scale once it is fitted to the page);
- **contrast**: label text has at least 4.5:1 against what is painted behind it
  (WCAG 1.4.3), lines and arrowheads at least 3:1 (WCAG 1.4.11);
- **wide**: a drawing wider than its column is in a frame that scrolls
  sideways and says so, to the eye (a hint just before it) and to a screen
  reader (a region named for scrolling); no diagram's box is wider than its
  column.

Each check has a negative control: crafted SVGs, drawn into shadow roots as
Material does, that overlap, cross, stray from their edge, cut, are too small,
too faint or too wide, must fail exactly the check that names them; a clean one
must pass them all.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.site_build import ARTIFACTS, diagrams_in, figures_in, html_of, site_pages

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KINDS = ("overlap", "crossed", "far", "cut", "small", "contrast", "wide")
PALETTES = (("light", "default"), ("dark", "slate"))
NARROW = 390  # px: a phone's width, measured in the light palette
# The views each diagram is measured in: the two palettes at 1280 px, then the narrow window.
VIEWS = (*(scheme for scheme, _ in PALETTES), "narrow")

# Diagrams still known to fail, as (page, diagram index, view, kind). The test
# requires each of them to STILL fail that way, so that the list cannot go stale.
KNOWN_FAILING: set[tuple[str, int, str, str]] = set()

# Diagrams drawn at a readable size in a frame that scrolls sideways (too wide to fit).
FRAMED: set[tuple[str, int]] = set()

# Everything is measured in the page, in one function: labels, lines, paint.
MEASURE = r"""
() => {
  const MIN_PX = 12, TEXT_RATIO = 4.5, LINE_RATIO = 3, FAR_PX = 10;
  const canvas = document.createElement("canvas").getContext("2d");
  function rgba(value) {
    if (!value || value === "none" || value.startsWith("url(")) return null;
    canvas.fillStyle = "#000"; canvas.fillStyle = value;
    const c = canvas.fillStyle;
    if (c.startsWith("#")) return [1, 3, 5].map(i => parseInt(c.slice(i, i + 2), 16)).concat([1]);
    const m = c.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(",").map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  }
  const over = (top, below) => {  // top composited over an opaque colour
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)).concat([1]);
  };
  const lum = c => {
    const ch = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2];
  };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const hex = c => "#" + c.slice(0, 3).map(v => Math.round(v).toString(16).padStart(2, "0")).join("");

  // The colour an element paints as a surface (fill or background), with its alpha.
  function surface(el) {
    const s = getComputedStyle(el);
    if (el instanceof SVGElement) {
      if (["text", "tspan", "g", "svg", "line", "foreignObject", "marker", "defs", "style"].includes(el.localName)) return null;
      const c = rgba(s.fill);
      if (!c) return null;
      c[3] *= parseFloat(s.fillOpacity) * parseFloat(s.opacity);
      return c[3] > 0 ? c : null;
    }
    const c = rgba(s.backgroundColor);
    if (!c) return null;
    c[3] *= parseFloat(s.opacity);
    return c[3] > 0 ? c : null;
  }
  // What is painted at (x, y) under everything in `skip` (viewport coordinates).
  function behind(root, x, y, skip) {
    let color = [255, 255, 255, 1];
    const stack = root.elementsFromPoint(x, y).filter(el => !skip(el)).reverse();
    for (const el of stack) { const c = surface(el); if (c) color = over(c, color); }
    return color;
  }
  // Scroll so that the point at page (x, y) of `el`, as measured before, is in view (a wide
  // diagram's frame scrolls sideways too); its viewport coordinates now.
  function show(el, x, y) {
    const before = el.getBoundingClientRect(), bx = before.left + scrollX, by = before.top + scrollY;
    el.scrollIntoView({block: "center", inline: "center", behavior: "instant"});
    let after = el.getBoundingClientRect();
    const frame = el.getRootNode().host;  // a wide diagram's frame: bring the point into its view
    if (frame && frame.scrollWidth > frame.clientWidth) {
      const f = frame.getBoundingClientRect();
      frame.scrollLeft += after.left + (x - bx) - (f.left + f.right) / 2;
      after = el.getBoundingClientRect();
    }
    const vy = after.top + (y - by);
    if (vy < 150 || vy > innerHeight - 20) {  // not under the sticky header
      window.scrollBy({left: 0, top: vy - innerHeight / 2, behavior: "instant"});
      after = el.getBoundingClientRect();
    }
    return [after.left + (x - bx), after.top + (y - by)];
  }
  const pageRect = r => ({left: r.left + scrollX, right: r.right + scrollX, top: r.top + scrollY,
                          bottom: r.bottom + scrollY, width: r.width, height: r.height});
  const inside = (a, b, tol = 1) => a.left >= b.left - tol && a.right <= b.right + tol && a.top >= b.top - tol && a.bottom <= b.bottom + tol;
  const shrink = (r, d) => ({left: r.left + d, right: r.right - d, top: r.top + d, bottom: r.bottom - d});
  const union = rects => rects.length === 0 ? null : ({
    left: Math.min(...rects.map(r => r.left)), right: Math.max(...rects.map(r => r.right)),
    top: Math.min(...rects.map(r => r.top)), bottom: Math.max(...rects.map(r => r.bottom))});
  const SHAPES = "rect, polygon, circle, ellipse, path";

  // A label's text box in the viewport: an SVG <text>'s glyph cells, or the text runs of a foreignObject.
  function viewportRect(el) {
    if (el.localName !== "foreignObject") return el.getBoundingClientRect();
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    const rects = [];
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!n.textContent.trim()) continue;
      const range = document.createRange(); range.selectNodeContents(n);
      rects.push(...[...range.getClientRects()].filter(r => r.width > 0));
    }
    return union(rects);
  }
  function labelsOf(svg) {
    const labels = [];
    for (const t of svg.querySelectorAll("text")) {
      if (!t.textContent.trim() || t.closest("foreignObject")) continue;
      const holder = t.querySelector("tspan") || t;
      labels.push({el: t, holder, text: t.textContent.trim(), fontSize: parseFloat(getComputedStyle(holder).fontSize),
                   scale: t.getScreenCTM().a, rect: pageRect(t.getBoundingClientRect()), color: getComputedStyle(holder).fill});
    }
    for (const fo of svg.querySelectorAll("foreignObject")) {
      if (!fo.textContent.trim()) continue;
      const box = viewportRect(fo);
      if (!box) continue;
      const walker = document.createTreeWalker(fo, NodeFilter.SHOW_TEXT);
      let holder = null;
      for (let n = walker.nextNode(); n && !holder; n = walker.nextNode()) if (n.textContent.trim()) holder = n.parentElement;
      labels.push({el: fo, holder, text: fo.textContent.trim(), fontSize: parseFloat(getComputedStyle(holder).fontSize),
                   scale: fo.getScreenCTM().a, rect: pageRect(box), color: getComputedStyle(holder).color});
    }
    return labels;
  }
  // The drawn lines a label must not be crossed by, and those measured for contrast.
  const CONNECTORS = ".edgePaths path, path.flowchart-link, path.transition, .messageLine0, .messageLine1, .loopLine, line.divider";
  const LIFELINES = ".actor-line";

  function pointsOf(el, step = 2) {
    const ctm = el.getScreenCTM();
    const total = el.getTotalLength();
    const points = [];
    for (let d = 0; d <= total; d += step / Math.max(ctm.a, 0.01)) {
      const p = el.getPointAtLength(d);
      const q = new DOMPoint(p.x, p.y).matrixTransform(ctm);
      points.push([q.x + scrollX, q.y + scrollY]);
    }
    return points;
  }
  // The line a label belongs to: an edge label's path (same data-id); a message's line below it.
  function ownLine(label, lines) {
    const g = label.el.closest("g.edgeLabel");
    if (g) {
      const id = g.querySelector("[data-id]")?.getAttribute("data-id");
      return lines.filter(l => id && l.el.getAttribute("data-id") === id).map(l => l.el);
    }
    if (label.el.classList.contains("sequenceNumber")) {  // drawn on the start of the line before it
      const line = label.el.previousElementSibling;
      return line && /messageLine/.test(line.getAttribute("class") || "") ? [line] : [];
    }
    if (label.el.classList.contains("messageText")) {
      const cx = (label.rect.left + label.rect.right) / 2;
      const candidates = lines.filter(l => /messageLine/.test(l.el.getAttribute("class")) &&
        l.box.top >= label.rect.top && l.box.left <= cx + 2 && l.box.right >= cx - 2)
        .sort((a, b) => a.box.top - b.box.top);
      // A message to itself is a loop beside its text: its path may start above the text's bottom.
      return candidates.length ? [candidates[0].el] : [];
    }
    return [];
  }
  // The shape that holds a label: its node's shapes, its participant's box, its note.
  function holderShape(label) {
    const node = label.el.closest("g.node");
    if (node) {
      const shapes = [...node.querySelectorAll(SHAPES)].filter(s => !s.closest("g.label") && s.getBBox().width > 0);
      return union(shapes.map(s => pageRect(s.getBoundingClientRect())));
    }
    const cls = label.el.getAttribute("class") || "";
    if (/\bactor\b/.test(cls) || /noteText/.test(cls)) {
      let prev = label.el.previousElementSibling;
      while (prev && !(prev.localName === "rect")) prev = prev.previousElementSibling;
      if (prev) return pageRect(prev.getBoundingClientRect());
    }
    return null;
  }

  const results = [];
  // Mermaid's diagrams (each in its shadow root) and the figures drawn by hand (an inline
  // SVG per layout, of which the page shows the one that fits), in the order of the page.
  const shown = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const hosts = [...document.querySelectorAll("div.mermaid, figure.qc-figure")].filter(host => host.shadowRoot
    ? host.shadowRoot.querySelector("svg") : host.localName === "figure");
  hosts.forEach((host, index) => {
    const root = host.shadowRoot || document;
    const svg = host.shadowRoot ? root.querySelector("svg") : [...host.querySelectorAll("svg")].find(shown);
    const defects = [];
    const add = (kind, detail) => defects.push({kind, detail});
    if (!svg) {
      add("wide", "no layout of the figure shows");
      results.push({index, labels: 0, lines: 0, framed: false, defects});
      return;
    }
    window.scrollTo({left: 0, top: 0, behavior: "instant"});
    const svgRect = pageRect(svg.getBoundingClientRect());
    // wide: a drawing wider than its column scrolls in a frame that says so, to the eye
    // (a hint just before it) and to a screen reader (a named region), or it is a defect
    const column = host.closest("article") || document.body;
    const columnRect = pageRect(column.getBoundingClientRect());
    const hostRect = pageRect(host.getBoundingClientRect());
    if (hostRect.right > columnRect.right + 1 || hostRect.left < columnRect.left - 1)
      add("wide", `the diagram's box (${Math.round(hostRect.width)} px) is wider than its column (${Math.round(columnRect.width)} px)`);
    if (svgRect.width > hostRect.width + 1) {
      const style = getComputedStyle(host);
      const scrolls = ["auto", "scroll"].includes(style.overflowX) && host.scrollWidth > host.clientWidth;
      const named = host.getAttribute("role") === "region" && /scroll/i.test(host.getAttribute("aria-label") || "");
      const hint = host.previousElementSibling;
      const told = hint && hint.classList.contains("qc-scroll-hint") && shown(hint) && /scroll/i.test(hint.textContent);
      if (!(scrolls && named && told))
        add("wide", `drawn ${Math.round(svgRect.width)} px wide in ${Math.round(hostRect.width)} px, `
            + `${scrolls ? "" : "not scrolling, "}${named ? "" : "no region named for scrolling, "}${told ? "" : "no visible hint"}`);
    }
    const labels = labelsOf(svg);
    const lines = [...svg.querySelectorAll(CONNECTORS)].filter(el => el.getTotalLength && el.getTotalLength() > 0)
      .map(el => ({el, box: pageRect(el.getBoundingClientRect()), points: pointsOf(el)}));
    const lifelines = [...svg.querySelectorAll(LIFELINES)].map(el => ({el, box: pageRect(el.getBoundingClientRect())}));
    const name = l => JSON.stringify(l.text.slice(0, 40));

    // small
    for (const l of labels) {
      const px = l.fontSize * l.scale;
      if (px < MIN_PX - 0.05) add("small", `${name(l)} is ${px.toFixed(1)} px`);
    }
    // overlap
    for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
      const a = shrink(labels[i].rect, 1), b = shrink(labels[j].rect, 1);
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 0 && h > 0) add("overlap", `${name(labels[i])} and ${name(labels[j])}`);
    }
    // crossed: a line's points inside a label's text box (its glyph cell, less the leading)
    for (const l of labels) {
      const own = ownLine(l, lines);
      const inner = shrink(l.rect, Math.min(3, l.rect.height * 0.2));
      for (const line of lines) {
        if (own.includes(line.el)) continue;
        if (line.points.some(([x, y]) => x > inner.left && x < inner.right && y > inner.top && y < inner.bottom)) {
          add("crossed", `${name(l)} by a ${line.el.localName}.${(line.el.getAttribute("class") || "").split(" ").slice(-1)[0]}`);
          break;
        }
      }
    }
    // far: an edge's label sits on its edge (touches it, or lies within a few pixels of it)
    for (const l of labels) {
      if (!l.el.closest("g.edgeLabel")) continue;
      const own = ownLine(l, lines);
      if (own.length === 0) continue;
      const points = lines.filter(line => own.includes(line.el)).flatMap(line => line.points);
      const r = l.rect;
      const gap = Math.min(...points.map(([x, y]) => Math.hypot(Math.max(r.left - x, 0, x - r.right),
                                                               Math.max(r.top - y, 0, y - r.bottom))));
      if (gap > FAR_PX) add("far", `${name(l)} is ${Math.round(gap)} px from its edge`);
    }
    // cut: outside the SVG or outside its shape
    for (const l of labels) {
      if (!inside(l.rect, svgRect)) add("cut", `${name(l)} leaves the SVG`);
      const shape = holderShape(l);
      if (shape && !inside(l.rect, shape)) add("cut", `${name(l)} leaves its shape`);
    }
    // paint: what covers a label, and the contrast of its text against what lies behind it
    for (const l of labels) {
      const own = el => el === l.el || l.el.contains(el) || (l.el.localName === "foreignObject" && el === l.el);
      const textLike = el => ["text", "tspan"].includes(el.localName);
      l.el.scrollIntoView({block: "center", inline: "center", behavior: "instant"});
      const v = viewportRect(l.el);
      const vy = (v.top + v.bottom) / 2;
      const xs = [0.1, 0.3, 0.5, 0.7, 0.9].map(f => v.left + f * (v.right - v.left));
      let worst = Infinity, covered = false;
      const fg = rgba(l.color);
      // A step number is drawn on its message line's marker, a circle the hit test does not see.
      const disc = /sequenceNumber/.test(l.el.getAttribute("class") || "")
        ? rgba(getComputedStyle(svg.querySelector('marker[id$="-sequencenumber"] circle')).fill) : null;
      for (const x of xs) {
        const stack = root.elementsFromPoint(x, vy);
        const at = stack.findIndex(own);
        if (at > 0 && stack.slice(0, at).some(el => !textLike(el) && !own(el) && (surface(el)?.[3] ?? 0) > 0.5)) covered = true;
        if (fg) {
          let bg = behind(root, x, vy, el => own(el) || textLike(el) || (at > 0 && stack.indexOf(el) < at && stack.indexOf(el) >= 0));
          if (disc) bg = over(disc, bg);
          worst = Math.min(worst, ratio(over(fg, bg), bg));
        }
      }
      if (covered) add("cut", `${name(l)} is painted over`);
      if (!fg) add("contrast", `${name(l)} has no measurable colour (${l.color})`);
      else if (worst < TEXT_RATIO) add("contrast", `${name(l)} text ${worst.toFixed(2)}:1`);
    }
    // lines, lifelines and arrowheads against what lies behind them
    const lineChecks = [...lines.map(l => l.el), ...lifelines.map(l => l.el)];
    for (const el of lineChecks) {
      const s = getComputedStyle(el);
      const stroke = rgba(s.stroke);
      const total = el.getTotalLength(), ctm = el.getScreenCTM();
      const at = d => { const p = el.getPointAtLength(d); const q = new DOMPoint(p.x, p.y).matrixTransform(el.getScreenCTM()); return [q.x + scrollX, q.y + scrollY]; };
      const cls = (el.getAttribute("class") || el.localName).split(" ")[0];
      if (stroke) {
        stroke[3] *= parseFloat(s.strokeOpacity) * parseFloat(s.opacity);
        const [px, py] = at(total / 2);
        const [vx, vy] = show(el, px, py);
        const bg = behind(root, vx, vy, e => e === el || ["text", "tspan", "path", "line"].includes(e.localName) && !surface(e));
        const r = ratio(over(stroke, bg), bg);
        if (r < LINE_RATIO) add("contrast", `line ${cls} ${r.toFixed(2)}:1 (${hex(stroke)} on ${hex(bg)})`);
      } else if (s.stroke !== "none") add("contrast", `line ${cls} has no measurable colour`);
      for (const [attr, d] of [["marker-end", total], ["marker-start", 0]]) {
        const ref = el.getAttribute(attr) || (s[attr === "marker-end" ? "markerEnd" : "markerStart"] !== "none" ? s[attr === "marker-end" ? "markerEnd" : "markerStart"] : null);
        const id = ref && ref.match(/url\(["']?#([^"')]+)/)?.[1];
        if (!id) continue;
        const marker = root.getElementById ? root.getElementById(id) : root.querySelector(`#${CSS.escape(id)}`);
        if (!marker) continue;
        const shape = marker.querySelector(SHAPES);
        if (!shape) continue;
        const ms = getComputedStyle(shape);
        const paint = rgba(ms.fill) || rgba(ms.stroke);
        if (!paint) continue;
        const [px, py] = at(Math.max(0, Math.min(total, d === 0 ? 12 : total - 12)));
        const [vx, vy] = show(el, px, py);
        const bg = behind(root, vx, vy, e => e === el || ["text", "tspan", "path", "line"].includes(e.localName) && !surface(e));
        const r = ratio(over(paint, bg), bg);
        if (r < LINE_RATIO) add("contrast", `arrowhead ${r.toFixed(2)}:1 (${hex(paint)} on ${hex(bg)})`);
      }
    }
    results.push({index, labels: labels.length, lines: lineChecks.length,
                  framed: host.classList.contains("diagram-wide"), defects});
  });
  window.scrollTo({left: 0, top: 0, behavior: "instant"});
  return results;
}
"""


def measure(page) -> list[dict]:
    return page.evaluate(MEASURE)


def kinds_of(result: dict) -> set[str]:
    return {d["kind"] for d in result["defects"]}


def drawings_in(html: str) -> int:
    """A page's diagrams of either kind: Mermaid's and the figures drawn by hand."""
    return diagrams_in(html) + figures_in(html)


def diagram_pages(site: Path) -> list[tuple[str, int]]:
    pages = [(path, drawings_in(html_of(site, path))) for path in site_pages(site)]
    return [(path, n) for path, n in pages if n]


def set_palette(page, scheme: str, palette: str) -> None:
    """Switch the page's palette as the system preference does, and wait until Material has."""
    page.emulate_media(color_scheme=scheme)
    page.wait_for_function(f"() => document.body.getAttribute('data-md-color-scheme') === '{palette}'",
                           timeout=10_000)


def narrow_window(page) -> None:
    """Make the open page NARROW px wide, as a phone's, and let its diagrams fit themselves again."""
    page.set_viewport_size({"width": NARROW, "height": 844})
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    page.wait_for_timeout(300)


def diagram_defects(page, path: str, expected: int, scheme: str) -> dict[tuple[str, int, str], list[dict]]:
    """Every diagram of the open page in the view it shows: {(page, index, view): defects}.

    Folds are opened first (a layer of the code map is drawn in one), and the diagrams in
    them given the frames to fit themselves."""
    page.evaluate("""() => new Promise(done => {
      document.querySelectorAll('article details').forEach(d => { d.open = true });
      requestAnimationFrame(() => requestAnimationFrame(done)); })""")
    results = measure(page)
    assert len(results) == expected, f"{path}: {len(results)} of {expected} diagrams rendered"
    found: dict[tuple[str, int, str], list[dict]] = {}
    for result in results:
        assert result["labels"] > 0, f"{path} #{result['index']}: no label found to measure"
        found[(path, result["index"], scheme)] = result["defects"]
        if result["framed"]:
            FRAMED.add((path, result["index"]))
    if scheme != "light" and any(found.values()):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"diagrams-{path.strip('/') or 'index'}-dark.png"), full_page=True)
    return found


def summary(found: dict[tuple[str, int, str], list[dict]]) -> dict[str, Counter]:
    """Diagrams with at least one defect of each kind, per view."""
    counts = {view: Counter() for view in VIEWS}
    for (path, index, scheme), defects in found.items():
        for kind in {d["kind"] for d in defects}:
            counts[scheme][kind] += 1
    return counts


def diagram_verdict(found: dict[tuple[str, int, str], list[dict]], name: str,
                    folder: Path = ARTIFACTS.parent) -> list[str]:
    """Report the diagrams measured (test-artifacts/diagrams-NAME.json); what is wrong with them:
    a defect KNOWN_FAILING does not list, or a listed one that no longer fails."""
    counts = summary(found)
    measured = {page for page, _, _ in found}
    report = {
        "diagrams": len({(p, i) for p, i, _ in found}),
        "with a defect": {s: sum(1 for (p, i, sc), d in found.items() if sc == s and d) for s in VIEWS},
        "per kind": {s: dict(c) for s, c in counts.items()},
        "scroll sideways": sorted(f"{p}#{i}" for p, i in FRAMED if p in measured),
        "defects": {f"{p}#{i} {s}": d for (p, i, s), d in sorted(found.items()) if d},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"diagrams-{name}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    failing = {(p, i, s, d["kind"]) for (p, i, s), defects in found.items() for d in defects}
    wrong = [f"listed as failing but now passes (remove it from KNOWN_FAILING): {known}"
             for known in sorted(KNOWN_FAILING - failing) if known[0] in measured]
    for (p, i, s), defects in sorted(found.items()):
        unexpected = [d for d in defects if (p, i, s, d["kind"]) not in KNOWN_FAILING]
        if unexpected:
            wrong.append(f"{p}#{i} {s}: {json.dumps(unexpected)}")
    return wrong


def test_every_page_known_to_fail_has_diagrams(built_site: Path) -> None:
    # every page KNOWN_FAILING names has diagrams, so that the every-page check measures it
    assert {known[0] for known in KNOWN_FAILING} <= {path for path, _ in diagram_pages(built_site)}
    assert len(diagram_pages(built_site)) >= 10


def test_the_verdict_names_an_unknown_defect_and_a_stale_listing(tmp_path: Path) -> None:
    found = {("/a/", 0, "light"): [{"kind": "small", "detail": "label 9 px"}], ("/a/", 0, "dark"): []}
    wrong = diagram_verdict(found, "control", tmp_path)
    assert len(wrong) == 1 and wrong[0].startswith("/a/#0 light:") and "label 9 px" in wrong[0]
    KNOWN_FAILING.add(("/a/", 0, "light", "small"))
    KNOWN_FAILING.add(("/a/", 0, "dark", "cut"))
    try:
        assert diagram_verdict(found, "control", tmp_path) == [
            "listed as failing but now passes (remove it from KNOWN_FAILING): ('/a/', 0, 'dark', 'cut')"]
    finally:
        KNOWN_FAILING.discard(("/a/", 0, "light", "small"))
        KNOWN_FAILING.discard(("/a/", 0, "dark", "cut"))


# ------------------------------------------------------------ negative controls

# Each crafted SVG fails exactly the named check; "clean" fails none. They are
# drawn into shadow roots of div.mermaid, as Material draws its diagrams.
CONTROL_STYLE = "<style>text{font-family:sans-serif}</style>"


def _svg(body: str, width: int = 400, height: int = 200, view: str | None = None) -> str:
    view = view or f"0 0 {width} {height}"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="{view}">'
            f'{CONTROL_STYLE}<defs><marker id="head" markerWidth="10" markerHeight="10" refX="9" refY="5" orient="auto">'
            f'<path d="M0,0 L10,5 L0,10 Z" style="fill:#111"/></marker>'
            f'<marker id="faint" markerWidth="10" markerHeight="10" refX="9" refY="5" orient="auto">'
            f'<path d="M0,0 L10,5 L0,10 Z" style="fill:#ddd"/></marker></defs>{body}</svg>')


NODE = ('<g class="node" transform="translate({x},{y})"><rect x="-60" y="-20" width="120" height="40" '
        'style="fill:#fff;stroke:#333"/><text x="0" y="5" text-anchor="middle" style="font-size:16px;fill:#111">'
        '<tspan>{text}</tspan></text></g>')
EDGE = ('<g class="edgePaths"><path class="flowchart-link" data-id="e1" d="M{x1},{y1} L{x2},{y2}" '
        'style="fill:none;stroke:{color}" marker-end="url(#{marker})"/></g>')
EDGE_LABEL = ('<g class="edgeLabel" transform="translate({x},{y})"><g class="label" data-id="{id}">'
              '<text x="0" y="5" text-anchor="middle" style="font-size:16px;fill:#111"><tspan>{text}</tspan></text></g></g>')

CONTROLS = {
    "clean": _svg(NODE.format(x=80, y=100, text="ready") + NODE.format(x=320, y=100, text="leased")
                  + EDGE.format(x1=140, y1=100, x2=260, y2=100, color="#333", marker="head")
                  + EDGE_LABEL.format(x=200, y=88, id="e1", text="claim")),
    "overlap": _svg(NODE.format(x=80, y=100, text="ready") + EDGE_LABEL.format(x=150, y=60, id="x", text="first label")
                    + EDGE_LABEL.format(x=170, y=66, id="y", text="second label")),
    "crossed": _svg(NODE.format(x=80, y=100, text="ready") + NODE.format(x=320, y=100, text="leased")
                    + EDGE.format(x1=80, y1=20, x2=80, y2=180, color="#333", marker="head")),
    "far": _svg(NODE.format(x=80, y=100, text="ready") + NODE.format(x=320, y=100, text="leased")
                + EDGE.format(x1=140, y1=100, x2=260, y2=100, color="#333", marker="head")
                + EDGE_LABEL.format(x=200, y=170, id="e1", text="claim")),
    "cut": _svg(NODE.format(x=80, y=100, text="a label far wider than its box")),
    "small": _svg(NODE.format(x=200, y=100, text="ready"), width=200, height=100, view="0 0 400 200"),
    "contrast": _svg('<rect width="400" height="200" style="fill:#fff"/>'
                     '<g class="node" transform="translate(80,100)"><rect x="-60" y="-20" width="120" height="40" '
                     'style="fill:#fff;stroke:#333"/><text x="0" y="5" text-anchor="middle" '
                     'style="font-size:16px;fill:#aaa"><tspan>faint</tspan></text></g>'
                     + NODE.format(x=320, y=100, text="leased")
                     + EDGE.format(x1=140, y1=100, x2=260, y2=100, color="#ccc", marker="faint")),
}


# "wide" needs a column: a drawing 600 px wide in a 300 px column, as a page would frame it.
WIDE_HOSTS = """(svg) => {
  const article = document.createElement('article');
  article.style.width = '300px';
  document.body.appendChild(article);
  for (const [framed, told] of [[false, false], [true, false], [true, true]]) {
    if (told) {
      const hint = document.createElement('p');
      hint.className = 'qc-scroll-hint';
      hint.textContent = 'Scroll sideways to see all of it.';
      article.appendChild(hint);
    }
    const host = document.createElement('div');
    host.className = 'mermaid';
    if (framed) host.style.overflowX = 'auto';
    if (told) { host.setAttribute('role', 'region'); host.setAttribute('aria-label', 'Diagram: scroll sideways'); }
    article.appendChild(host);
    host.attachShadow({mode: 'open'}).innerHTML = svg;
  }
  // and, in the page's width, a figure drawn by hand: one layout hidden, the other shown (the one
  // measured); then one that shows none
  for (const shown of [true, false]) {
    const figure = document.createElement('figure');
    figure.className = 'qc-figure';
    figure.innerHTML = svg.replace('<svg ', '<svg style="display:none" ') + (shown ? svg.replace('width="600"', 'width="400"') : '');
    document.body.appendChild(figure);
  }
}"""


def _control_page(browser, svgs: list[str], scheme: str = "light"):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    page.set_content("<!doctype html><body style='margin:0;background:#fff'></body>")
    page.evaluate("""svgs => { for (const svg of svgs) {
        const host = document.createElement('div'); host.className = 'mermaid';
        document.body.appendChild(host);
        host.attachShadow({mode: 'open'}).innerHTML = svg; } }""", svgs)
    return context, page


@pytest.mark.timeout(120)
def test_each_check_fails_the_diagram_made_to_fail_it(browser) -> None:
    names = list(CONTROLS)
    context, page = _control_page(browser, [CONTROLS[n] for n in names])
    try:
        results = measure(page)
    finally:
        context.close()
    assert len(results) == len(names)
    got = {name: kinds_of(result) for name, result in zip(names, results)}
    assert got["clean"] == set(), results[0]["defects"]
    assert set(KINDS) - set(CONTROLS) == {"wide"}  # it needs a column: its own test below
    for kind in set(KINDS) & set(CONTROLS):
        assert kind in got[kind], (kind, results[names.index(kind)]["defects"])
    # The faint control fails both for its text and for its line and arrowhead.
    details = " ".join(d["detail"] for d in results[names.index("contrast")]["defects"])
    assert "text" in details and "line" in details and "arrowhead" in details, details


@pytest.mark.timeout(120)
def test_a_drawing_wider_than_its_column_scrolls_and_says_so(browser) -> None:
    clean = CONTROLS["clean"].replace('width="400"', 'width="600"', 1)
    context, page = _control_page(browser, [])
    try:
        page.evaluate(WIDE_HOSTS, clean)
        results = measure(page)
    finally:
        context.close()
    assert len(results) == 5, results
    unframed, untold, told, figure, empty = (kinds_of(r) for r in results)
    assert "wide" in unframed and "wide" in untold, results
    details = " ".join(d["detail"] for d in results[1]["defects"])
    assert "no visible hint" in details and "not scrolling" not in details, details
    assert told == set() and figure == set(), results
    assert results[3]["labels"] == 3  # the layout shown was measured, not the hidden one
    assert empty == {"wide"}, results


@pytest.mark.timeout(120)
def test_contrast_is_measured_against_the_dark_page(browser) -> None:
    # Dark text on a transparent diagram over a dark page: the page is what lies behind it.
    svg = _svg(EDGE_LABEL.format(x=200, y=100, id="e", text="dark on dark"))
    context, page = _control_page(browser, [svg])
    try:
        page.evaluate("document.body.style.background = '#1e2129'")
        results = measure(page)
    finally:
        context.close()
    assert any(d["kind"] == "contrast" and "text" in d["detail"] for d in results[0]["defects"]), results
