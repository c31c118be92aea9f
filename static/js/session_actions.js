/*
 * The support actions panel on a session page (templates/console/session_actions.html).
 *
 * Where the screen is wide enough the panel sticks to the top of the viewport, so whatever
 * the page scrolls to (a search hit's #m<id>, the find bar's next match, a segment) would
 * land under it: the document's scroll-padding-top follows the panel's height (one line
 * while it is closed), which anchors and scrollIntoView leave free. It is set in a
 * constructed style sheet (CSSOM), not a style attribute, which the Content-Security-Policy
 * refuses. A link to #session-actions (an ended segment's "undo there") opens it.
 */
(function () {
  "use strict";

  var wide = window.matchMedia("(min-width: 901px)");

  function panel() {
    return document.getElementById("session-actions");
  }

  var sheet = null;
  try {
    sheet = new CSSStyleSheet();
    document.adoptedStyleSheets = document.adoptedStyleSheets.concat([sheet]);
  } catch (error) {
    sheet = null; // an older browser keeps the style sheet's fixed padding
  }
  var shown = null;

  function update() {
    if (!sheet) return;
    var element = panel();
    var covered = element && wide.matches ? Math.ceil(element.getBoundingClientRect().height) + 8 : 0;
    if (covered === shown) return;
    shown = covered;
    sheet.replaceSync(covered ? "html { scroll-padding-top: " + covered + "px; }" : "");
  }

  var observer = window.ResizeObserver ? new ResizeObserver(update) : null;

  function watch() {
    var element = panel();
    if (observer) {
      observer.disconnect();
      if (element) observer.observe(element);
    }
    update();
  }

  function openOnHash() {
    if (window.location.hash !== "#session-actions") return;
    var disclosure = panel() && panel().querySelector(".sa-disclosure");
    if (disclosure) disclosure.open = true;
  }

  // The panel is replaced by an action's answer or when the session ends (htmx); one the
  // operator had open stays open.
  var keepOpen = false;
  document.body.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (target && target.id === "session-actions") {
      var disclosure = target.querySelector(".sa-disclosure");
      keepOpen = !!(disclosure && disclosure.open);
    }
  });
  document.body.addEventListener("htmx:afterSwap", function () {
    if (keepOpen) {
      keepOpen = false;
      var disclosure = panel() && panel().querySelector(".sa-disclosure");
      if (disclosure) disclosure.open = true;
    }
    watch();
  });
  if (wide.addEventListener) wide.addEventListener("change", update);
  window.addEventListener("hashchange", openOnHash);
  openOnHash();
  watch();
})();
