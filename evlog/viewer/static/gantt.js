/* The Gantt chart: one row per worker and thread, one bar per task (colour: task prefix, from a
   categorical palette; errors in red outline with a marker; the report's critical path outlined in
   black), or, for large runs, how busy each row was per time bin. Below each Dask worker's threads, a
   lane of its transfers: data it fetched from other workers (upper half, blue) and data others fetched
   from it (lower half, orange).

   Shading is absolute at every zoom: the plot is drawn one pixel column at a time, each column shaded by
   the share of its time the row was busy (white: idle, the prefix's full colour: busy throughout; the
   hue is the column's main prefix). A bar narrower than a pixel is drawn as its share of the pixel, and
   time bins are the share of the bin a task ran, so a row 10% busy reads as 10% ink whether it shows
   six bars or six million spans. Lane labels: worker above thread, fitted to the gutter, in full on
   hover. Canvas, so tens of thousands of bars draw in milliseconds. Drag to zoom in; click a bar for the
   task's story.

   Bands: ``gantt.addBand({id, height: function (gantt) -> px, draw: function (g, gantt, top, height)})``
   adds a layer above the lanes (drawn in the order added, on the Gantt's time axis: ``gantt.x(t)`` is a
   time's x, ``gantt.plotLeft`` and ``gantt.plotWidth`` the plot area); the lanes move down by the bands'
   heights, and hit tests and labels follow. */
"use strict";
(function () {
  var GUTTER = 230, AXIS = 22, TWO_LINES = 26;
  var IN = 0, TRANSFER_COLOURS = ["#2c7fb8", "#d95f0e"];  // data fetched by the worker, data fetched from it

  function Gantt(canvas, tip, onPick, onZoom) {
    this.canvas = canvas; this.tip = tip; this.onPick = onPick; this.onZoom = onZoom;
    this.data = null; this.laneH = 16; this.byLane = []; this.marked = null; this.bands = []; this.top = 0;
    var self = this, down = null;
    canvas.addEventListener("mousedown", function (e) { down = self._pos(e); self.drag = null; });
    canvas.addEventListener("mousemove", function (e) {
      var p = self._pos(e);
      if (down && Math.abs(p.x - down.x) > 4) { self.drag = [down.x, p.x]; self.draw(); }
      self._hover(p);
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    window.addEventListener("mouseup", function (e) {
      if (!down) return;
      var p = self._pos(e), start = down; down = null;
      if (self.drag) {
        var a = Math.min(self.drag[0], self.drag[1]), b = Math.max(self.drag[0], self.drag[1]);
        self.drag = null;
        if (b - a > 4 && self.data) self.onZoom(self._t(a), self._t(b));
        self.draw();
      } else if (Math.abs(p.x - start.x) <= 4 && e.target === canvas) {
        var hit = self.hit(p);
        if (hit) self.onPick(hit);
      }
    });
    window.addEventListener("resize", function () { self.draw(); });
  }

  /** A lane's worker (or process) and thread, in full: "tcp://127.0.0.1:35503", "0-Dask-Default-Threads-5908-0 +1". */
  function laneParts(lane) {
    if (lane.transfers) return [lane.worker, "transfers: fetched in ▲ / out ▼"];
    return [lane.worker, (lane.thread || "") + (lane.sub ? " +" + lane.sub : "")];
  }
  function laneLabel(lane) {
    var p = laneParts(lane);
    return p[0] + (p[1] ? " · " + p[1] : "");
  }

  /** The text cut to fit ``width`` px: from the left (the end of a name tells threads and ports apart). */
  function fit(g, text, width) {
    if (g.measureText(text).width <= width) return text;
    var lo = 0, hi = text.length;
    while (lo < hi) {  // the longest tail that fits after "…"
      var mid = (lo + hi) >> 1;
      if (g.measureText("…" + text.slice(mid)).width <= width) hi = mid; else lo = mid + 1;
    }
    return "…" + text.slice(lo);
  }

  /** "127.0.0.1:35503 · …Threads-5908-0" when the whole does not fit: the worker kept, the thread
      cut from the left (its end tells threads apart); a worker too long is cut from the left too. */
  function oneLine(g, parts, room) {
    var w = parts[0].replace(/^tcp:\/\//, ""), t = parts[1];
    if (!t) return fit(g, w, room);
    var head = w + " · ", left = room - g.measureText(head).width;
    if (left >= g.measureText("…0000-0").width) return head + fit(g, t, left);
    return fit(g, head + t, room);
  }

  Gantt.prototype._pos = function (e) {
    var r = this.canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };
  Gantt.prototype._x = function (t) {
    var d = this.data;
    return GUTTER + (t - d.t0) / Math.max(d.t1 - d.t0, 1e-9) * this.plotWidth;
  };
  Gantt.prototype.x = Gantt.prototype._x;
  Gantt.prototype._t = function (x) {
    var d = this.data;
    return d.t0 + (x - GUTTER) / this.plotWidth * (d.t1 - d.t0);
  };
  Gantt.prototype.plotLeft = GUTTER;
  /** The plot's width in whole pixels (a column per pixel); known before the first draw, for the bins asked. */
  Gantt.prototype.columns = function () {
    return Math.max(1, Math.floor((this.canvas.parentNode.clientWidth || 800) - GUTTER - 8));
  };
  /** A layer above the lanes (see the top of this file). */
  Gantt.prototype.addBand = function (band) {
    this.bands = this.bands.filter(function (b) { return b.id !== band.id; }).concat([band]);
    if (this.data) this.draw();
  };
  /** The lane under a y (page coordinates of the canvas), or -1. */
  Gantt.prototype.laneAt = function (y) {
    var lane = Math.floor((y - this.top) / this.laneH);
    return y >= this.top && this.data && lane < this.data.lanes.length ? lane : -1;
  };
  /** The y of the top of lane i. */
  Gantt.prototype.laneY = function (i) { return this.top + i * this.laneH; };

  Gantt.prototype.set = function (data) {
    this.data = data;
    this.byLane = data.lanes.map(function () { return []; });
    this.transfersByLane = data.lanes.map(function () { return []; });
    if (data.mode === "bars") {
      for (var i = 0; i < data.bars.length; i++) this.byLane[data.bars[i][2]].push(i);
      (data.transfers || []).forEach(function (tr, k) { this.transfersByLane[tr[2]].push(k); }, this);
    }
    this.canvas.setAttribute("data-bars", data.mode === "bars" ? data.bars.length : 0);
    this.canvas.setAttribute("data-mode", data.mode || "");
    this.canvas.setAttribute("data-lanes", data.lanes.length);
    if (EV.seePrefixes) EV.seePrefixes(data.prefixes);
    this.draw();
  };

  /** Outline the bars of these span row ids (the report's critical path); null: none. ``spans``
      ([id, start, end, worker, thread]) mark them when the chart draws time bins instead of bars. */
  Gantt.prototype.mark = function (ids, spans) {
    this.marked = ids && ids.length ? new Set(ids) : null;
    this.markedSpans = this.marked ? spans || [] : [];
    if (this.data) this.draw();
  };

  /** The time axis as drawn: [[seconds, label], ...]. */
  Gantt.prototype.ticks = function () { return this.drawnTicks || []; };

  /** The lanes' labels as drawn (tests and the tooltip): [{full, lines: [text, ...]}]. */
  Gantt.prototype.labels = function () { return this.drawnLabels || []; };

  Gantt.prototype.draw = function () {
    var c = this.canvas, d = this.data, dpr = window.devicePixelRatio || 1;
    this.width = c.parentNode.clientWidth || 800;
    this.plotWidth = Math.max(1, Math.floor(this.width - GUTTER - 8));
    var n = d ? d.lanes.length : 0, self = this;
    this.laneH = n ? (n <= 20 ? TWO_LINES : Math.max(3, Math.min(18, Math.floor(560 / n)))) : 18;
    var heights = d ? this.bands.map(function (b) { return Math.max(0, Math.round(b.height(self) || 0)); }) : [];
    this.top = heights.reduce(function (a, h) { return a + h; }, 0);
    var h = Math.max(60, this.top + n * this.laneH + AXIS + 4);
    c.style.height = h + "px";
    c.width = Math.round(this.width * dpr); c.height = Math.round(h * dpr);
    var g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#fff"; g.fillRect(0, 0, this.width, h);  // the ground a shade is of: idle is white
    g.font = "11px system-ui, sans-serif";
    if (!d || !n) {
      g.fillStyle = "#6b7385"; g.fillText("No task spans yet.", GUTTER, 30);
      return;
    }
    var y = 0;
    this.bands.forEach(function (b, i) {
      if (!heights[i]) return;
      g.save(); b.draw(g, self, y, heights[i]); g.restore();
      y += heights[i];
    });
    this._labels(g);
    var colours = d.prefixes.map(function (p) { return EV.prefixColour(p); });
    c.setAttribute("data-critical", 0);
    if (d.mode === "bars") {
      this._columns(g, colours);
      this._barMarks(g);
    } else if (d.mode === "aggregated") {
      this._bins(g, colours);
    }
    this._axis(g);
    if (this.drag) {
      g.fillStyle = "rgba(91,141,239,.18)";
      g.fillRect(Math.min(this.drag[0], this.drag[1]), this.top, Math.abs(this.drag[1] - this.drag[0]), n * this.laneH);
    }
  };

  /** Lane labels (worker above thread when there is room, else "worker · thread" cut from the left), on
      stripes in the gutter; a line between workers across the plot. */
  Gantt.prototype._labels = function (g) {
    var d = this.data, lh = this.laneH, room = GUTTER - 10;
    this.drawnLabels = [];
    for (var i = 0; i < d.lanes.length; i++) {
      var lane = d.lanes[i], y = this.laneY(i), parts = laneParts(lane), lines = [];
      var first = !i || d.lanes[i - 1].worker !== lane.worker;
      if (i % 2) { g.fillStyle = "#f6f7f9"; g.fillRect(0, y, GUTTER - 2, lh); }
      if (first && i) { g.fillStyle = "#dde1e7"; g.fillRect(0, y, this.width, 1); }
      if (lh >= TWO_LINES) {
        lines = [fit(g, parts[0], room), fit(g, parts[1], room)];
        g.fillStyle = first ? "#1d2330" : "#6b7385";
        g.fillText(lines[0], 4, y + 11);
        g.fillStyle = lane.transfers ? "#6b7385" : "#1d2330";
        g.fillText(lines[1], 12, y + lh - 4);
      } else if (lh >= 9) {
        lines = [oneLine(g, parts, room)];
        g.fillStyle = "#1d2330";
        g.fillText(lines[0], 4, y + lh - 3);
      }
      this.drawnLabels.push({ full: laneLabel(lane), lines: lines });
    }
  };

  /** Per lane and pixel column, the share of the column's time covered (capped at 1) and the prefix that
      covers most of it; ``items`` [[start, end, lane, colour index], ...] in seconds. */
  Gantt.prototype._coverage = function (items, lanes) {
    var d = this.data, W = this.plotWidth, per = (d.t1 - d.t0) / W, out = [];
    for (var l = 0; l < lanes; l++) out.push(null);
    for (var i = 0; i < items.length; i++) {
      var it = items[i], a = (it[0] - d.t0) / per, z = (it[1] - d.t0) / per;
      if (z <= 0 || a >= W || !(z >= a)) continue;
      var cv = out[it[2]];
      if (!cv) cv = out[it[2]] = { cover: new Float32Array(W), main: new Int32Array(W).fill(-1), most: new Float32Array(W) };
      a = Math.max(a, 0); z = Math.min(z, W);
      for (var j = Math.floor(a), last = Math.min(Math.ceil(z), W) - 1; j <= last; j++) {
        var part = Math.min(z, j + 1) - Math.max(a, j);
        if (part <= 0) continue;
        cv.cover[j] += part;
        if (part > cv.most[j]) { cv.most[j] = part; cv.main[j] = it[3]; }
      }
    }
    return out;
  };

  /** One lane's columns: runs of a full colour as one rectangle, a partly covered column as its share. */
  Gantt.prototype._fillColumns = function (g, cover, main, colours, y, height) {
    var W = cover.length;
    for (var j = 0; j < W; j++) {
      var v = Math.min(cover[j], 1);
      if (v <= 0) continue;
      var k = j + 1;
      while (k < W && Math.min(cover[k], 1) === v && main[k] === main[j]) k++;
      g.globalAlpha = v;
      g.fillStyle = main[j] >= 0 ? colours[main[j]] : "#888";
      g.fillRect(GUTTER + j, y, k - j, height);
      j = k - 1;
    }
    g.globalAlpha = 1;
  };

  Gantt.prototype._columns = function (g, colours) {
    var d = this.data, lh = this.laneH, n = d.lanes.length, self = this;
    var cov = this._coverage(d.bars.map(function (b) { return [b[0], b[1], b[2], b[3]]; }), n);
    this.drawnMain = cov.map(function (cv) { return cv ? cv.main : null; });
    cov.forEach(function (cv, l) { if (cv) self._fillColumns(g, cv.cover, cv.main, colours, self.laneY(l) + 1, lh - 2); });
    var tr = d.transfers || [], half = Math.max(1, Math.floor((lh - 2) / 2));
    [0, 1].forEach(function (dir) {
      var cv = self._coverage(tr.filter(function (t) { return t[3] === dir; }).map(function (t) { return [t[0], t[1], t[2], dir]; }), n);
      cv.forEach(function (x, l) { if (x) self._fillColumns(g, x.cover, x.main, TRANSFER_COLOURS, self.laneY(l) + 1 + dir * half, half); });
    });
  };

  /** Errors (a red outline and a flag) and the critical path (a black outline) over the bars. */
  Gantt.prototype._barMarks = function (g) {
    var d = this.data, lh = this.laneH, self = this, errs = [];
    for (var k = 0; k < d.bars.length; k++) if (d.bars[k][4]) errs.push(d.bars[k]);
    g.strokeStyle = "#d0312d"; g.fillStyle = "#d0312d"; g.lineWidth = 2;
    errs.forEach(function (b) {
      var x0 = self._x(b[0]), x1 = Math.max(self._x(b[1]), x0 + 1), y = self.laneY(b[2]);
      g.strokeRect(x0, y + 1, x1 - x0, lh - 2);
      g.beginPath(); g.moveTo(x1, y); g.lineTo(x1 + 6, y); g.lineTo(x1 + 3, y + 5); g.fill();
    });
    var marked = 0;
    if (this.marked) {  // the critical path: a black outline, and a black tick under bars too thin to outline
      g.strokeStyle = "#111"; g.fillStyle = "#111"; g.lineWidth = 2;
      for (var q = 0; q < d.bars.length; q++) {
        var mb = d.bars[q];
        if (!this.marked.has(mb[5])) continue;
        var mx0 = this._x(mb[0]), mx1 = Math.max(this._x(mb[1]), mx0 + 1), my = this.laneY(mb[2]);
        g.strokeRect(mx0 - 1, my + 1, mx1 - mx0 + 2, lh - 2);
        if (mx1 - mx0 < 4) { g.beginPath(); g.moveTo(mx0 - 3, my + lh); g.lineTo(mx1 + 3, my + lh); g.lineTo((mx0 + mx1) / 2, my + lh - 5); g.fill(); }
        marked++;
      }
    }
    this.canvas.setAttribute("data-critical", marked);
  };

  /** Time bins: each the share of its time a task ran (a transfer lane: fetched in above, out below). */
  Gantt.prototype._bins = function (g, colours) {
    var d = this.data, lh = this.laneH, n = d.lanes.length, self = this, bw = this.plotWidth / d.bins;
    var er = d.errors || [];
    function row(values, main, pal, y, height) {
      for (var j = 0; j < values.length; j++) {
        var v = Math.min(values[j], 1);
        if (v <= 0) continue;
        g.globalAlpha = v;
        g.fillStyle = main === null ? pal : main[j] >= 0 ? pal[main[j]] : "#888";
        g.fillRect(GUTTER + j * bw, y, bw, height);
      }
      g.globalAlpha = 1;
    }
    var transfer = {};
    (d.transfer_busy || []).forEach(function (t) { transfer[t[0]] = t; });
    this.drawnMain = d.main.map(function (m) {  // per pixel column, its bin's main prefix
      var out = new Int32Array(self.plotWidth);
      for (var j = 0; j < out.length; j++) out[j] = m[Math.min(m.length - 1, Math.floor(j / bw))];
      return out;
    });
    var half = Math.max(1, Math.floor((lh - 2) / 2));
    for (var l = 0; l < n; l++) {
      var y = this.laneY(l);
      if (transfer[l]) {
        row(transfer[l][1], null, TRANSFER_COLOURS[0], y + 1, half);
        row(transfer[l][2], null, TRANSFER_COLOURS[1], y + 1 + half, half);
        continue;
      }
      row(d.busy[l], d.main[l], colours, y + 1, lh - 2);
      for (var j = 0; er[l] && j < d.bins; j++) {
        if (er[l][j]) { g.fillStyle = "#d0312d"; g.fillRect(GUTTER + j * bw, y, Math.max(bw, 2), 3); }
      }
    }
    // the critical path over the bins: a black outline (at least 3 px wide) on the task's row
    var laneOf = {}, mk = 0;
    d.lanes.forEach(function (ln, li) { var k = ln.worker + "\n" + ln.thread; if (!(k in laneOf)) laneOf[k] = li; });
    g.strokeStyle = "#111"; g.lineWidth = 2;
    (this.marked ? this.markedSpans : []).forEach(function (ms) {
      var li = laneOf[ms[3] + "\n" + ms[4]];
      if (li === undefined || ms[2] < d.t0 || ms[1] > d.t1) return;
      var a = self._x(Math.max(ms[1], d.t0)), b = Math.max(self._x(Math.min(ms[2], d.t1)), a + 3);
      g.strokeRect(a - 1, self.laneY(li) + 1, b - a + 2, lh - 2);
      mk++;
    });
    this.canvas.setAttribute("data-critical", mk);
  };

  /** The time axis: round instants of the page's clock, wall-clock labels. */
  Gantt.prototype._axis = function (g) {
    var d = this.data, y0 = this.laneY(d.lanes.length) + 2;
    g.strokeStyle = "#c5cad3"; g.lineWidth = 1;
    g.beginPath(); g.moveTo(GUTTER, y0); g.lineTo(this.width - 8, y0); g.stroke();
    var parts = EV.tickCount(this.width - GUTTER), step = EV.tickStep(d.t0, d.t1, parts);
    var ticks = EV.ticks(d.t0, d.t1, parts);
    g.fillStyle = "#6b7385";
    this.drawnTicks = [];
    for (var t = 0; t < ticks.length; t++) {
      var ts = ticks[t], x = this._x(ts);
      g.beginPath(); g.moveTo(x, y0); g.lineTo(x, y0 + 4); g.stroke();
      var txt = EV.tick(ts, step), tw = g.measureText(txt).width;
      g.fillText(txt, Math.max(GUTTER - tw / 2, Math.min(x - tw / 2, this.width - tw - 2)), y0 + 15);
      this.drawnTicks.push([ts, txt]);
    }
  };

  /** The mean shade of each lane over [t0, t1] as drawn (0 white .. 1 full colour), read back from the
      canvas: each pixel column against the colour of its main prefix. What a reader sees, for tests that
      hold the drawing to the busy figures; a transfer lane: null. */
  Gantt.prototype.laneInk = function (t0, t1) {
    var d = this.data, dpr = window.devicePixelRatio || 1, g = this.canvas.getContext("2d"), self = this;
    var c0 = Math.max(0, Math.round(this._x(Math.max(t0, d.t0)) - GUTTER));
    var c1 = Math.min(this.plotWidth, Math.round(this._x(Math.min(t1, d.t1)) - GUTTER));
    var refs = d.prefixes.map(function (p) { var c = rgb(EV.prefixColour(p)); return 765 - c[0] - c[1] - c[2]; });
    return d.lanes.map(function (lane, l) {
      if (lane.transfers) return null;
      var main = self.drawnMain && self.drawnMain[l];
      if (!main || c1 <= c0) return 0;
      var y0 = Math.round((self.laneY(l) + 1) * dpr), y1 = Math.round((self.laneY(l) + self.laneH - 1) * dpr);
      var x0 = Math.round((GUTTER + c0) * dpr), x1 = Math.round((GUTTER + c1) * dpr), w = x1 - x0;
      var px = g.getImageData(x0, y0, w, y1 - y0).data, sum = 0;
      for (var i = 0; i < px.length; i += 4) {
        var col = c0 + Math.floor(((i / 4) % w) / dpr), ref = main[col] >= 0 ? refs[main[col]] : 0;
        if (ref > 0) sum += (765 - px[i] - px[i + 1] - px[i + 2]) / ref;
      }
      return sum / (px.length / 4);
    });
  };

  function rgb(css) {
    var c = document.createElement("canvas").getContext("2d");
    c.fillStyle = css; c.fillRect(0, 0, 1, 1);
    var p = c.getImageData(0, 0, 1, 1).data;
    return [p[0], p[1], p[2]];
  }

  /** The bar (index) under a point, with 2 px of tolerance; null if none. A transfer's: ``transfer`` set. */
  Gantt.prototype.hit = function (p) {
    var d = this.data;
    if (!d || d.mode !== "bars") return null;
    var lane = this.laneAt(p.y);
    if (lane < 0) return null;
    var self = this;
    function near(list, ids) {
      var best = null;
      for (var i = 0; i < ids.length; i++) {
        var b = list[ids[i]], x0 = self._x(b[0]) - 2, x1 = Math.max(self._x(b[1]), self._x(b[0]) + 1) + 2;
        if (p.x >= x0 && p.x <= x1) { best = ids[i]; if (p.x >= x0 + 2 && p.x <= x1 - 2) break; }
      }
      return best;
    }
    if (d.lanes[lane].transfers) {
      var k = near(d.transfers, this.transfersByLane[lane]);
      if (k === null) return null;
      var t = d.transfers[k];
      return { transfer: true, index: k, id: t[4], key: t[7] || "", direction: t[3] === IN ? "in" : "out", bytes: t[5],
        peer: t[6], start: t[0], end: t[1], error: !!t[8], lane: d.lanes[lane] };
    }
    var best = near(d.bars, this.byLane[lane]);
    if (best === null) return null;
    var bar = d.bars[best];
    return { index: best, id: bar[5], key: bar[6] || "", prefix: d.prefixes[bar[3]], start: bar[0], end: bar[1],
      error: !!bar[4], lane: d.lanes[bar[2]] };
  };

  Gantt.prototype._hover = function (p) {
    var d = this.data, lane = this.laneAt(p.y), tip = this.tip;
    function show(text, room) {
      tip.hidden = false; tip.textContent = text;
      tip.style.left = Math.min(p.x + 12, room) + "px"; tip.style.top = (p.y + 14) + "px";
    }
    if (d && p.x < GUTTER && lane >= 0) return show(laneLabel(d.lanes[lane]), p.x + 12);  // the lane's label in full
    if (d && d.mode === "aggregated" && lane >= 0 && p.x >= GUTTER) {
      var bin = Math.floor((p.x - GUTTER) / (this.plotWidth / d.bins));
      var moved = (d.transfer_busy || []).filter(function (t) { return t[0] === lane; })[0];
      if (moved && bin >= 0 && bin < d.bins && (moved[1][bin] > 0 || moved[2][bin] > 0)) {
        return show(Math.round(100 * moved[1][bin]) + "% fetching from other workers · " + Math.round(100 * moved[2][bin]) +
          "% sending to them · " + d.lanes[lane].worker, this.width - 360);
      }
      if (!moved && bin >= 0 && bin < d.bins && (d.busy[lane][bin] > 0 || (d.starts && d.starts[lane][bin]))) {
        return show(Math.round(100 * d.busy[lane][bin]) + "% busy" +
          (d.starts ? " · " + EV.num(d.starts[lane][bin]) + " started" : "") +
          (d.main[lane][bin] >= 0 ? " · mostly " + d.prefixes[d.main[lane][bin]] : "") + " · " + laneLabel(d.lanes[lane]),
          this.width - 320);
      }
    }
    var h = this.hit(p);
    if (!h) { tip.hidden = true; return; }
    if (h.transfer) {
      return show((h.direction === "in" ? "fetched from " : "fetched by ") + h.peer + " · " + EV.short(h.bytes, "bytes") + " · " +
        EV.duration(h.end - h.start) + (h.key ? " · for " + h.key : "") + (h.error ? " · failed" : ""), this.width - 380);
    }
    show((h.key && h.key !== h.prefix ? h.key + " · " : "") + h.prefix + " · " +
      EV.duration(h.end - h.start) + (h.error ? " · error" : "") +
      (this.marked && this.marked.has(h.id) ? " · critical path" : "") + " · " + laneLabel(h.lane), this.width - 380);
  };

  /** Page coordinates of the middle of bar i (used by tests to click a real bar). */
  Gantt.prototype.barCenter = function (i) {
    var d = this.data, b = d.bars[i], r = this.canvas.getBoundingClientRect();
    var x0 = this._x(b[0]), x1 = Math.max(this._x(b[1]), x0 + 1);
    return { x: r.left + (x0 + x1) / 2, y: r.top + this.laneY(b[2]) + this.laneH / 2 };
  };

  /** [[label, colour], ...] of the transfer lanes' halves, for the legend. */
  Gantt.transferLegend = function () {
    return [["transfer: fetched from another worker (upper half)", TRANSFER_COLOURS[0]],
      ["transfer: fetched by another worker (lower half)", TRANSFER_COLOURS[1]]];
  };

  EV.Gantt = Gantt;
})();
