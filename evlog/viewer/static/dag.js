/* The task graph, drawn as plain SVG: tasks in layers from left (no dependencies) to right (longest
   path), ordered within a layer by the mean position of their dependencies. Colour: task prefix; red
   outline: erred. Click a task for its story. Large graphs arrive grouped by prefix (server side). */
"use strict";
(function () {
  var NS = "http://www.w3.org/2000/svg";
  var COL = 150, ROW = 22, W = 120, H = 16, PAD = 10;

  function svg(tag, attrs) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }

  function layout(n, edges) {
    var preds = [], succ = [], indeg = [], layer = [];
    for (var i = 0; i < n; i++) { preds.push([]); succ.push([]); indeg.push(0); layer.push(0); }
    edges.forEach(function (e) { succ[e[0]].push(e[1]); preds[e[1]].push(e[0]); indeg[e[1]]++; });
    var queue = [], order = [];
    for (i = 0; i < n; i++) if (!indeg[i]) queue.push(i);
    while (queue.length) {
      var v = queue.shift(); order.push(v);
      succ[v].forEach(function (w) { layer[w] = Math.max(layer[w], layer[v] + 1); if (!--indeg[w]) queue.push(w); });
    }
    if (order.length < n) for (i = 0; i < n; i++) if (indeg[i] > 0) order.push(i);  // a cycle: leave in place
    var layers = [], pos = new Array(n);
    order.forEach(function (v) { (layers[layer[v]] = layers[layer[v]] || []).push(v); });
    layers.forEach(function (vs, li) {
      if (li > 0) {
        var bary = {};
        vs.forEach(function (v) {
          var ps = preds[v];
          bary[v] = ps.length ? ps.reduce(function (a, p) { return a + pos[p]; }, 0) / ps.length : 1e9;
        });
        vs.sort(function (a, b) { return bary[a] - bary[b]; });
      }
      vs.forEach(function (v, i) { pos[v] = i; });
    });
    return { layer: layer, pos: pos, layers: layers };
  }

  EV.renderDag = function (el, data, worker, onPick) {
    while (el.firstChild) el.removeChild(el.firstChild);
    var n = data.nodes.length;
    if (!n) {
      el.setAttribute("width", 300); el.setAttribute("height", 30);
      var t = svg("text", { x: 4, y: 18 }); t.textContent = "No task dependencies recorded."; el.appendChild(t);
      return;
    }
    var L = layout(n, data.edges);
    var rows = L.layers.reduce(function (m, vs) { return Math.max(m, vs.length); }, 0);
    el.setAttribute("width", PAD * 2 + L.layers.length * COL);
    el.setAttribute("height", PAD * 2 + rows * ROW);
    var xy = function (v) { return [PAD + L.layer[v] * COL, PAD + L.pos[v] * ROW]; };
    var g = svg("g", {});
    data.edges.forEach(function (e) {
      var a = xy(e[0]), b = xy(e[1]), x0 = a[0] + W, y0 = a[1] + H / 2, x1 = b[0], y1 = b[1] + H / 2, mx = (x0 + x1) / 2;
      g.appendChild(svg("path", { "class": "edge", d: "M" + x0 + "," + y0 + " C" + mx + "," + y0 + " " + mx + "," + y1 + " " + x1 + "," + y1,
        "stroke-width": e[2] ? Math.min(1 + Math.log(e[2]), 5) : 1 }));
    });
    data.nodes.forEach(function (node, v) {
      var p = xy(v);
      var faded = worker && data.mode === "tasks" && node.worker !== worker;
      var grp = svg("g", { "class": "node" + (faded ? " faded" : ""), "data-key": node.key, transform: "translate(" + p[0] + "," + p[1] + ")" });
      grp.appendChild(svg("rect", { width: W, height: H, rx: 3, fill: EV.colour(node.prefix, true),
        stroke: node.error ? "#d0312d" : EV.colour(node.prefix), "stroke-width": node.error ? 2 : 1 }));
      var label = data.mode === "prefixes" ? node.prefix + " ×" + node.count : node.key;
      var txt = svg("text", { x: 4, y: 12 }); txt.textContent = label.length > 22 ? label.slice(0, 21) + "…" : label;
      grp.appendChild(txt);
      var title = svg("title", {}); title.textContent = label + (node.worker ? " on " + node.worker : ""); grp.appendChild(title);
      if (data.mode === "tasks") grp.addEventListener("click", function () { onPick({ key: node.key }); });
      g.appendChild(grp);
    });
    el.appendChild(g);
  };
})();
