/*
 * The session page's sticky bars (data-sticky: the support actions panel where the screen
 * is wide enough, the find bar of a page opened from a search) stack at the top of the
 * viewport, each below the ones before it, and whatever the page scrolls to (a search hit's
 * #m<id>, the find bar's next match, a segment) lands below them all: the document's
 * scroll-padding-top, which anchors and scrollIntoView leave free, follows their heights
 * (the panel is one line until opened).
 *
 * The rules go in a constructed style sheet (CSSOM), not style attributes, which the
 * Content-Security-Policy refuses. Without it the style sheets' fixed values apply.
 */
(function () {
  "use strict";

  var sheet = null;
  try {
    sheet = new CSSStyleSheet();
    document.adoptedStyleSheets = document.adoptedStyleSheets.concat([sheet]);
  } catch (error) {
    return;
  }
  var shown = null;

  function bars() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-sticky][id]"));
  }

  function update() {
    var offset = 0;
    var rules = [];
    bars().forEach(function (bar) {
      if (window.getComputedStyle(bar).position !== "sticky") return;
      rules.push("#" + bar.id + " { top: " + offset + "px; }");
      offset += Math.ceil(bar.getBoundingClientRect().height);
    });
    rules.push("html { scroll-padding-top: " + (offset ? offset + 8 : 0) + "px; }");
    var text = rules.join("\n");
    if (text === shown) return;
    shown = text;
    sheet.replaceSync(text);
  }

  var observer = window.ResizeObserver ? new ResizeObserver(update) : null;

  function watch() {
    if (observer) {
      observer.disconnect();
      bars().forEach(function (bar) { observer.observe(bar); });
    }
    update();
  }

  // htmx replaces the panel (an action's answer, the session ending meanwhile).
  document.body.addEventListener("htmx:afterSwap", watch);
  window.addEventListener("resize", update);
  watch();
})();
