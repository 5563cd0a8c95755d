/* Line plots (uPlot): worker and processor saturation as step functions from the task spans, the
   consumers' sampled gauges per process, and the console-metadata graphs whose x axis the server chose
   ("progress", else "epoch", else the cluster-job-logging rules). Legends are compact: a plot of one
   series per worker is one small chart per worker, named above it, with one legend for the plot (its
   series' colours) rather than one per chart; the machine's own figures are one series per host. A plot is updated in place while its
   series stay the same, and rebuilt when they change. The time plots share the Gantt's time range (its
   zoom, EV.timeRange) and its clock; dragging across one zooms the Gantt and every plot. */
"use strict";
(function () {
  var HEIGHT = 200;
  var charts = {};  // id -> {u, sig}

  function widthOf(el) { return Math.max(260, (el.clientWidth || 420) - 4); }

  function upsert(id, holder, sig, makeOpts, data, plot) {
    var c = charts[id];
    if (c && c.sig === sig && c.holder === holder && document.body.contains(holder)) {
      c.u.setData(data);
      return c.u;
    }
    if (c) c.u.destroy();
    holder.innerHTML = "";
    var u = new uPlot(makeOpts(widthOf(holder)), data, holder);
    charts[id] = { u: u, sig: sig, holder: holder, plot: plot };
    return u;
  }

  function drop(id) { if (charts[id]) { charts[id].u.destroy(); delete charts[id]; } }

  var stepped = uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : null;

  /** A y axis as wide as its longest label ("33.320 MB" needs more room than "2"). */
  function axisSize(u, values) {
    var longest = (values || []).reduce(function (a, v) { return Math.max(a, String(v).length); }, 0);
    return Math.max(40, Math.min(110, 7 * longest + 18));
  }

  /** The x axis of a time plot: the Gantt's range and clock, drag to zoom everything. */
  function timeAxis(unit) {
    return {
      scales: { x: { time: false, range: function (u, min, max) { return EV.timeRange ? EV.timeRange.slice() : [min, max]; } } },
      axes: [
        { splits: function (u, i, min, max) {  // the Gantt's ticks: round instants of the page's clock
          return EV.ticks(min, max, EV.tickCount(u.width - 64));
        }, values: function (u, splits) {
          var sc = u.scales.x, step = EV.tickStep(sc.min, sc.max, EV.tickCount(u.width - 64));
          return splits.map(function (v) { return EV.tick(v, step); });
        } },
        { size: axisSize, values: function (u, vals) { return EV.axisNumbers(vals, unit); } },
      ],
      cursor: { drag: { x: true, y: false, setScale: false } },
      hooks: { setSelect: [function (u) {
        if (u.select.width > 4 && EV.zoomTo) {
          EV.zoomTo(u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x"));
        }
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      }] },
    };
  }

  /** Every time plot to the Gantt's range (after the Gantt or the plots changed). */
  EV.syncPlots = function () {
    Object.keys(charts).forEach(function (id) {
      var c = charts[id];
      if (id.indexOf("plot:") === 0 && EV.timeRange) c.u.setScale("x", { min: EV.timeRange[0], max: EV.timeRange[1] });
    });
  };

  /** {metric name: [x min, x max]} of the time plots drawn (what a reader, or a test, sees). */
  EV.plotRanges = function () {
    var out = {};
    Object.keys(charts).forEach(function (id) {
      if (id.indexOf("plot:") === 0) out[charts[id].plot] = [charts[id].u.scales.x.min, charts[id].u.scales.x.max];
    });
    return out;
  };

  /** {metric name: [worker, ...]}: the plots drawn one small chart per worker. */
  EV.plotWorkers = function () {
    var out = {};
    Object.keys(charts).forEach(function (id) {
      var c = charts[id];
      if (id.indexOf("plot:") === 0 && c.worker !== undefined) (out[c.plot] = out[c.plot] || []).push(c.worker);
    });
    return out;
  };

  /** The clock changed: time plots are drawn again. */
  EV.resetPlots = function () {
    Object.keys(charts).forEach(function (id) { if (id.indexOf("plot:") === 0) drop(id); });
  };

  /** The consumers' gauges: one uPlot per metric, one series per process. */
  EV.renderPlots = function (root, plots) {
    var seen = {};
    plots.forEach(function (p) {
      var id = "plot:" + p.name;
      seen[id] = true;
      var box = root.querySelector('[data-plot="' + p.name + '"]');
      if (!box) {
        box = EV.el("div", { "class": "plot", "data-plot": p.name }, [
          EV.el("h3"), EV.el("div", { "class": "holder" }), EV.el("div", { "class": "hint" })]);
        root.appendChild(box);
      }
      var h3 = box.querySelector("h3");  // the title of this run's data (Bytes held / Bytes allocated)
      h3.innerHTML = "";
      h3.appendChild(document.createTextNode(p.title + " "));
      h3.appendChild(EV.el("span", { "class": "muted" }, p.unit));
      var holder = box.querySelector(".holder");
      box.querySelector(".hint").textContent = p.note || "";
      box.classList.toggle("wide", !!p.per_worker);
      if (p.per_worker && p.x.length) { perWorker(p, holder, seen); return; }
      Object.keys(charts).forEach(function (cid) { if (charts[cid].plot === p.name && cid !== id) drop(cid); });
      if (!p.x.length) {
        drop(id);
        holder.innerHTML = "";
        holder.appendChild(EV.el("div", { "class": "empty" }, "no " + p.name + " points yet"));
        return;
      }
      var scale = p.name === "evlog.memory.free_fraction" ? 100 : 1;
      var data = [p.x].concat(p.series.map(function (s) {
        return scale === 1 ? s.values : s.values.map(function (v) { return v === null ? null : v * scale; });
      }));
      var sig = p.series.map(function (s) { return s.label; }).join("|") + (p.steps ? "|steps" : "") + "|" + EV.tz;
      upsert(id, holder, sig, function (w) {
        var t = timeAxis(p.unit);
        if (p.max) t.scales.y = { range: [0, p.max] };
        return {
          width: w, height: HEIGHT, scales: t.scales, axes: t.axes, cursor: t.cursor, hooks: t.hooks,
          padding: [8, 44, 0, 0],  // room for the last tick's label (12 characters, centred)
          series: [{ label: "time", value: function (u, v) { return v === null || v === undefined ? "-" : EV.clock(v, true); } }].concat(p.series.map(function (s) {
            // a series of a few samples (the exporter's at the run's start and end) shows them as dots, not a line
            var sparse = s.values.filter(function (v) { return v !== null && v !== undefined; }).length <= 3;
            var o = { label: s.label, stroke: EV.colour(s.label), width: 1.5, spanGaps: !sparse,
              points: sparse ? { show: true, size: 7 } : { show: false },
              value: function (u, v) { return v === null || v === undefined ? "-" : EV.short(v, p.unit); } };
            if (p.steps && stepped) o.paths = stepped;
            return o;
          })),
          legend: { live: true },
        };
      }, data, p.name);
    });
    Object.keys(charts).forEach(function (id) {
      if (id.indexOf("plot:") === 0 && !seen[id]) drop(id);
    });
    Array.prototype.forEach.call(root.querySelectorAll(".plot"), function (box) {
      if (!seen["plot:" + box.getAttribute("data-plot")]) box.remove();
    });
  };

  var MAX_WORKER_CHARTS = 16;
  var MEMORY_COLOURS = { managed: "#4e79a7", unmanaged: "#a0cbe8", spilled: "#f28e2b" };

  /** A plot of one series per worker, drawn as one small chart per worker, one above the other, on the
      same x and y scale: side by side, no worker's line hides another's. Saturation: the worker's busy
      threads (y up to its thread count) or their share; memory: managed, unmanaged and spilled stacked. */
  function perWorker(p, holder, seen) {
    var groups = {}, order = [];
    p.series.forEach(function (s) {
      var w = s.worker || s.label;
      if (!groups[w]) { groups[w] = []; order.push(w); }
      groups[w].push(s);
    });
    var top = p.max || 0;
    if (!top) p.series.forEach(function (s) {  // a shared y scale: the largest value (memory: the stack's top)
      var vals = p.stacked ? stackOf(groups[s.worker || s.label]).slice(-1)[0] : s.values;
      vals.forEach(function (v) { if (v !== null && v > top) top = v; });
      if (s.threads && s.threads > top) top = s.threads;
    });
    var keep = {}, all = order.length;
    order = order.slice(0, MAX_WORKER_CHARTS);  // a big cluster: the first ones; the selector picks any
    order.forEach(function (w) {
      var id = "plot:" + p.name + "@" + w;
      keep[id] = seen[id] = true;
      var sub = holder.querySelector('[data-worker="' + CSS.escape(w) + '"]');
      if (!sub) {
        sub = EV.el("div", { "class": "worker-plot", "data-worker": w }, [EV.el("div", { "class": "worker-name" }), EV.el("div", { "class": "holder" })]);
        holder.appendChild(sub);
      }
      holder.appendChild(sub);  // in order
      var ss = groups[w], threads = ss[0].threads;
      sub.querySelector(".worker-name").textContent = w + (threads ? " · " + threads + " thread" + (threads === 1 ? "" : "s") : "");
      // stacked (memory): the stack's tops, the topmost drawn first so each band shows below the next
      var stack = p.stacked ? stackOf(ss) : null;
      var drawn = ss.map(function (s, k) { return { s: s, vals: stack ? stack[k] : s.values }; });
      if (stack) drawn.reverse();
      var sig = ss.map(function (s) { return s.label; }).join("|") + "|" + top + "|" + EV.tz + "|" + order.length;
      upsert(id, sub.querySelector(".holder"), sig, function (width) {
        var t = timeAxis(p.unit);
        t.scales.y = { range: [0, top || 1] };
        return {
          width: width, height: Math.max(70, Math.min(120, Math.floor(260 / order.length))), scales: t.scales, axes: t.axes,
          cursor: t.cursor, hooks: t.hooks, padding: [4, 44, 0, 0],
          series: [{}].concat(drawn.map(function (d) {
            var colour = stack ? MEMORY_COLOURS[d.s.label] || EV.colour(d.s.label) : EV.colour(w);
            return { label: d.s.label === w ? (p.name === "evlog.processor.saturation" ? "busy" : "running") : d.s.label,
              stroke: colour, fill: stack ? colour : colour.replace("hsl(", "hsla(").replace(")", ",.18)"),
              width: 1.5, spanGaps: true, points: { show: false }, paths: p.steps && stepped ? stepped : undefined,
              value: function (u, v, si, di) {  // a band of the stack shows its own value, not the stack's top
                var own = d.s.values[di];
                return own === null || own === undefined ? "-" : EV.short(own, p.unit);
              } };
          })),
          legend: { show: false },  // the worker is named above the chart; the plot's series, once below
        };
      }, [p.x].concat(drawn.map(function (d) { return d.vals; })), p.name);
      charts[id].worker = w;
    });
    var labels = [];
    p.series.forEach(function (s) {  // series other than the worker itself (memory: managed, unmanaged, spilled)
      if (s.worker && s.label !== s.worker && labels.indexOf(s.label) < 0) labels.push(s.label);
    });
    Object.keys(charts).forEach(function (cid) {
      if (charts[cid].plot === p.name && !keep[cid]) drop(cid);
    });
    Array.from(holder.querySelectorAll(".worker-plot")).forEach(function (sub) {
      if (!keep["plot:" + p.name + "@" + sub.getAttribute("data-worker")]) sub.remove();
    });
    Array.from(holder.children).forEach(function (c) { if (!c.classList.contains("worker-plot")) c.remove(); });
    if (labels.length) holder.appendChild(EV.el("div", { "class": "legend" }, labels.map(function (k) {
      return EV.el("span", { "data-series": k }, [EV.el("i", { style: "background:" + (MEMORY_COLOURS[k] || EV.colour(k)) }), k]);
    })));
    if (all > order.length) holder.appendChild(EV.el("div", { "class": "hint" }, "the first " + order.length + " of " + all +
      " workers; the worker selector shows any one"));
  }

  /** Running sums of one worker's series (managed, managed + unmanaged, ... ): the tops of the stack. */
  function stackOf(ss) {
    var acc = null;
    return ss.map(function (s) {
      acc = s.values.map(function (v, i) { return (acc ? acc[i] || 0 : 0) + (v || 0); });
      return acc;
    });
  }

  /** Click: show only this series (click it again: all). Ctrl/Cmd+click: turn this one on or off. */
  function legend(u, keys, el) {
    var shown = keys.map(function () { return true; });
    function apply() {
      shown.forEach(function (s, i) { u.setSeries(i + 1, { show: s }); });
      Array.prototype.forEach.call(el.children, function (c, i) { c.classList.toggle("off", !shown[i]); });
    }
    keys.forEach(function (k, i) {
      var item = EV.el("span", { "data-series": k, title: "click: only this; Ctrl+click: on/off" },
        [EV.el("i", { style: "background:" + EV.colour(k) }), k]);
      item.addEventListener("click", function (e) {
        if (e.ctrlKey || e.metaKey) {
          shown[i] = !shown[i];
        } else {
          var solo = shown[i] && shown.filter(Boolean).length === 1;
          shown = shown.map(function (_, j) { return solo || j === i; });
        }
        apply();
      });
      el.appendChild(item);
    });
  }

  /** Console metadata: per process, a graph by the chosen x (or time) and a newest-first table. */
  EV.renderMetadata = function (root, graphs) {
    var keep = {};
    graphs.forEach(function (g, n) {
      var id = "meta:" + g.process;
      keep[id] = true;
      var box = root.querySelector('[data-meta="' + CSS.escape(g.process) + '"]');
      if (!box) {
        box = EV.el("div", { "class": "meta-graph", "data-meta": g.process }, [
          EV.el("h3"), EV.el("div", { "class": "holder" }), EV.el("div", { "class": "legend clickable" }),
          EV.el("div", { "class": "scroll table" })]);
        root.appendChild(box);
      }
      box.querySelector("h3").textContent = g.process + " · " + g.count + " records · x axis: " + (g.x || "time");
      var keys = Object.keys(g.series);
      var holder = box.querySelector(".holder"), leg = box.querySelector(".legend");
      var sig = (g.x || "time") + "|" + keys.join("|");
      if (!keys.length || !g.xs.length) {
        drop(id); holder.innerHTML = ""; leg.innerHTML = "";
      } else {
        var data = [g.xs].concat(keys.map(function (k) { return g.series[k]; }));
        var before = charts[id] && charts[id].sig;
        var u = upsert(id, holder, sig, function (w) {
          return {
            width: w, height: 240, scales: { x: { time: !g.x } },
            series: [{ label: g.x || "time" }].concat(keys.map(function (k) {
              return { label: k, stroke: EV.colour(k), width: 1.5, spanGaps: true };
            })),
            axes: [{ label: g.x || "" }, { size: 60 }],
            legend: { show: false },
          };
        }, data);
        if (before !== sig) { leg.innerHTML = ""; legend(u, keys, leg); }
      }
      var tbl = box.querySelector(".table");
      tbl.innerHTML = "";
      tbl.appendChild(EV.table(["time", "metadata"], g.table.map(function (r) {
        return [EV.clock(r.time, true), EV.msg(r.body)];
      })));
    });
    Array.prototype.forEach.call(root.querySelectorAll(".meta-graph"), function (box) {
      var id = "meta:" + box.getAttribute("data-meta");
      if (!keep[id]) { drop(id); box.remove(); }
    });
  };

  EV.resizePlots = function () {
    Object.keys(charts).forEach(function (id) {
      var c = charts[id];
      c.u.setSize({ width: widthOf(c.holder), height: c.u.height });
    });
  };
  window.addEventListener("resize", function () { EV.resizePlots(); });
})();
