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

  /** Another run is shown: its own streams (process ids differ from run to run), no search. */
  EV.resetConsole = function () {
    filter.q = ""; filter.key = "";
    $("console-q").value = "";
    $("console-lines").removeAttribute("data-seen");
  };

  var typing = null;
  $("console-q").addEventListener("input", function (e) {
    clearTimeout(typing);
    typing = setTimeout(function () { filter.q = e.target.value; EV.refreshConsole(); }, 250);
  });
  $("console-stream").addEventListener("change", function (e) { filter.key = e.target.value; EV.refreshConsole(); });

  // Dask's progress bars: per prefix, its tasks in memory, erred, processing, queued and waiting, against its own total
  var ORDER = ["memory", "erred", "processing", "queued", "no-worker", "waiting", "released"];
  var COLOURS = { erred: "#d0312d", queued: "#9aa3b0", "no-worker": "#e8a33d", waiting: "#c5cad3", released: "#e2e5ea" };
  var NAMES = { memory: "in memory", "no-worker": "no worker" };

  function colourOf(state, prefix) { return COLOURS[state] || EV.prefixColour(prefix); }

  /** One bar per prefix, the whole width its own total: the tasks by state (hover a segment for its count). */
  EV.refreshProgress = function () {
    return EV.api("api/progress").then(function (d) {
      $("progress-section").hidden = !d.prefixes.length;
      var el = $("progress");
      el.innerHTML = "";
      var legend = EV.el("div", { "class": "progress-legend" }, "states:");
      ORDER.forEach(function (s) {
        legend.appendChild(EV.el("i", { "data-state": s, style: "background:" + (COLOURS[s] || "#4e79a7") + (s === "processing" ? ";opacity:.45" : "") }));
        legend.appendChild(document.createTextNode(NAMES[s] || s));
      });
      el.appendChild(legend);
      d.prefixes.forEach(function (p) {
        var bar = EV.el("div", { "class": "bar", style: "width:100%" });
        var states = Object.keys(p.states).sort(function (a, b) { return ORDER.indexOf(a) - ORDER.indexOf(b); });
        states.forEach(function (s) {
          bar.appendChild(EV.el("i", { "data-state": s, title: (NAMES[s] || s) + ": " + EV.num(p.states[s]) + " of " + EV.num(p.total),
            style: "width:" + (100 * p.states[s] / Math.max(1, p.total)).toFixed(2) + "%;background:" + colourOf(s, p.prefix) }));
        });
        var done = (p.states.memory || 0) + (p.states.erred || 0);
        var text = EV.num(done) + " / " + EV.num(p.total) + " done" + states.filter(function (s) { return s !== "memory"; })
          .map(function (s) { return " · " + EV.num(p.states[s]) + " " + (NAMES[s] || s); }).join("");
        el.appendChild(EV.el("div", { "class": "progress-row", "data-prefix": p.prefix, "data-total": p.total,
          "data-source": p.source }, [
          EV.el("span", { "class": "name" }, [EV.el("i", { style: "background:" + EV.prefixColour(p.prefix) }), p.prefix]),
          EV.el("span", { "class": "track" }, bar), EV.el("span", { "class": "count" }, text)]));
      });
    });
  };
})();
