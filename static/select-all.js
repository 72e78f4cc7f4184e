// "Select all on this page": a checkbox with data-select-all ticks or clears every case's box
// in its form, rows loaded later by "Load more" included.
document.addEventListener("change", function (event) {
  const all = event.target.closest("[data-select-all]");
  if (!all) return;
  // form.elements holds the rows' boxes too: they join the form by their form attribute
  for (const box of all.form.elements) if (box.name === "caseIds") box.checked = all.checked;
});
