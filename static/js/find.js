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
 *
 * The count is the conversation's, not the loaded messages': the bar's
 * data-find-matches lists every message the search matches (the store's,
 * store/listing/fulltext.conversation_matches), "match 3 of 22" is the third of
 * them, and Next/Previous step through each one's marks, then to the next one,
 * loading the transcript around it when it is not on the page.
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

  // Every message of the conversation the search matches, in transcript order (the
  // server's count from the store, loaded or not): the bar counts and steps through these,
  // loading the transcript around one that is not on the page yet.
  var matchIds;
  try {
    matchIds = JSON.parse(bar.getAttribute("data-find-matches") || "[]");
  } catch (error) {
    matchIds = [];
  }
  if (!Array.isArray(matchIds)) matchIds = [];
  var capped = bar.hasAttribute("data-find-capped");
  var aroundUrl = bar.getAttribute("data-find-around");
  var currentId = null;
  var pending = null;

  function messageIdOf(node) {
    for (var el = node; el; el = el.parentElement) {
      if (el.id && /^m\d+$/.test(el.id)) return parseInt(el.id.slice(1), 10);
    }
    return null;
  }

  function marksOf(id) {
    var element = document.getElementById("m" + id);
    if (!element) return [];
    return Array.prototype.slice.call(element.querySelectorAll("mark.find")).filter(
      function (mark) { return messageIdOf(mark) === id; }
    );
  }

  function total() {
    return matchIds.length + (capped ? "+" : "");
  }

  function show(all) {
    if (matchIds.length) {
      var at = matchIds.indexOf(currentId);
      if (at >= 0) {
        count.textContent = "match " + (at + 1) + " of " + total();
      } else {
        count.textContent = total() + (matchIds.length === 1 && !capped ? " matching message" : " matching messages") + " in this conversation";
      }
      return;
    }
    if (!all.length) {
      count.textContent = "no match in the loaded messages";
    } else if (current < 0) {
      count.textContent = all.length + (all.length === 1 ? " match" : " matches") + " in the loaded messages";
    } else {
      count.textContent = "match " + (current + 1) + " of " + all.length;
    }
  }

  function reveal(target) {
    // A match inside a collapsed tool call or reasoning: open it to show the match.
    for (var el = target.parentElement; el; el = el.parentElement) {
      if (el.tagName === "DETAILS" && !el.open) el.open = true;
    }
    target.scrollIntoView({ block: "center" });
  }

  function select(mark, element) {
    var previous = document.querySelector("mark.find.current");
    if (previous) previous.classList.remove("current");
    if (mark) mark.classList.add("current");
    reveal(mark || element);
    var all = marks();
    current = mark ? all.indexOf(mark) : -1;
    show(all);
  }

  // The matching message ``id``: its first (or last) match, loading the transcript around it
  // first when it is not on the page.
  function goMessage(id, last, loaded) {
    var element = document.getElementById("m" + id);
    if (!element) {
      if (loaded || !aroundUrl || !window.htmx) {
        show(marks());
        return;
      }
      pending = { id: id, last: last };
      count.textContent = "loading match " + (matchIds.indexOf(id) + 1) + " of " + total() + "…";
      window.htmx.ajax("GET", aroundUrl + "&around=" + encodeURIComponent(id), {
        target: "#transcript",
        swap: "outerHTML",
      });
      return;
    }
    currentId = id;
    var own = marksOf(id);
    select(own.length ? own[last ? own.length - 1 : 0] : null, element);
  }

  function go(index) {
    var all = marks();
    if (!all.length) {
      current = -1;
      show(all);
      return;
    }
    current = (index + all.length) % all.length;
    currentId = messageIdOf(all[current]);
    select(all[current], null);
  }

  function step(delta) {
    if (!matchIds.length) {
      var all = marks();
      var at = all.indexOf(document.querySelector("mark.find.current"));
      go(at < 0 ? (delta > 0 ? 0 : all.length - 1) : at + delta);
      return;
    }
    var position = matchIds.indexOf(currentId);
    if (position >= 0) {
      // The next match in the same message first.
      var own = marksOf(currentId);
      var here = own.indexOf(document.querySelector("mark.find.current"));
      if (here >= 0 && here + delta >= 0 && here + delta < own.length) {
        select(own[here + delta], null);
        return;
      }
    }
    var next = position < 0 ? (delta > 0 ? 0 : matchIds.length - 1) : position + delta;
    next = (next + matchIds.length) % matchIds.length;
    goMessage(matchIds[next], delta < 0, false);
  }

  bar.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-find-step]") : null;
    if (!button) return;
    event.preventDefault();
    step(parseInt(button.getAttribute("data-find-step"), 10) || 1);
  });

  // Chunks loaded later (load more / earlier, the refreshed transcript) get marked too;
  // the current match keeps its place in the counter. A transcript loaded around a match
  // (goMessage) goes on to that match.
  document.body.addEventListener("htmx:afterSwap", function () {
    markIn(container());
    if (pending) {
      var wanted = pending;
      pending = null;
      goMessage(wanted.id, wanted.last, true);
      return;
    }
    var all = marks();
    current = all.indexOf(document.querySelector("mark.find.current"));
    show(all);
  });

  markIn(container());
  // Start at the first match in the message the link opened (#m<id>), else the first.
  var all = marks();
  var target = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
  var first = target ? all.findIndex(function (mark) { return target.contains(mark); }) : -1;
  var targetId = target ? messageIdOf(target) : null;
  if (matchIds.length && targetId !== null && matchIds.indexOf(targetId) >= 0) {
    goMessage(targetId, false, true);
  } else if (all.length && first >= 0) {
    go(first);
  } else {
    show(all);
  }
})();
