// Let htmx swap 409/422 answers into the page: they carry the fresh state and who
// changed it, which the user must see instead of a silent failure.
document.addEventListener("htmx:beforeSwap", function (evt) {
  var status = evt.detail.xhr.status;
  if (status === 409 || status === 422 || status === 400 || status === 403) {
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
  }
});

// "Select every case shown" in a queue table ticks or clears the row boxes of that name.
document.addEventListener("change", function (evt) {
  var all = evt.target;
  if (!all.matches || !all.matches("input[data-select-all]")) return;
  var boxes = all.closest("table").querySelectorAll(
    'input[type="checkbox"][name="' + all.getAttribute("data-select-all") + '"]'
  );
  boxes.forEach(function (box) { box.checked = all.checked; });
});

// A request the server could not answer (5xx) or that never reached it (network down,
// timeout) is not swapped by htmx: say so in the messages area instead of doing nothing.
// Polls stay quiet: they try again by themselves.
function reportFailure(evt, text) {
  var elt = evt.detail && evt.detail.elt;
  if (elt && elt.getAttribute && /every /.test(elt.getAttribute("hx-trigger") || "")) return;
  var box = document.getElementById("messages");
  if (!box) return;
  var line = document.createElement("div");
  line.className = "message error";
  line.setAttribute("role", "alert");
  line.textContent = text;
  box.appendChild(line);
}
document.addEventListener("htmx:responseError", function (evt) {
  var xhr = evt.detail.xhr;
  var ref = xhr.getResponseHeader("X-Request-ID");
  reportFailure(evt, "The server could not complete this (HTTP " + xhr.status + "). " +
    "Reload the page to see the current state before trying again" +
    (ref ? " (reference " + ref + ")." : "."));
});
document.addEventListener("htmx:sendError", function (evt) {
  reportFailure(evt, "The server could not be reached, or its answer was lost. " +
    "Reload the page to see whether the action was recorded before trying again.");
});
document.addEventListener("htmx:timeout", function (evt) {
  reportFailure(evt, "The server did not answer in time. Reload the page to see " +
    "whether the action was recorded before trying again.");
});

// On a phone the navigation folds behind its Menu button (static/css/app.css): the
// page marks itself as able to unfold it, so without JavaScript the links stay shown.
document.documentElement.classList.add("js-menu");
document.addEventListener("click", function (evt) {
  var toggle = evt.target.closest && evt.target.closest(".nav-toggle");
  if (!toggle) return;
  var open = toggle.getAttribute("aria-expanded") !== "true";
  toggle.setAttribute("aria-expanded", open ? "true" : "false");
});

// A browser that cannot show a folded <details>' content by CSS (::details-content)
// unfolds the worklist's filters itself on a screen wider than a phone, where the CSS
// hides their "Filters" summary (static/css/app.css).
if (!(window.CSS && CSS.supports && CSS.supports("selector(::details-content)")) &&
    window.matchMedia("(min-width: 561px)").matches) {
  document.querySelectorAll("details.filter-fold").forEach(function (fold) { fold.open = true; });
}
