/* The Gantt chart: one row per worker and thread, one bar per task (colour: task prefix, from a
   categorical palette; errors in red outline with a marker; the report's critical path outlined in
   black), or, for large runs, how busy each row was per time bin (opacity scaled to the busiest bin,
   so the work stands out however short the tasks). Lane labels: worker above thread, fitted to the
   gutter, in full on hover. Canvas, so tens of thousands of bars draw in milliseconds. Drag to zoom
   in; click a bar for the task's story. */
"use strict";
(function () {
  var GUTTER = 230, AXIS = 22, TWO_LINES = 26;

  function Gantt(canvas, tip, onPick, onZoom) {
    this.canvas = canvas; this.tip = tip; this.onPick = onPick; this.onZoom = onZoom;
    this.data = null; this.laneH = 16; this.byLane = []; this.marked = null;
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
    var d = this.data, w = this.width - GUTTER - 8;
    return GUTTER + (t - d.t0) / Math.max(d.t1 - d.t0, 1e-9) * w;
  };
  Gantt.prototype._t = function (x) {
    var d = this.data, w = this.width - GUTTER - 8;
    return d.t0 + (x - GUTTER) / w * (d.t1 - d.t0);
  };

  Gantt.prototype.set = function (data) {
    this.data = data;
    this.byLane = data.lanes.map(function () { return []; });
    if (data.mode === "bars") {
      for (var i = 0; i < data.bars.length; i++) this.byLane[data.bars[i][2]].push(i);
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
    var n = d ? d.lanes.length : 0;
    this.laneH = n ? (n <= 20 ? TWO_LINES : Math.max(3, Math.min(18, Math.floor(560 / n)))) : 18;
    var h = Math.max(60, n * this.laneH + AXIS + 4);
    c.style.height = h + "px";
    c.width = Math.round(this.width * dpr); c.height = Math.round(h * dpr);
    var g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, this.width, h);
    g.font = "11px system-ui, sans-serif";
    if (!d || !n) {
      g.fillStyle = "#6b7385"; g.fillText("No task spans yet.", GUTTER, 30);
      return;
    }
    var lh = this.laneH, self = this, room = GUTTER - 10;
    // lane labels (worker above thread when there is room, else "worker · thread" cut from the left) and stripes
    this.drawnLabels = [];
    for (var i = 0; i < n; i++) {
      var lane = d.lanes[i], y = i * lh, parts = laneParts(lane), lines = [];
      if (i % 2) { g.fillStyle = "#f6f7f9"; g.fillRect(0, y, this.width, lh); }
      if (lh >= TWO_LINES) {
        lines = [fit(g, parts[0], room), fit(g, parts[1], room)];
        g.fillStyle = i && d.lanes[i - 1].worker === lane.worker ? "#6b7385" : "#1d2330";
        g.fillText(lines[0], 4, y + 11);
        g.fillStyle = "#1d2330";
        g.fillText(lines[1], 12, y + lh - 4);
      } else if (lh >= 9) {
        lines = [oneLine(g, parts, room)];
        g.fillStyle = "#1d2330";
        g.fillText(lines[0], 4, y + lh - 3);
      }
      this.drawnLabels.push({ full: laneLabel(lane), lines: lines });
    }
    var colours = d.prefixes.map(function (p) { return EV.prefixColour(p); });
    c.setAttribute("data-critical", 0);
    if (d.mode === "bars") {
      var errs = [];
      for (var k = 0; k < d.bars.length; k++) {
        var b = d.bars[k], x0 = this._x(b[0]), x1 = Math.max(this._x(b[1]), x0 + 1);
        g.fillStyle = colours[b[3]];
        g.fillRect(x0, b[2] * lh + 1, x1 - x0, lh - 2);
        if (b[4]) errs.push(b);
      }
      g.strokeStyle = "#d0312d"; g.fillStyle = "#d0312d"; g.lineWidth = 2;
      errs.forEach(function (b) {
        var x0 = self._x(b[0]), x1 = Math.max(self._x(b[1]), x0 + 1), y = b[2] * lh;
        g.strokeRect(x0, y + 1, x1 - x0, lh - 2);
        g.beginPath(); g.moveTo(x1, y); g.lineTo(x1 + 6, y); g.lineTo(x1 + 3, y + 5); g.fill();
      });
      var marked = 0;
      if (this.marked) {  // the critical path: a black outline, and a black tick under bars too thin to outline
        g.strokeStyle = "#111"; g.fillStyle = "#111"; g.lineWidth = 2;
        for (var q = 0; q < d.bars.length; q++) {
          var mb = d.bars[q];
          if (!this.marked.has(mb[5])) continue;
          var mx0 = this._x(mb[0]), mx1 = Math.max(this._x(mb[1]), mx0 + 1), my = mb[2] * lh;
          g.strokeRect(mx0 - 1, my + 1, mx1 - mx0 + 2, lh - 2);
          if (mx1 - mx0 < 4) { g.beginPath(); g.moveTo(mx0 - 3, my + lh); g.lineTo(mx1 + 3, my + lh); g.lineTo((mx0 + mx1) / 2, my + lh - 5); g.fill(); }
          marked++;
        }
      }
      c.setAttribute("data-critical", marked);
    } else if (d.mode === "aggregated") {
      var bw = (this.width - GUTTER - 8) / d.bins, top = 1e-9, most = 1, st = d.starts || d.busy.map(function () { return []; });
      d.busy.forEach(function (row) { for (var z = 0; z < row.length; z++) if (row[z] > top) top = row[z]; });
      st.forEach(function (row) { for (var z = 0; z < row.length; z++) if (row[z] > most) most = row[z]; });
      var strong = 0, drawn = 0;
      for (var l = 0; l < n; l++) {
        var busy = d.busy[l], main = d.main[l], er = d.errors[l], cnt = st[l];
        for (var j = 0; j < d.bins; j++) {
          if (busy[j] <= 0 && !cnt[j]) continue;
          // darker the busier (time) or the more tasks started, each relative to the most in view:
          // 20,000 tasks of a few µs are not a pale wash beside a few long ones
          var level = Math.sqrt(Math.max(busy[j] / top, (cnt[j] || 0) / most));
          g.globalAlpha = 0.25 + 0.75 * level;
          drawn++; if (level >= 0.5) strong++;
          g.fillStyle = main[j] >= 0 ? colours[main[j]] : "#888";
          g.fillRect(GUTTER + j * bw, l * lh + 1, Math.max(bw, 1), lh - 2);
          if (er[j]) { g.globalAlpha = 1; g.fillStyle = "#d0312d"; g.fillRect(GUTTER + j * bw, l * lh, Math.max(bw, 2), 3); }
        }
      }
      g.globalAlpha = 1;
      c.setAttribute("data-strong-bins", drawn ? (strong / drawn).toFixed(3) : "0");
      // the critical path over the bins: a black outline (at least 3 px wide) on the task's row
      var laneOf = {}, mk = 0;
      d.lanes.forEach(function (ln, li) { var k = ln.worker + "\n" + ln.thread; if (!(k in laneOf)) laneOf[k] = li; });
      g.strokeStyle = "#111"; g.lineWidth = 2;
      (this.marked ? this.markedSpans : []).forEach(function (ms) {
        var li = laneOf[ms[3] + "\n" + ms[4]];
        if (li === undefined || ms[2] < d.t0 || ms[1] > d.t1) return;
        var a = self._x(Math.max(ms[1], d.t0)), b = Math.max(self._x(Math.min(ms[2], d.t1)), a + 3);
        g.strokeRect(a - 1, li * lh + 1, b - a + 2, lh - 2);
        mk++;
      });
      c.setAttribute("data-critical", mk);
    }
    // time axis
    var y0 = n * lh + 2;
    g.strokeStyle = "#c5cad3"; g.lineWidth = 1;
    g.beginPath(); g.moveTo(GUTTER, y0); g.lineTo(this.width - 8, y0); g.stroke();
    var parts = EV.tickCount(this.width - GUTTER), step = EV.tickStep(d.t0, d.t1, parts);
    var ticks = EV.ticks(d.t0, d.t1, parts);
    g.fillStyle = "#6b7385";
    this.drawnTicks = [];
    for (var t = 0; t < ticks.length; t++) {  // round instants of the page's clock, wall-clock labels
      var ts = ticks[t], x = this._x(ts);
      g.beginPath(); g.moveTo(x, y0); g.lineTo(x, y0 + 4); g.stroke();
      var txt = EV.tick(ts, step), tw = g.measureText(txt).width;
      g.fillText(txt, Math.max(GUTTER - tw / 2, Math.min(x - tw / 2, this.width - tw - 2)), y0 + 15);
      this.drawnTicks.push([ts, txt]);
    }
    if (this.drag) {
      g.fillStyle = "rgba(91,141,239,.18)";
      g.fillRect(Math.min(this.drag[0], this.drag[1]), 0, Math.abs(this.drag[1] - this.drag[0]), n * lh);
    }
    if (EV.afterGanttDraw) EV.afterGanttDraw(this);  // fine.js: the Dask spans' bands above the chart
  };

  /** The bar (index) under a point, with 2 px of tolerance; null if none. */
  Gantt.prototype.hit = function (p) {
    var d = this.data;
    if (!d || d.mode !== "bars") return null;
    var lane = Math.floor(p.y / this.laneH);
    if (lane < 0 || lane >= d.lanes.length) return null;
    var best = null;
    var ids = this.byLane[lane];
    for (var i = 0; i < ids.length; i++) {
      var b = d.bars[ids[i]], x0 = this._x(b[0]) - 2, x1 = Math.max(this._x(b[1]), this._x(b[0]) + 1) + 2;
      if (p.x >= x0 && p.x <= x1) { best = ids[i]; if (p.x >= x0 + 2 && p.x <= x1 - 2) break; }
    }
    if (best === null) return null;
    var bar = d.bars[best];
    return { index: best, id: bar[5], key: bar[6] || "", prefix: d.prefixes[bar[3]], start: bar[0], end: bar[1],
      error: !!bar[4], lane: d.lanes[bar[2]] };
  };

  Gantt.prototype._hover = function (p) {
    var d = this.data, lane = Math.floor(p.y / this.laneH);
    if (d && p.x < GUTTER && lane >= 0 && lane < d.lanes.length) {  // the lane's label in full
      this.tip.hidden = false;
      this.tip.textContent = laneLabel(d.lanes[lane]);
      this.tip.style.left = (p.x + 12) + "px"; this.tip.style.top = (p.y + 14) + "px";
      return;
    }
    if (d && d.mode === "aggregated" && lane >= 0 && lane < d.lanes.length && p.x >= GUTTER) {
      var bin = Math.floor((p.x - GUTTER) / ((this.width - GUTTER - 8) / d.bins));
      if (bin >= 0 && bin < d.bins && (d.busy[lane][bin] > 0 || (d.starts && d.starts[lane][bin]))) {
        this.tip.hidden = false;
        this.tip.textContent = Math.round(100 * d.busy[lane][bin]) + "% busy" +
          (d.starts ? " · " + EV.num(d.starts[lane][bin]) + " started" : "") +
          (d.main[lane][bin] >= 0 ? " · mostly " + d.prefixes[d.main[lane][bin]] : "") + " · " + laneLabel(d.lanes[lane]);
        this.tip.style.left = Math.min(p.x + 12, this.width - 320) + "px"; this.tip.style.top = (p.y + 14) + "px";
        return;
      }
    }
    var h = this.hit(p);
    if (!h) { this.tip.hidden = true; return; }
    this.tip.hidden = false;
    this.tip.textContent = (h.key && h.key !== h.prefix ? h.key + " · " : "") + h.prefix + " · " +
      EV.duration(h.end - h.start) + (h.error ? " · error" : "") +
      (this.marked && this.marked.has(h.id) ? " · critical path" : "") + " · " + laneLabel(h.lane);
    this.tip.style.left = Math.min(p.x + 12, this.width - 380) + "px";
    this.tip.style.top = (p.y + 14) + "px";
  };

  /** Page coordinates of the middle of bar i (used by tests to click a real bar). */
  Gantt.prototype.barCenter = function (i) {
    var d = this.data, b = d.bars[i], r = this.canvas.getBoundingClientRect();
    var x0 = this._x(b[0]), x1 = Math.max(this._x(b[1]), x0 + 1);
    return { x: r.left + (x0 + x1) / 2, y: r.top + b[2] * this.laneH + this.laneH / 2 };
  };

  EV.Gantt = Gantt;
})();
