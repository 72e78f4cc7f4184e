// The runs inbox's keys: j and k move to the next and the previous run, a opens the add-case
// form for the run selected (Enter opens the run, as on any link). Not while typing in a field,
// nor with Ctrl, Alt or Meta. Everything they do, the page's links do without JavaScript.
(function () {
  const hint = document.getElementById("inbox-keys");
  if (hint) hint.hidden = false;

  function rows() {
    return Array.from(document.querySelectorAll("#run-rows tr[data-run]"));
  }

  // The run selected: the one whose row has the focus, else the one last selected (the focus
  // may have gone to "Load more", whose rows took its place)
  function selected(all) {
    const focused = document.activeElement && document.activeElement.closest("tr[data-run]");
    return all.indexOf(focused || document.querySelector("#run-rows tr.selected"));
  }

  function select(all, index) {
    all.forEach(function (row) { row.classList.remove("selected"); });
    all[index].classList.add("selected");
    all[index].querySelector("[data-run-link]").focus();
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.altKey || event.metaKey || event.defaultPrevented) return;
    if (event.target.closest("input, select, textarea, [contenteditable]")) return;
    if (event.key !== "j" && event.key !== "k" && event.key !== "a") return;
    const all = rows();
    if (!all.length) return;
    const at = selected(all);
    if (event.key === "a") {
      const add = at >= 0 && all[at].querySelector("[data-add-case]");
      if (add) {
        event.preventDefault();
        window.location.assign(add.href);
      }
      return;
    }
    event.preventDefault();
    const more = document.querySelector("#more-row a");
    if (event.key === "j" && at === all.length - 1 && more) {
      more.focus();  // past the last run: "Load more" (Enter loads them)
      return;
    }
    select(all, event.key === "j" ? Math.min(at + 1, all.length - 1) : Math.max(at - 1, 0));
  });
})();
