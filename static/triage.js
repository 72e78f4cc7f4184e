// The run page's triage: j and k move to the next and the previous failing case (not while
// typing in a field, nor with Ctrl, Alt or Meta); a form opened in place is closed by its
// Close button; and a form refused (400, 409, 412) is shown again in place with its errors,
// which htmx would otherwise drop. Everything else is links and forms that work without it.
(function () {
  const hint = document.getElementById("triage-keys");
  if (hint) hint.hidden = false;

  function failures() {
    return Array.from(document.querySelectorAll("#results tr[data-failure]"));
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.altKey || event.metaKey || event.defaultPrevented) return;
    if (event.target.closest("input, select, textarea, [contenteditable]")) return;
    if (event.key !== "j" && event.key !== "k") return;
    const all = failures();
    if (!all.length) return;
    event.preventDefault();
    const focused = document.activeElement && document.activeElement.closest("tr[data-failure]");
    let at = all.indexOf(focused || document.querySelector("#results tr[data-failure].selected"));
    if (at < 0) at = event.key === "j" ? -1 : all.length;
    const next = Math.max(0, Math.min(all.length - 1, at + (event.key === "j" ? 1 : -1)));
    all.forEach(function (row) { row.classList.remove("selected"); });
    all[next].classList.add("selected");
    all[next].querySelector("th a").focus();
  });

  document.addEventListener("click", function (event) {
    const close = event.target.closest("[data-triage-close]");
    if (!close) return;
    const cell = close.closest("[data-triage]");
    const row = cell.closest("tr");
    const back = row && row.previousElementSibling && row.previousElementSibling.querySelector("[data-revise]");
    cell.replaceChildren();
    if (back) back.focus();
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    const refused = [400, 409, 412].indexOf(event.detail.xhr.status) >= 0;
    if (refused && event.detail.target.closest("[data-triage]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
})();
