// Filters for the evidence timelines (docs/evidence-timelines.md).
//
// The build prints each case or kill as an element with class
// qc-evidence__item and its values as data- attributes
// (docs_support/evidence_timelines.py); a <div class="qc-evidence"> names its
// filters in data-filters ([[attribute, label], ...]). This script adds one
// labelled <select> per filter, built from the values its items carry, and
// shows only the items that match every choice; a status line says how many.
// Without JavaScript every item shows.
(function () {
  "use strict";
  let made = 0;

  function setUp(box) {
    if (box.dataset.ready) return;
    box.dataset.ready = "1";
    const filters = JSON.parse(box.dataset.filters || "[]");
    const items = [...box.querySelectorAll(".qc-evidence__item")];
    const lists = box.querySelectorAll("ol.qc-evidence__items > li").length;
    const bar = document.createElement("div");
    bar.className = "qc-evidence__filters";
    const selects = [];
    for (const [name, label] of filters) {
      const values = [...new Set(items.map((item) => item.dataset[name]).filter((v) => v !== undefined))].sort();
      const id = `qc-evidence-${name}-${++made}`;
      const field = document.createElement("div");
      field.className = "qc-evidence__field";
      const caption = document.createElement("label");
      caption.htmlFor = id;
      caption.textContent = label;
      const select = document.createElement("select");
      select.id = id;
      select.dataset.filter = name;
      select.append(new Option("all", ""));
      for (const value of values) select.append(new Option(value, value));
      field.append(caption, select);
      bar.append(field);
      selects.push(select);
    }
    const status = document.createElement("p");
    status.className = "qc-evidence__count";
    status.setAttribute("role", "status");
    box.prepend(bar, status);

    function apply() {
      let shown = 0;
      for (const item of items) {
        const match = selects.every((s) => s.value === "" || item.dataset[s.dataset.filter] === s.value);
        item.toggleAttribute("hidden", !match); // an SVG mark has no .hidden
        if (match && item.tagName === "LI") shown += 1;
      }
      status.textContent = `Showing ${shown} of ${lists}.`;
    }
    for (const select of selects) select.addEventListener("change", apply);
    apply();
  }

  function setUpPage() {
    document.querySelectorAll(".qc-evidence").forEach(setUp);
  }

  if (typeof document$ !== "undefined") document$.subscribe(setUpPage);
  else document.addEventListener("DOMContentLoaded", setUpPage);
})();
