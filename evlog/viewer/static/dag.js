/* The task graph, drawn as plain SVG: tasks in layers from left (no dependencies) to right (longest
   path), ordered within a layer by the mean position of their dependencies. Colour: task prefix; red
   outline: erred; black outline and edges: the report's critical path. Labels: the prefix in bold and
   a short key (the key in full on hover). In a graph with many edges they are drawn faint, and a
   task's own edges are drawn in full while the pointer is on it. Click a task for its story. Large
   graphs arrive grouped by prefix (server side). */
"use strict";
(function () {
  var NS = "http://www.w3.org/2000/svg";
  var COL = 180, ROW = 22, W = 150, H = 16, PAD = 10, DENSE = 120;

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
    // a task without dependencies goes just before its first dependent (not all in the first column),
    // so its edges stay short
    for (i = 0; i < n; i++) {
      if (!preds[i].length && succ[i].length) {
        layer[i] = Math.max(0, Math.min.apply(null, succ[i].map(function (w) { return layer[w]; })) - 1);
      }
    }
    var layers = [], pos = new Array(n);
    order.forEach(function (v) { (layers[layer[v]] = layers[layer[v]] || []).push(v); });
    for (i = 0; i < layers.length; i++) layers[i] = layers[i] || [];
    layers.forEach(function (vs) { vs.forEach(function (v, j) { pos[v] = j; }); });
    // barycentre sweeps: down (by dependencies), up (by dependents), down again
    function sweep(li, nb) {
      var vs = layers[li], bary = {};
      vs.forEach(function (v) {
        var ps = nb[v];
        bary[v] = ps.length ? ps.reduce(function (a, p) { return a + pos[p]; }, 0) / ps.length : pos[v];
      });
      vs.sort(function (a, b) { return bary[a] - bary[b] || pos[a] - pos[b]; });
      vs.forEach(function (v, j) { pos[v] = j; });
    }
    for (i = 1; i < layers.length; i++) sweep(i, preds);
    for (i = layers.length - 2; i >= 0; i--) sweep(i, succ);
    for (i = 1; i < layers.length; i++) sweep(i, preds);
    return { layer: layer, pos: pos, layers: layers };
  }

  /** What tells a task apart from others of its prefix: "(3, 1)" of "('getitem-<hash>', 3, 1)", "17" of
      "work-17", "…a3f9c2" of "inc-<32 hex digits>". */
  function shortKey(key, prefix) {
    var k = String(key), m = /^\(\s*['"]([^'"]*)['"]\s*,\s*(.*)\)$/.exec(k);
    if (m) return "(" + m[2] + ")";
    var rest = prefix && k.indexOf(prefix) === 0 ? k.slice(prefix.length).replace(/^[-_]/, "") : k;
    if (/^[0-9a-f]{16,}$/i.test(rest)) return "…" + rest.slice(-6);
    return rest.length > 16 ? "…" + rest.slice(-15) : rest;
  }
  EV.shortKey = shortKey;

  function label(node, mode, g) {
    var t = svg("text", { x: 4, y: 12 });
    var b = svg("tspan", { "font-weight": 600 });
    var p = node.prefix || "";
    b.textContent = p.length > 14 ? p.slice(0, 13) + "…" : p;
    t.appendChild(b);
    var rest = mode === "prefixes" ? " ×" + node.count : (p ? " " + shortKey(node.key, p) : shortKey(node.key, ""));
    if (rest.trim()) { var r = svg("tspan", {}); r.textContent = rest; t.appendChild(r); }
    g.appendChild(t);
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
    var g = svg("g", {}), edgesOf = [];
    for (var v = 0; v < n; v++) edgesOf.push([]);
    el.classList.toggle("dense", data.edges.length > DENSE);
    data.edges.forEach(function (e) {
      var a = xy(e[0]), b = xy(e[1]), x0 = a[0] + W, y0 = a[1] + H / 2, x1 = b[0], y1 = b[1] + H / 2, mx = (x0 + x1) / 2;
      var path = svg("path", { "class": "edge", "data-from": e[0], "data-to": e[1],
        d: "M" + x0 + "," + y0 + " C" + mx + "," + y0 + " " + mx + "," + y1 + " " + x1 + "," + y1,
        "stroke-width": e[2] ? Math.min(1 + Math.log(e[2]), 5) : 1 });
      edgesOf[e[0]].push(path); edgesOf[e[1]].push(path);
      g.appendChild(path);
    });
    data.nodes.forEach(function (node, v) {
      var p = xy(v);
      var faded = worker && data.mode === "tasks" && node.worker !== worker;
      var grp = svg("g", { "class": "node" + (faded ? " faded" : ""), "data-key": node.key, transform: "translate(" + p[0] + "," + p[1] + ")" });
      grp.appendChild(svg("rect", { width: W, height: H, rx: 3, fill: EV.prefixColour(node.prefix, true),
        stroke: node.error ? "#d0312d" : EV.prefixColour(node.prefix), "stroke-width": node.error ? 2 : 1 }));
      label(node, data.mode, grp);
      var full = data.mode === "prefixes" ? node.prefix + " ×" + node.count : node.key;
      var title = svg("title", {}); title.textContent = full + (node.worker ? " on " + node.worker : ""); grp.appendChild(title);
      if (data.mode === "tasks") grp.addEventListener("click", function () { onPick({ key: node.key }); });
      grp.addEventListener("mouseenter", function () {
        el.classList.add("hovering");
        edgesOf[v].forEach(function (p) { p.classList.add("hot"); });
      });
      grp.addEventListener("mouseleave", function () {
        el.classList.remove("hovering");
        edgesOf[v].forEach(function (p) { p.classList.remove("hot"); });
      });
      g.appendChild(grp);
    });
    el.appendChild(g);
    EV.markDag(el);
  };

  /** Mark the report's critical path: its tasks, and the edges between two of them. */
  EV.markDag = function (el) {
    el = el || document.getElementById("dag");
    var keys = EV.criticalKeys || null, marked = 0, idx = {};
    Array.prototype.forEach.call(el.querySelectorAll(".node"), function (node, i) {
      var on = !!(keys && keys.has(node.getAttribute("data-key")));
      node.classList.toggle("critical", on);
      idx[i] = on;
      if (on) marked++;
    });
    Array.prototype.forEach.call(el.querySelectorAll(".edge"), function (p) {
      p.classList.toggle("critical", !!(idx[p.getAttribute("data-from")] && idx[p.getAttribute("data-to")]));
    });
    el.setAttribute("data-critical", marked);
  };
})();
