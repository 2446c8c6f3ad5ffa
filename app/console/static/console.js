// Refreshes the overview panel in place (no reload), every data-refresh ms.
(function () {
  "use strict";
  var el = document.getElementById("overview");
  if (!el) { return; }
  var every = parseInt(el.getAttribute("data-refresh"), 10) || 5000;
  function tick() {
    fetch("/overview/fragment", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) { el.innerHTML = html; el.setAttribute("data-refreshed", String(Date.now())); })
      .catch(function () { el.setAttribute("data-stale", "true"); })
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();

// A running proposal's page reloads every 2s, until its run is done.
(function () {
  "use strict";
  var st = document.getElementById("pstate");
  if (!st || st.textContent !== "running") { return; }
  setTimeout(function () { window.location.reload(); }, 2000);
})();
