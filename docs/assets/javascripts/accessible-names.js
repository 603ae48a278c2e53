// Names for two parts of Material's page that have none (axe-core's
// aria-dialog-name and aria-progressbar-name): the search dialog and the
// progress bar of instant navigation. And a table too wide for the page
// scrolls sideways: it takes the keyboard's focus, so it can be scrolled
// without a mouse (scrollable-region-focusable). Kept up to date as Material
// adds or replaces them.
(function () {
  function name() {
    document.querySelectorAll(".md-search[role=dialog]:not([aria-label])")
      .forEach(function (el) { el.setAttribute("aria-label", "Search the site"); });
    document.querySelectorAll(".md-progress:not([aria-label])")
      .forEach(function (el) { el.setAttribute("aria-label", "Loading the page"); });
    document.querySelectorAll(".md-typeset__scrollwrap:not([tabindex])").forEach(function (el) {
      if (el.scrollWidth > el.clientWidth) {
        el.setAttribute("tabindex", "0");
        el.setAttribute("role", "region");
        el.setAttribute("aria-label", "A wide table: scroll sideways");
      }
    });
  }
  name();
  window.addEventListener("resize", name);
  new MutationObserver(name).observe(document.documentElement, { childList: true, subtree: true });
})();
