/*
 * "Copy link" on each transcript message: puts the message's permalink
 * (data-copy-link, made absolute) on the clipboard, for a support ticket.
 *
 * Delegated from the document (no inline handlers: the Content-Security-Policy
 * forbids them), so messages loaded later by htmx need no binding.
 */
(function () {
  "use strict";

  function say(button, text) {
    var label = button.getAttribute("data-label") || button.textContent;
    button.setAttribute("data-label", label);
    button.textContent = text;
    window.clearTimeout(button.copyLinkTimer);
    button.copyLinkTimer = window.setTimeout(function () {
      button.textContent = label;
    }, 2000);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-copy-link]") : null;
    if (!button) return;
    event.preventDefault();
    var url = new URL(button.getAttribute("data-copy-link"), window.location.href).href;
    if (!navigator.clipboard || !window.isSecureContext) {
      // No clipboard API (plain http on another host): the message's #id link is the same URL.
      say(button, "Copy the #id link");
      return;
    }
    navigator.clipboard.writeText(url).then(
      function () { say(button, "Copied"); },
      function () { say(button, "Copy the #id link"); }
    );
  });
})();
