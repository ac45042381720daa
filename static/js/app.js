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
