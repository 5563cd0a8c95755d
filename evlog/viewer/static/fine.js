/* Dask's own vocabulary on the dashboard (api/fine: evlog/data/panels/fine_metrics.py).

   The Fine Performance Metrics panel, as Dask's own page of that name: per task prefix a bar of where
   execute spent its time (or bytes, or counts) by activity, stacked, the bars on one absolute scale; then
   gather-dep and get-data, one bar each. A selector narrows it to one Dask span's tree (gather-dep and
   get-data are per worker only: Dask has no per-span figures of them), another picks the unit. Below,
   the Dask spans the program named, with their durations.

   The Dask spans also draw as labelled bands above the Gantt, one row per nesting level, on the
   Gantt's time axis (``band`` below). */
"use strict";
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var fine = { span: "", unit: "seconds" };
  var ROW = 16, LABEL = "Dask spans";
  // activities: CPU and off-CPU far apart, (de)serializing greens, disk reds; colours the prefixes (palette.js)
  // do not start with, so a bar's activities never look like a prefix
  var KNOWN = { "thread-cpu": "#440154", "thread-noncpu": "#21918c", "executor": "#bab0ac", "other": "#9c755f",
    "serialize": "#5ec962", "deserialize": "#addc30", "compress": "#3b528b", "decompress": "#8fa9d9",
    "disk-write": "#b2182b", "disk-read": "#ef8a62", "network": "#2c728e", "memory-read": "#cc79a7" };
  function activityColour(a) { return KNOWN[a] || EV.colour(a); }
  function amount(v, unit) {
    return unit === "seconds" ? EV.duration(v) : EV.short(v, unit === "bytes" ? "bytes" : "");
  }

  /** One stacked bar per entry of ``stack`` ({bars, activities, values}), on the scale ``top``. */
  function bars(el, stack, unit, top, colourName) {
    stack.bars.forEach(function (name) {
      var acts = stack.values[name], total = 0;
      Object.keys(acts).forEach(function (a) { total += acts[a]; });
      var bar = EV.el("span", { "class": "fine-bar", style: "width:" + (100 * total / Math.max(top, 1e-12)).toFixed(2) + "%" });
      stack.activities.forEach(function (a) {
        if (!acts[a]) return;
        bar.appendChild(EV.el("i", { "data-activity": a, title: name + " · " + a + ": " + amount(acts[a], unit) +
          " (" + Math.round(100 * acts[a] / total) + "%)", style: "width:" + (100 * acts[a] / total).toFixed(3) +
          "%;background:" + activityColour(a) }));
      });
      el.appendChild(EV.el("div", { "class": "fine-row", "data-name": name, "data-total": total }, [
        EV.el("span", { "class": "name" }, colourName ? [EV.el("i", { style: "background:" + EV.prefixColour(name) }), name] : name),
        EV.el("span", { "class": "track" }, bar), EV.el("span", { "class": "count" }, amount(total, unit))]));
    });
  }

  function legend(el, activities) {
    var lg = EV.el("div", { "class": "legend" });
    activities.forEach(function (a) { lg.appendChild(EV.el("span", {}, [EV.el("i", { style: "background:" + activityColour(a) }), a])); });
    el.appendChild(lg);
  }

  function topOf(stack) {
    var top = 0;
    stack.bars.forEach(function (b) {
      var t = 0, acts = stack.values[b];
      Object.keys(acts).forEach(function (a) { t += acts[a]; });
      if (t > top) top = t;
    });
    return top;
  }

  function render(d) {
    EV.daskSpans = d.spans;
    showBands();
    $("fine-section").hidden = d.empty && !d.spans.length;
    var spanSel = $("fine-span"), unitSel = $("fine-unit");
    spanSel.innerHTML = "";
    spanSel.appendChild(EV.el("option", { value: "" }, "the whole run"));
    d.spans.forEach(function (s) {
      spanSel.appendChild(EV.el("option", { value: s.id }, "\u00a0".repeat(2 * s.depth) + s.label + " (" + EV.duration(s.wall_s) + ")"));
    });
    spanSel.value = d.span || "";
    unitSel.innerHTML = "";
    (d.units.length ? d.units : ["seconds"]).forEach(function (u) { unitSel.appendChild(EV.el("option", { value: u }, u)); });
    unitSel.value = d.unit;
    var el = $("fine");
    el.innerHTML = "";
    el.setAttribute("data-span", d.span || "");
    el.setAttribute("data-unit", d.unit);
    var acts = d.execute.activities.slice();
    [d.gather_dep, d.get_data].forEach(function (s) { s.activities.forEach(function (a) { if (acts.indexOf(a) < 0) acts.push(a); }); });
    legend(el, acts);
    el.appendChild(EV.el("h3", {}, "Task execution by prefix" + (d.span ? " in this Dask span (and the spans inside it)" : "")));
    if (d.execute.bars.length) bars(el, d.execute, d.unit, topOf(d.execute), true);
    else el.appendChild(EV.el("p", { "class": "muted" }, "No figures in " + d.unit + "."));
    var other = { bars: [], activities: [], values: {} };
    [d.gather_dep, d.get_data].forEach(function (s) {
      s.bars.forEach(function (b) { other.bars.push(b); other.values[b] = s.values[b]; });
      s.activities.forEach(function (a) { if (other.activities.indexOf(a) < 0) other.activities.push(a); });
    });
    el.appendChild(EV.el("h3", {}, "Moving data between workers (gather-dep: fetching inputs; get-data: sending them)"));
    if (other.bars.length) bars(el, other, d.unit, topOf(other), false);
    else el.appendChild(EV.el("p", { "class": "muted" }, d.span ? "Dask keeps these per worker, not per span." : "None."));
    var list = $("fine-spans");
    list.innerHTML = "";
    if (d.spans.length) {
      list.appendChild(EV.table(["Dask span", "start (" + EV.tzShort() + ")", "duration"], d.spans.map(function (s) {
        return ["\u00a0".repeat(2 * s.depth) + s.label, EV.clock(s.start, true), EV.duration(s.wall_s)];
      })));
    }
  }

  EV.refreshFine = function () {
    return EV.api("api/fine", { span: fine.span, unit: fine.unit }).then(render);
  };

  $("fine-span").addEventListener("change", function (e) { fine.span = e.target.value; EV.refreshFine(); });
  $("fine-unit").addEventListener("change", function (e) { fine.unit = e.target.value; EV.refreshFine(); });

  /** The Dask spans as labelled bands above the Gantt, on its time axis: a band of the Gantt's band layer
      (``gantt.addBand``) where it has one, else drawn on a canvas of its own above it after each of the
      Gantt's draws (``EV.afterGanttDraw``). One row per nesting level; a band's colour is its root span's. */
  var band = {
    id: "dask-spans",
    shown: function (gantt) {
      var d = gantt.data;
      return (EV.daskSpans || []).filter(function (s) { return d && s.end >= d.t0 && s.start <= d.t1; });
    },
    height: function (gantt) {
      var depth = -1;
      band.shown(gantt).forEach(function (s) { if (s.depth > depth) depth = s.depth; });
      return depth < 0 ? 0 : (depth + 1) * ROW + 2;
    },
    draw: function (g, gantt, top) {
      var d = gantt.data, shown = band.shown(gantt), drawn = [];
      var xOf = function (t) { return gantt.x ? gantt.x(t) : gantt._x(t); };
      var left = xOf(d.t0), right = xOf(d.t1);
      g.font = "11px system-ui, sans-serif";
      g.fillStyle = "#6b7385";
      g.fillText(LABEL, 4, top + 12);
      shown.forEach(function (s) {
        var x0 = Math.max(xOf(s.start), left), x1 = Math.max(Math.min(xOf(s.end), right), x0 + 2), y = top + s.depth * ROW + 1;
        g.fillStyle = EV.colour(s.name[0], true);
        g.fillRect(x0, y, x1 - x0, ROW - 2);
        g.strokeStyle = EV.colour(s.name[0]); g.lineWidth = 1;
        g.strokeRect(x0 + 0.5, y + 0.5, x1 - x0 - 1, ROW - 3);
        var text = s.name[s.name.length - 1];
        if (g.measureText(text).width + 6 <= x1 - x0) { g.fillStyle = "#1d2330"; g.fillText(text, x0 + 3, y + ROW - 5); }
        drawn.push({ x0: x0, x1: x1, y0: y, y1: y + ROW - 2, span: s });
      });
      band.drawn = drawn;
      $("gantt-section").setAttribute("data-dask-bands", shown.length);
    },
  };

  function hover(e) {
    var c = e.target, r = c.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top, hit = null;
    (band.drawn || []).forEach(function (b) { if (x >= b.x0 && x <= b.x1 && y >= b.y0 && y <= b.y1) hit = b.span; });
    c.title = hit ? "Dask span " + hit.label + " · " + EV.duration(hit.wall_s) + " · " + EV.clock(hit.start) + " → " + EV.clock(hit.end) : "";
  }

  var placed = false;
  function showBands() {
    if (!placed && EV.gantt && EV.gantt.addBand) {
      EV.gantt.addBand(band);
      EV.gantt.canvas.addEventListener("mousemove", hover);
      placed = true;
    } else if (EV.gantt && EV.gantt.data) {
      EV.gantt.draw();
    }
  }

  EV.afterGanttDraw = function (gantt) {  // a Gantt without a band layer: a canvas of its own above it
    if (gantt.addBand) return;
    var c = $("dask-bands"), h = gantt.data ? band.height(gantt) : 0;
    c.hidden = !h;
    if (!h) { $("gantt-section").setAttribute("data-dask-bands", 0); band.drawn = []; return; }
    var dpr = window.devicePixelRatio || 1, w = gantt.width;
    c.style.height = h + "px";
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    var g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    band.draw(g, gantt, 0, h);
  };
  $("dask-bands").addEventListener("mousemove", hover);
})();
