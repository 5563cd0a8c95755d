/* Line plots (uPlot): the consumers' gauges per process, and the console-metadata graphs whose x axis
   the server chose ("progress", else "epoch", else the cluster-job-logging rules). A plot is updated in
   place while its series stay the same, and rebuilt when they change. */
"use strict";
(function () {
  var HEIGHT = 200;
  var charts = {};  // id -> {u, sig}

  function widthOf(el) { return Math.max(260, (el.clientWidth || 420) - 4); }

  function upsert(id, holder, sig, makeOpts, data) {
    var c = charts[id];
    if (c && c.sig === sig && c.holder === holder && document.body.contains(holder)) {
      c.u.setData(data);
      return c.u;
    }
    if (c) c.u.destroy();
    holder.innerHTML = "";
    var u = new uPlot(makeOpts(widthOf(holder)), data, holder);
    charts[id] = { u: u, sig: sig, holder: holder };
    return u;
  }

  function drop(id) { if (charts[id]) { charts[id].u.destroy(); delete charts[id]; } }

  /** The consumers' gauges: one uPlot per metric, one series per process. */
  EV.renderPlots = function (root, plots) {
    var seen = {};
    plots.forEach(function (p) {
      var id = "plot:" + p.name;
      seen[id] = true;
      var box = root.querySelector('[data-plot="' + p.name + '"]');
      if (!box) {
        box = EV.el("div", { "class": "plot", "data-plot": p.name }, [
          EV.el("h3", {}, [p.title + " ", EV.el("span", { "class": "muted" }, p.unit)]),
          EV.el("div", { "class": "holder" }), EV.el("div", { "class": "hint" })]);
        root.appendChild(box);
      }
      var holder = box.querySelector(".holder");
      box.querySelector(".hint").textContent = p.note || "";
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
      var sig = p.series.map(function (s) { return s.label; }).join("|");
      upsert(id, holder, sig, function (w) {
        return {
          width: w, height: HEIGHT, scales: { x: { time: true } },
          series: [{}].concat(p.series.map(function (s) {
            return { label: s.label, stroke: EV.colour(s.label), width: 1.5, spanGaps: true, points: { show: false } };
          })),
          axes: [{}, { size: 60 }],
          legend: { live: true },
        };
      }, data);
    });
    Object.keys(charts).forEach(function (id) {
      if (id.indexOf("plot:") === 0 && !seen[id]) drop(id);
    });
    Array.prototype.forEach.call(root.querySelectorAll(".plot"), function (box) {
      if (!seen["plot:" + box.getAttribute("data-plot")]) box.remove();
    });
  };

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
