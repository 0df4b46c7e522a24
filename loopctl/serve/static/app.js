// Live updates: the page works without this. When the server says the
// home is at another version than the page shows (server-sent events), the
// main part of the page is fetched again and swapped in; nothing of the
// page's own text is built here.
(function () {
  if (!window.EventSource || !window.DOMParser) return;
  var busy = false;
  function refresh(event) {
    var main = document.getElementById("main");
    if (main && event && event.data === main.getAttribute("data-version")) return;
    if (busy || document.querySelector("textarea:focus")) return;
    busy = true;
    var page = document.getElementById("main").getAttribute("data-page") || "/";
    fetch(page, { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.text() : null;
    }).then(function (html) {
      busy = false;
      if (!html) return;
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.getElementById("main"), here = document.getElementById("main");
      if (fresh && here) here.replaceWith(document.importNode(fresh, true));
    }, function () { busy = false; });
  }
  var source = window.loopctlLive = new EventSource("/api/events");
  source.addEventListener("change", refresh);
})();
