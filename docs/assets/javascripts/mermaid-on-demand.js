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
 */
(() => {
  if (typeof window.mermaid !== "undefined") return;

  const source = new URL("mermaid.min.js", document.currentScript.src).href;
  let config = {};
  let loading = null;

  const standIn = {
    initialize(options) {
      config = options;
    },
    render(...args) {
      return load().then(mermaid => mermaid.render(...args));
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
