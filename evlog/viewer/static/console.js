/* The captured console (EVLOG_CAPTURE=enabled): per process and stream, the newest lines, searchable on
   the server (api/console); and Dask's progress per task prefix (api/progress). */
"use strict";
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var filter = { q: "", key: "" };  // key: "<process id>|<stream>" or "" for every stream

  function streamKey(s) { return s.process_id + "|" + s.stream; }

  EV.refreshConsole = function () {
    var p = { q: filter.q };
    if (filter.key) { var k = filter.key.split("|"); p.process = k[0]; p.stream = k.slice(1).join("|"); }
    return EV.api("api/console", p).then(function (d) {
      $("console-section").hidden = !d.streams.length;
      if (!d.streams.length) return;
      var sel = $("console-stream"), want = filter.key;
      sel.innerHTML = "";
      var total = d.streams.reduce(function (a, s) { return a + s.lines; }, 0);
      sel.appendChild(EV.el("option", { value: "" }, "every stream (" + EV.num(total) + " lines)"));
      d.streams.forEach(function (s) {
        sel.appendChild(EV.el("option", { value: streamKey(s) }, s.process + " · " + s.stream + " (" + EV.num(s.lines) + ")"));
      });
      sel.value = want;
      var out = $("console-lines");
      var atEnd = out.scrollHeight - out.scrollTop - out.clientHeight < 8;
      out.innerHTML = "";
      d.lines.forEach(function (l) {
        var extra = l.repeated ? "  [repeated " + EV.num(l.repeated) + "×]" : l.dropped ? "  [" + EV.num(l.dropped) + " lines dropped]" : "";
        out.appendChild(EV.el("div", { "class": "line " + (l.stream === "stderr" ? "stderr" : "stdout") }, [
          EV.el("span", { "class": "t" }, EV.clock(l.time)), EV.el("span", { "class": "p" }, l.process),
          EV.el("span", { "class": "b" }, (typeof l.body === "string" ? l.body : JSON.stringify(l.body)) + extra)]));
      });
      if (atEnd || !out.getAttribute("data-seen")) out.scrollTop = out.scrollHeight;  // newest lines last, in view
      out.setAttribute("data-seen", "1");
      out.setAttribute("data-lines", d.lines.length);
      $("console-count").textContent = d.matched > d.shown
        ? EV.num(d.shown) + " newest of " + EV.num(d.matched) + " matching lines"
        : EV.num(d.matched) + " line" + (d.matched === 1 ? "" : "s") + (filter.q ? " matching" : "");
    });
  };

  var typing = null;
  $("console-q").addEventListener("input", function (e) {
    clearTimeout(typing);
    typing = setTimeout(function () { filter.q = e.target.value; EV.refreshConsole(); }, 250);
  });
  $("console-stream").addEventListener("change", function (e) { filter.key = e.target.value; EV.refreshConsole(); });

  var ORDER = ["memory", "erred", "forgotten", "released", "processing", "waiting", "no-worker", "unknown"];
  var COLOURS = { memory: "#4e79a7", erred: "#d0312d", forgotten: "#bab0ac", released: "#bab0ac" };

  /** One bar per prefix: its tasks finished so far, by final state (hover for the counts). */
  EV.refreshProgress = function () {
    return EV.api("api/progress").then(function (d) {
      $("progress-section").hidden = !d.prefixes.length;
      var el = $("progress");
      el.innerHTML = "";
      var most = d.prefixes.reduce(function (a, p) { return Math.max(a, p.total); }, 1);
      d.prefixes.forEach(function (p) {
        var bar = EV.el("div", { "class": "bar", style: "width:" + (100 * p.total / most).toFixed(2) + "%" });
        var states = Object.keys(p.states).sort(function (a, b) { return ORDER.indexOf(a) - ORDER.indexOf(b); });
        states.forEach(function (s) {
          bar.appendChild(EV.el("i", { "data-state": s, title: s + ": " + EV.num(p.states[s]),
            style: "width:" + (100 * p.states[s] / p.total).toFixed(2) + "%;background:" + (COLOURS[s] || EV.prefixColour(p.prefix)) }));
        });
        var text = states.map(function (s) { return EV.num(p.states[s]) + " " + s; }).join(" · ");
        el.appendChild(EV.el("div", { "class": "progress-row", "data-prefix": p.prefix }, [
          EV.el("span", { "class": "name" }, [EV.el("i", { style: "background:" + EV.prefixColour(p.prefix) }), p.prefix]),
          EV.el("span", { "class": "track" }, bar), EV.el("span", { "class": "count" }, text)]));
      });
    });
  };
})();
