// ng_view: small conveniences over server-rendered pages; every page also works without this script.
(function () {
  "use strict";
  // Filters apply as soon as a drop-down changes.
  document.querySelectorAll("select.autosubmit").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });
  // One button unfolds (or folds again) every long text on the page.
  var toggle = document.getElementById("toggle-folds");
  if (toggle) {
    toggle.addEventListener("click", function () {
      var open = toggle.textContent === "unfold all";
      document.querySelectorAll("details.fold").forEach(function (d) { d.open = open; });
      toggle.textContent = open ? "fold all" : "unfold all";
    });
  }
  // Keyboard: j / k follow the page's next / previous link, u goes up to the task.
  document.addEventListener("keydown", function (event) {
    if (event.target.closest("input, select, textarea") || event.ctrlKey || event.metaKey || event.altKey) return;
    var rel = { j: "next", k: "prev", u: "up" }[event.key];
    var link = rel && document.querySelector('a[rel="' + rel + '"]');
    if (link) { window.location.href = link.href; }
  });
})();
