/*
 * Mermaid, loaded only by the pages that draw.
 *
 * Material for MkDocs renders each ```mermaid block itself: on the first page
 * that has one (loaded directly or by instant navigation) it uses the global
 * `mermaid` if there is one, and otherwise fetches mermaid from a CDN. It then
 * calls `mermaid.initialize(config)` once and `mermaid.render(id, text)` for
 * each diagram, on this and every later page.
 *
 * This small file, on every page, is that global until a diagram is drawn:
 * the first `render` loads the vendored mermaid.min.js (about 3.5 MB) from
 * this site, hands it the configuration Material gave, and from then on the
 * real mermaid is the global. A page without diagrams
 * never calls `render`, so it never downloads mermaid; no page asks a CDN.
 * Should a Material upgrade call anything else on `mermaid` first, the pages
 * with diagrams fail tests/test_site.py's browser checks.
 *
 * What a reader needs to read a diagram (tests/test_diagrams.py measures it in
 * both palettes): sequence diagrams wrap their messages, so that they fit the
 * page at a readable size; arrowheads, section titles and step numbers take
 * the palette's colours (Material's CSS names marker ids that mermaid 11
 * prefixes); and a diagram that would still be drawn with text under 12 px
 * once fitted to the page is shown at a readable size in a frame that
 * scrolls sideways instead, and says so; fitted again when its width changes.
 */
(() => {
  if (typeof window.mermaid !== "undefined") return;

  const source = new URL("mermaid.min.js", document.currentScript.src).href;
  const MIN_TEXT_PX = 12;
  // Appended to Material's themeCSS; mermaid scopes it to each diagram's SVG.
  const READABLE = `
    marker path { fill: var(--md-mermaid-sequence-message-line-color) !important;
      stroke: var(--md-mermaid-sequence-message-line-color) !important; }
    marker[id$="-crosshead"] path, marker[id$="-stickTopArrowHead"] path,
    marker[id$="-stickBottomArrowHead"] path { fill: none !important; }
    marker[id$="-sequencenumber"] circle { fill: var(--md-mermaid-sequence-number-bg-color) !important; r: 10px; }
    .sequenceNumber { fill: var(--md-mermaid-sequence-number-fg-color) !important; font-size: 14px !important; }
    .sectionTitle, .sectionTitle > tspan { fill: var(--md-mermaid-sequence-loop-fg-color) !important; }
  `;
  let config = {};
  let loading = null;

  function readable(options) {
    const sequence = {...(options.sequence || {}), wrap: true};
    return {...options, sequence, themeCSS: (options.themeCSS || "") + READABLE};
  }

  // Once in the page, and again whenever its width changes (a window resized, a phone
  // turned, a fold opened): if the smallest text would be under 12 px at the width the
  // page gives the SVG, show it at the width that makes it 12 px, in a frame that
  // scrolls sideways (focusable, so a keyboard can scroll it) and says so, to the eye
  // (a line just before it) and to a screen reader (the region's name); else fit it.
  const HINT = "Wide diagram: scroll it sideways to see all of it.";

  function fit(svg, host) {
    const sizes = [...svg.querySelectorAll("text, foreignObject *")]
      .filter(el => [...el.childNodes].some(n => n.nodeType === Node.TEXT_NODE && n.textContent.trim()))
      .map(el => parseFloat(getComputedStyle(el).fontSize))
      .filter(size => size > 0);
    if (!sizes.length) return;
    const natural = svg.viewBox.baseVal.width;
    const needed = natural * MIN_TEXT_PX / Math.min(...sizes);
    const available = host.clientWidth;
    if (available === 0) return;  // not shown yet (a closed fold): fitted when it shows
    if (svg.dataset.qcMaxWidth === undefined) svg.dataset.qcMaxWidth = svg.style.maxWidth;
    let hint = host.previousElementSibling;
    if (!(hint && hint.classList.contains("qc-scroll-hint"))) hint = null;
    if (needed <= available) {
      svg.style.maxWidth = svg.dataset.qcMaxWidth;
      svg.style.width = "";
      host.classList.remove("diagram-wide");
      host.removeAttribute("tabindex");
      host.removeAttribute("role");
      host.removeAttribute("aria-label");
      hint?.remove();
      return;
    }
    svg.style.maxWidth = "none";
    svg.style.width = `${Math.ceil(needed)}px`;
    host.classList.add("diagram-wide");
    host.tabIndex = 0;
    host.setAttribute("role", "region");
    host.setAttribute("aria-label", "Diagram, drawn at a readable size: scroll sideways to see all of it");
    if (!hint) {
      hint = document.createElement("p");
      hint.className = "qc-scroll-hint";
      hint.textContent = HINT;
      host.before(hint);
    }
  }

  function fitReadably(root) {
    const svg = root.querySelector("svg");
    const host = root.host;
    if (!svg || !host || !svg.viewBox.baseVal || !svg.viewBox.baseVal.width) return;
    fit(svg, host);
    if (!("ResizeObserver" in window)) return;
    let width = host.clientWidth;
    new ResizeObserver(() => {
      if (host.clientWidth === width) return;  // its height changed, or nothing that matters
      width = host.clientWidth;
      fit(svg, host);
    }).observe(host);
  }

  const standIn = {
    initialize(options) {
      config = readable(options);
    },
    render(...args) {
      return load().then(mermaid => mermaid.render(...args)).then(result => ({
        ...result,
        fn(root) {
          result.fn?.(root);
          fitReadably(root);
        },
      }));
    },
  };

  function load() {
    loading ||= new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = source;
      script.onload = () => {
        const mermaid = window.mermaid;  // mermaid.min.js sets the global
        if (mermaid === standIn || typeof mermaid?.render !== "function") {
          reject(new Error(`${source} did not define mermaid`));
          return;
        }
        mermaid.initialize(config);
        window.mermaid = standIn;  // keep wrapping render: every diagram is fitted
        resolve(mermaid);
      };
      script.onerror = () => {
        loading = null;  // a later page may try again
        reject(new Error(`could not load ${source}`));
      };
      document.head.appendChild(script);
    });
    return loading;
  }

  window.mermaid = standIn;
})();
