/*
 * The words of the search a session page was opened from, marked in its transcript,
 * with "match 3 of 12 · Previous · Next".
 *
 * The words come from the server (the find bar's data-find-terms: the phrases
 * store/listing.parse_query made of the search, so this never parses a query
 * itself). Each phrase matches its words in order, anything but letters and
 * digits between them, ignoring case, as the search's tokenizers did. Text
 * nodes of the loaded messages are wrapped in <mark class="find">; chunks htmx
 * loads later are marked as they arrive (htmx:afterSwap).
 */
(function () {
  "use strict";

  var bar = document.querySelector(".find-bar[data-find-terms]");
  if (!bar) return;
  var terms;
  try {
    terms = JSON.parse(bar.getAttribute("data-find-terms") || "[]");
  } catch (error) {
    return;
  }
  if (!Array.isArray(terms) || !terms.length) return;

  function escapeRegExp(text) {
    return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }

  // The longest phrase first, so "red apple" wins over "red" where both match.
  var phrases = terms
    .filter(function (term) { return typeof term === "string" && term.trim(); })
    .sort(function (a, b) { return b.length - a.length; })
    .map(function (term) {
      return term.trim().split(/\s+/).map(escapeRegExp).join("[^\\p{L}\\p{N}]+");
    });
  if (!phrases.length) return;
  // Whole words, as the search's tokenizers matched them.
  var pattern = new RegExp(
    "(?<![\\p{L}\\p{N}])(?:" + phrases.join("|") + ")(?![\\p{L}\\p{N}])", "giu"
  );

  var count = bar.querySelector("[data-find-count]");
  var current = -1;

  function container() {
    return document.querySelector("#transcript .messages");
  }

  function skipped(node) {
    var parent = node.parentNode;
    return !parent || parent.closest("mark.find, .msg-head, script, style, button, .find-bar");
  }

  function markIn(root) {
    if (!root) return;
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: function (node) {
        if (!node.nodeValue || !node.nodeValue.trim() || skipped(node)) {
          return NodeFilter.FILTER_REJECT;
        }
        return NodeFilter.FILTER_ACCEPT;
      },
    });
    var nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    nodes.forEach(function (node) {
      var text = node.nodeValue;
      pattern.lastIndex = 0;
      var match = pattern.exec(text);
      if (!match) return;
      var fragment = document.createDocumentFragment();
      var at = 0;
      while (match) {
        if (!match[0].length) {
          pattern.lastIndex += 1;
        } else {
          fragment.appendChild(document.createTextNode(text.slice(at, match.index)));
          var mark = document.createElement("mark");
          mark.className = "find";
          mark.textContent = match[0];
          fragment.appendChild(mark);
          at = match.index + match[0].length;
        }
        match = pattern.exec(text);
      }
      fragment.appendChild(document.createTextNode(text.slice(at)));
      node.parentNode.replaceChild(fragment, node);
    });
  }

  function marks() {
    var root = container();
    return root ? Array.prototype.slice.call(root.querySelectorAll("mark.find")) : [];
  }

  function show(all) {
    if (!all.length) {
      count.textContent = "no match in the loaded messages";
    } else if (current < 0) {
      count.textContent = all.length + (all.length === 1 ? " match" : " matches") + " in the loaded messages";
    } else {
      count.textContent = "match " + (current + 1) + " of " + all.length;
    }
  }

  function go(index) {
    var all = marks();
    if (!all.length) {
      current = -1;
      show(all);
      return;
    }
    var previous = document.querySelector("mark.find.current");
    if (previous) previous.classList.remove("current");
    current = (index + all.length) % all.length;
    var mark = all[current];
    mark.classList.add("current");
    // A match inside a collapsed tool call or reasoning: open it to show the match.
    for (var el = mark.parentElement; el; el = el.parentElement) {
      if (el.tagName === "DETAILS" && !el.open) el.open = true;
    }
    mark.scrollIntoView({ block: "center" });
    show(all);
  }

  function step(delta) {
    var all = marks();
    var at = all.indexOf(document.querySelector("mark.find.current"));
    go(at < 0 ? (delta > 0 ? 0 : all.length - 1) : at + delta);
  }

  bar.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-find-step]") : null;
    if (!button) return;
    event.preventDefault();
    step(parseInt(button.getAttribute("data-find-step"), 10) || 1);
  });

  // Chunks loaded later (load more / earlier, the refreshed transcript) get marked too;
  // the current match keeps its place in the counter.
  document.body.addEventListener("htmx:afterSwap", function () {
    markIn(container());
    var all = marks();
    current = all.indexOf(document.querySelector("mark.find.current"));
    show(all);
  });

  markIn(container());
  // Start at the first match in the message the link opened (#m<id>), else the first.
  var all = marks();
  var target = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
  var first = target ? all.findIndex(function (mark) { return target.contains(mark); }) : -1;
  if (all.length && first >= 0) {
    go(first);
  } else {
    show(all);
  }
})();
