/*
 * The overview's cached figures say how old they are: every <time data-ago> reads
 * "40 s ago" from its datetime, kept current while the page stays open (the same
 * words as console/views/home.py's computed_ago).
 *
 * When the page comes back into view (the operator may have merged or deleted in
 * another tab), a "figures-stale" event on the body makes the figures reload
 * (hx-trigger="figures-stale from:body"): the server drops its cached figures after
 * every operator's change, so they come back recomputed. Nothing is requested while
 * the page is hidden or merely left open.
 */
(function () {
  "use strict";

  var TICK_MS = 5000;

  function words(seconds) {
    if (seconds < 2) return "just now";
    if (seconds < 120) return seconds + " s ago";
    if (seconds < 7200) return Math.floor(seconds / 60) + " min ago";
    return Math.floor(seconds / 3600) + " h ago";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-ago]").forEach(function (time) {
      var at = Date.parse(time.getAttribute("datetime"));
      if (!isNaN(at)) time.textContent = words(Math.max(0, Math.floor((now - at) / 1000)));
    });
  }

  window.setInterval(function () {
    if (document.visibilityState === "visible") tick();
  }, TICK_MS);

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState !== "visible") return;
    tick();
    document.body.dispatchEvent(new CustomEvent("figures-stale", { bubbles: true }));
  });
})();
