/*
 * The support actions panel on a session page (templates/console/session_actions.html):
 * one line until opened. A link to #session-actions (an ended segment's "undo there")
 * opens it, and one the operator had open stays open when htmx replaces it. Where it sits
 * at the top of the screen and what it covers: static/js/sticky_top.js.
 */
(function () {
  "use strict";

  function panel() {
    return document.getElementById("session-actions");
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
    if (!keepOpen) return;
    keepOpen = false;
    var disclosure = panel() && panel().querySelector(".sa-disclosure");
    if (disclosure) disclosure.open = true;
  });
  window.addEventListener("hashchange", openOnHash);
  openOnHash();
})();
