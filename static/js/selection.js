/*
 * Row selection on the session list: select-all-on-page, shift-click ranges,
 * a live "N selected" count; and tidy filter URLs (empty fields left out).
 *
 * No inline scripts or handlers anywhere: everything is delegated from the
 * document, so rows swapped in by htmx need no re-binding.
 */
(function () {
  "use strict";

  var ROW_BOX = 'input[type="checkbox"][name="ids"]';
  var lastClicked = null;

  function rowBoxes(form) {
    return Array.prototype.slice.call(form.querySelectorAll(ROW_BOX));
  }

  function refresh(form) {
    if (!form) return;
    var boxes = rowBoxes(form);
    var checked = boxes.filter(function (box) { return box.checked; }).length;
    var all = form.querySelector("[data-select-all]");
    if (all) {
      all.checked = boxes.length > 0 && checked === boxes.length;
      all.indeterminate = checked > 0 && checked < boxes.length;
    }
    var matching = form.querySelector("[data-all-matching]");
    var counter = form.querySelector("[data-selected-count]");
    if (counter) {
      counter.textContent = matching && matching.checked
        ? "All matching selected"
        : checked + " selected";
    }
    boxes.forEach(function (box) {
      var row = box.closest("tr");
      if (row) row.classList.toggle("selected", box.checked);
    });
  }

  document.addEventListener("click", function (event) {
    var box = event.target.closest ? event.target.closest(ROW_BOX) : null;
    if (!box || !box.form) return;
    var form = box.form;
    if (event.shiftKey && lastClicked && lastClicked !== box && lastClicked.form === form &&
        document.contains(lastClicked)) {
      var boxes = rowBoxes(form);
      var from = boxes.indexOf(lastClicked);
      var to = boxes.indexOf(box);
      if (from >= 0 && to >= 0) {
        var low = Math.min(from, to);
        var high = Math.max(from, to);
        for (var i = low; i <= high; i++) boxes[i].checked = box.checked;
        // A shift-click also extends the page's text selection: drop it.
        var selection = window.getSelection && window.getSelection();
        if (selection && selection.removeAllRanges) selection.removeAllRanges();
      }
    }
    lastClicked = box;
    refresh(form);
  });

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (!target.form) return;
    if (target.matches("[data-select-all]")) {
      rowBoxes(target.form).forEach(function (box) { box.checked = target.checked; });
      refresh(target.form);
    } else if (target.matches("[data-all-matching]")) {
      if (target.checked) {
        rowBoxes(target.form).forEach(function (box) { box.checked = true; });
      }
      refresh(target.form);
    } else if (target.matches(ROW_BOX)) {
      // Keyboard toggles (space) arrive here without a click's shift handling.
      var matching = target.form.querySelector("[data-all-matching]");
      if (matching && !target.checked) matching.checked = false;
      refresh(target.form);
    }
  });

  // Leave empty and default filter fields out of the URL htmx requests and pushes.
  document.addEventListener("htmx:configRequest", function (event) {
    var form = event.detail.elt;
    if (!form || !form.matches || !form.matches("form.filters")) return;
    var data = event.detail.formData;
    var defaults = {};
    form.querySelectorAll("[name][data-default]").forEach(function (field) {
      defaults[field.name] = field.getAttribute("data-default");
    });
    var drop = [];
    data.forEach(function (value, name) {
      if (value === "" || defaults[name] === value) drop.push(name);
    });
    drop.forEach(function (name) { data.delete(name); });
  });

  // The filters behind their "Filters" control: the summary counts the active ones (kept
  // current after htmx applies the form, which swaps only the results), and a wide screen
  // opens them when one is active. Without JavaScript they start closed and work the same.
  var WIDE = "(min-width: 60rem)";

  function activeFilters(details) {
    var fields = details.querySelector("[data-filter-fields]");
    if (!fields) return 0;
    var count = 0;
    fields.querySelectorAll("[name]").forEach(function (field) {
      if (field.type === "checkbox") {
        if (field.checked) count++;
      } else if (field.value !== "" && field.value !== field.getAttribute("data-default")) {
        count++;
      }
    });
    return count;
  }

  function refreshFilters(opening) {
    var details = document.querySelector("form.filters [data-filters]");
    if (!details) return;
    var count = activeFilters(details);
    var label = details.querySelector("[data-active-count]");
    if (label) label.textContent = count ? " \u00b7 " + count + " active" : "";
    if (opening && count && window.matchMedia && window.matchMedia(WIDE).matches) {
      details.open = true;
    }
  }

  document.addEventListener("htmx:afterSwap", function (event) {
    lastClicked = null;
    var form = document.getElementById("selection");
    if (form) refresh(form);
    refreshFilters(false);
  });

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("selection");
    if (form) refresh(form);
    refreshFilters(true);
  });
})();
