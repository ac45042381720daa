// Keyboard shortcuts for the staff pages (docs/notes-and-notifications.md, "Keyboard").
// "/" focuses the search box; "j"/"k" move the selection in a list of cases and Enter
// opens it; "a" assigns the case to me on a case page; "?" shows the list of shortcuts
// (the <dialog id="shortcuts"> in _base.html). Inactive while typing in a field, and
// with Ctrl, Alt or Meta held, so the browser's own shortcuts are untouched.
(function () {
  "use strict";

  function typing(target) {
    if (!target || !target.closest) return false;
    return !!target.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']");
  }

  // The rows of the list of cases on this page: each row with a link to its case.
  function rows() {
    return Array.prototype.filter.call(
      document.querySelectorAll("table.queue-table tbody tr"),
      function (row) { return row.querySelector("td.case-id a[href]"); }
    );
  }

  function select(step) {
    var all = rows();
    if (!all.length) return false;
    var current = all.findIndex(function (row) { return row.classList.contains("kbd-selected"); });
    var next = current < 0 ? (step > 0 ? 0 : all.length - 1)
      : Math.min(all.length - 1, Math.max(0, current + step));
    all.forEach(function (row) {
      row.classList.remove("kbd-selected");
      row.removeAttribute("aria-selected");
    });
    all[next].classList.add("kbd-selected");
    all[next].setAttribute("aria-selected", "true");
    all[next].scrollIntoView({ block: "nearest" });
    return true;
  }

  function openSelected() {
    var row = document.querySelector("table.queue-table tbody tr.kbd-selected");
    var link = row && row.querySelector("td.case-id a[href]");
    if (!link) return false;
    window.location.assign(link.href);
    return true;
  }

  function assignToMe() {
    // The "Assign to me" form of the case page (not "Unassign me", which carries unassign).
    var form = document.querySelector("form.assign-self");
    if (!form || form.querySelector("input[name='unassign']")) return false;
    var button = form.querySelector("button[type='submit']");
    if (!button || button.disabled) return false;
    button.click();
    return true;
  }

  function focusSearch() {
    var box = document.querySelector(".nav-search input[name='q']");
    if (!box) return false;
    box.focus();
    box.select();
    return true;
  }

  function help() {
    var dialog = document.getElementById("shortcuts");
    if (!dialog || typeof dialog.showModal !== "function") return false;
    if (!dialog.open) dialog.showModal();
    return true;
  }

  var ACTIONS = {
    "/": focusSearch,
    "j": function () { return select(+1); },
    "k": function () { return select(-1); },
    "Enter": openSelected,
    "a": assignToMe,
    "?": help,
  };

  document.addEventListener("keydown", function (evt) {
    if (evt.defaultPrevented || evt.ctrlKey || evt.altKey || evt.metaKey || evt.isComposing) return;
    if (typing(evt.target)) return;
    var dialog = document.getElementById("shortcuts");
    if (dialog && dialog.open) return; // Escape closes it; nothing else acts behind it
    // Enter on a link or button keeps its own meaning.
    if (evt.key === "Enter" && evt.target.closest && evt.target.closest("a, button")) return;
    var action = ACTIONS[evt.key];
    if (action && action()) evt.preventDefault();
  });
})();
