// "Copy" buttons: data-copy names the field whose value goes to the clipboard.
document.addEventListener("click", function (event) {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const field = document.querySelector(button.dataset.copy);
  field.select();
  navigator.clipboard.writeText(field.value).then(function () {
    button.textContent = "Copied";
  }, function () {
    button.textContent = "Press Ctrl+C";
  });
});
