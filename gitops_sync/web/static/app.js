// gitops-sync web page: live refresh. The page works without this file; with it, the part of the page
// under <main id="live"> is fetched again every second (only while the tab is visible) and swapped in;
// a page that takes long to answer (a source of thousands of objects) is asked less often: 4x its time.
// The HTML comes from the same server, rendered and escaped there; DOMParser never runs its scripts.
(function () {
  "use strict";
  var INTERVAL_MS = 1000;
  var note = document.getElementById("live-note");
  if (!note || note.getAttribute("data-live") !== "on" || !window.fetch || !window.DOMParser) {
    return;
  }
  var busy = false;
  var failures = 0;

  function openDetails(root) {
    var open = {};
    root.querySelectorAll("details[data-key]").forEach(function (d) { open[d.getAttribute("data-key")] = d.open; });
    return open;
  }

  var delay = INTERVAL_MS;
  var started = 0;

  function schedule() {
    window.setTimeout(function () { refresh(); }, delay);
  }

  function refresh() {
    var active = document.activeElement;
    if (busy || document.visibilityState === "hidden" || (active && active.form)) {
      if (!busy) {
        schedule();
      }
      return;
    }
    busy = true;
    started = Date.now();
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("live");
        var current = document.getElementById("live");
        if (fresh && current) {
          var open = openDetails(current);
          fresh.querySelectorAll("details[data-key]").forEach(function (d) {
            var key = d.getAttribute("data-key");
            if (Object.prototype.hasOwnProperty.call(open, key)) {
              d.open = open[key];
            }
          });
          current.replaceWith(document.importNode(fresh, true));
        }
        failures = 0;
        note.textContent = "live · " + new Date().toLocaleTimeString();
        note.className = "live-note";
      })
      .catch(function (err) {
        failures += 1;
        note.textContent = "not updating (" + String(err.message || err) + "), retrying";
      })
      .finally(function () {
        busy = false;
        delay = Math.min(30000, Math.max(INTERVAL_MS, 4 * (Date.now() - started)) * (failures > 0 ? 2 : 1));
        schedule();
      });
  }

  // Filters apply as they change (the form still works with its button and without this file).
  var form = document.getElementById("filter");
  if (form) {
    form.querySelectorAll("select").forEach(function (s) {
      s.addEventListener("change", function () { form.submit(); });
    });
  }
  note.textContent = "live";
  schedule();
})();
