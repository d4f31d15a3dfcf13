// Progressive enhancement only: every page works without this file.
// "Copy Robust Link" buttons copy the read-only field they name.
document.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
  var field = document.getElementById(button.getAttribute("data-copy"));
  if (!field || !navigator.clipboard) { return; }
  button.hidden = false;
  button.addEventListener("click", function () {
    navigator.clipboard.writeText(field.value).then(function () {
      button.textContent = "Copied";
    }, function () {
      field.select();
    });
  });
});
