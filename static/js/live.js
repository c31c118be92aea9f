/*
 * Live fragments: every element with data-live-seconds="N" gets a "live-tick" event every
 * N seconds while the tab is visible (its hx-trigger="live-tick" polls the server), and
 * one at once when the tab comes back into view. A hidden tab asks nothing.
 *
 * A script rather than htmx's "every Ns [filter]": the Content-Security-Policy forbids
 * the eval that trigger filters need (sessions_admin/security.py).
 */
(function () {
  "use strict";

  var seconds = 0;

  function tick(all) {
    document.querySelectorAll("[data-live-seconds]").forEach(function (element) {
      var every = parseInt(element.getAttribute("data-live-seconds"), 10);
      if (!(every > 0)) return;
      if (all || seconds % every === 0) {
        element.dispatchEvent(new CustomEvent("live-tick", { bubbles: false }));
      }
    });
  }

  window.setInterval(function () {
    if (document.visibilityState !== "visible") return;
    seconds += 1;
    tick(false);
  }, 1000);

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") tick(true);
  });
})();
