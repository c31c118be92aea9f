/*
 * Keyboard focus and screen-reader announcements around htmx swaps (issue 29).
 *
 * Focus: a swap that removes the focused element would drop focus to <body> (a keyboard
 * user starts again from the top). htmx itself refocuses an element whose id comes back;
 * otherwise focus goes to the same control in the new content (same tag, name and words)
 * where it can take focus, else to what the answer says (an alert or notice), else to the
 * swapped region itself. A user's own action (a click or a submit) whose answer carries an
 * alert focuses the alert first, whether or not focus was lost;
 * one whose answer lands in a [data-swap-focus] region focuses the answer's heading.
 *
 * Announcements: #announcer (templates/base.html) is a polite live region that is always
 * in the page, so what is written into it is read out; a region swapped in whole is not
 * reliably read. Swapped content marks what to say with data-announce: its value, or when
 * empty its words without their .hint asides; role="alert" content is said too. What has
 * a data-announce-key (or an id) is not said again in the same words, and with
 * data-announce-quiet="N" (a job's progress, polled every second) at most once in N
 * seconds unless data-announce-state (running -> done) changed. Messages and alerts a page
 * loads with (#messages, role="alert") are said once it has loaded; an htmx answer that
 * is not swapped (an error status) is said in #messages.
 */
(function () {
  "use strict";

  var lastSaid = {};

  function say(text) {
    var announcer = document.getElementById("announcer");
    text = (text || "").replace(/\s+/g, " ").trim();
    if (!announcer || !text) return;
    // Emptied first: the same words twice in a row are read twice.
    announcer.textContent = "";
    window.setTimeout(function () {
      announcer.textContent = text;
    }, 120);
  }

  // An element's words without its .hint asides.
  function wordsOf(element) {
    var copy = element.cloneNode(true);
    copy.querySelectorAll(".hint").forEach(function (hint) {
      hint.remove();
    });
    return copy.textContent;
  }

  function announceable(element) {
    var text = element.getAttribute("data-announce") || wordsOf(element);
    var key = element.getAttribute("data-announce-key") || element.id;
    if (key) {
      var quiet = parseInt(element.getAttribute("data-announce-quiet") || "0", 10) * 1000;
      var state = element.getAttribute("data-announce-state") || "";
      var last = lastSaid[key];
      var now = Date.now();
      if (last && last.text === text) return "";
      if (last && last.state === state && now - last.at < quiet) return "";
      lastSaid[key] = { text: text, state: state, at: now };
    }
    return text;
  }

  function within(root, selector) {
    var found = root.matches && root.matches(selector) ? [root] : [];
    return found.concat(Array.prototype.slice.call(root.querySelectorAll(selector)));
  }

  function describe(element) {
    return {
      tag: element.tagName,
      name: element.getAttribute("name") || "",
      words: (element.textContent || element.value || "").replace(/\s+/g, " ").trim(),
    };
  }

  function sameControl(root, was) {
    var candidates = within(root, was.tag.toLowerCase());
    for (var i = 0; i < candidates.length; i += 1) {
      var now = describe(candidates[i]);
      if (now.name === was.name && now.words === was.words) return candidates[i];
    }
    return null;
  }

  function focusPlace(element) {
    if (!element.matches("a[href], button, input, select, textarea, summary, [tabindex]")) {
      element.setAttribute("tabindex", "-1");
    }
    element.focus();
  }

  // The first of ``candidates`` that takes focus (a hidden one does not).
  function focusFirst(candidates) {
    for (var i = 0; i < candidates.length; i++) {
      if (!candidates[i]) continue;
      focusPlace(candidates[i]);
      if (document.activeElement === candidates[i]) return;
    }
  }

  function lost() {
    var active = document.activeElement;
    return !active || active === document.body || !document.body.contains(active);
  }

  // Where focus was when the request left: hx-disabled-elt disables the button that was
  // pressed while the request runs, and a disabled button loses focus. Kept on the
  // request's own config: swaps of other requests (a poll, a refresh the answer
  // triggered) may come between this one's swap and its settle.
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (event.detail.requestConfig) event.detail.requestConfig.a11yFocus = document.activeElement;
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    var config = event.detail.requestConfig;
    if (!config) return;
    var active = config.a11yFocus || document.activeElement;
    var target = event.detail.target;
    var trigger = config.triggeringEvent;
    config.a11ySettled = [];
    config.a11yWas = {
      inside: !!(active && active !== document.body && target && target.contains(active)),
      control: active && active !== document.body ? describe(active) : null,
      byUser: !!(trigger && (trigger.type === "submit" || trigger.type === "click")),
    };
  });

  // Fired on each element a swap put in the page.
  document.addEventListener("htmx:afterSettle", function (event) {
    var swapped = event.target;
    var config = event.detail.requestConfig || {};
    var settled = config.a11ySettled || [];
    if (!(swapped instanceof Element)) return;
    // An innerHTML swap settles its target and the target's new children: one look.
    if (settled.some(function (seen) { return seen.contains(swapped); })) return;
    settled.push(swapped);
    // All of the swap is in the page by its first settle: one look at what scrolls.
    if (settled.length === 1) reachableScrollers();
    var alerts = within(swapped, '[role="alert"]');
    var words = within(swapped, '[data-announce], [role="alert"]')
      .map(announceable)
      .filter(Boolean);
    if (words.length) say(words.join(" "));

    var was = config.a11yWas;
    if (!was) return;
    config.a11yWas = null;
    if (was.inside && lost()) {
      var same = was.control && sameControl(swapped, was.control);
      var notice = within(swapped, '[role="alert"], [role="status"], [data-announce]')[0];
      // A refusal of the user's own action is read before anything else; the same control
      // may be back hidden (in a closed <details>), where it cannot take focus.
      focusFirst([was.byUser ? alerts[0] : null, same, notice, swapped]);
    } else if (was.byUser && alerts.length) {
      focusPlace(alerts[0]);
    } else if (was.byUser && swapped.closest("[data-swap-focus]")) {
      // An answer shown away from the control that asked for it (a dry run below the
      // presets): focus goes to its heading, so the next Tab continues inside it.
      focusPlace(within(swapped, "h1, h2, h3")[0] || swapped);
    }
  });

  // An answer htmx does not swap (a 4xx or 5xx: templates/base.html's responseHandling)
  // would otherwise leave the page as if nothing had been asked.
  document.addEventListener("htmx:responseError", function (event) {
    var region = document.getElementById("messages");
    var xhr = event.detail.xhr;
    if (!region || !xhr) return;
    var list = document.createElement("ul");
    var item = document.createElement("li");
    list.className = "messages";
    item.className = "error";
    item.textContent =
      "That did not work: the server answered " + xhr.status + " " + (xhr.statusText || "") +
      ". Reload the page to see where things stand.";
    list.appendChild(item);
    region.replaceChildren(list);
  });

  // A box that scrolls (a wide table on a phone, a long tool output) must be reachable by
  // keyboard to be scrolled: one holding no control of its own joins the Tab order while
  // it scrolls (WCAG 2.1.1; axe's scrollable-region-focusable).
  var SCROLLERS = "main table, main pre, main .pm-content";
  var CONTROL = "a[href], button, input, select, textarea, summary, [tabindex]";

  function reachableScrollers() {
    document.querySelectorAll(SCROLLERS).forEach(function (box) {
      var ours = box.hasAttribute("data-scroll-focus");
      var scrolls =
        box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      if (scrolls) {
        var style = getComputedStyle(box);
        scrolls = /auto|scroll/.test(style.overflowX + " " + style.overflowY);
      }
      if (scrolls && !ours && !box.hasAttribute("tabindex") && !box.querySelector(CONTROL)) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("data-scroll-focus", "");
      } else if (!scrolls && ours) {
        box.removeAttribute("tabindex");
        box.removeAttribute("data-scroll-focus");
      }
    });
  }

  var resizing = 0;
  window.addEventListener("resize", function () {
    window.clearTimeout(resizing);
    resizing = window.setTimeout(reachableScrollers, 100);
  });

  // What a page arrives with after an action (a confirmation, a refusal): a live region
  // filled before the page loaded is not read out, so it is said once the page is in.
  document.addEventListener("DOMContentLoaded", function () {
    reachableScrollers();
    var region = document.getElementById("messages");
    var said = region ? [region.textContent] : [];
    document.querySelectorAll('main [role="alert"]').forEach(function (alert) {
      said.push(alert.textContent);
    });
    if (said.join("").trim()) {
      window.setTimeout(function () {
        say(said.join(" "));
      }, 600);
    }
  });
})();
