/* The Gantt chart: one row per worker and thread, one bar per task (colour: task prefix; errors in red
   outline with a marker), or, for large runs, how busy each row was per time bin. Canvas, so tens of
   thousands of bars draw in milliseconds. Drag to zoom in; click a bar for the task's story. */
"use strict";
(function () {
  var GUTTER = 190, AXIS = 22;

  function Gantt(canvas, tip, onPick, onZoom) {
    this.canvas = canvas; this.tip = tip; this.onPick = onPick; this.onZoom = onZoom;
    this.data = null; this.laneH = 16; this.byLane = [];
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

  /** "127.0.0.1:35503 · …Threads-5908-0": the worker in full, the thread by its distinctive end. */
  function laneLabel(lane) {
    var w = lane.worker.replace(/^tcp:\/\//, ""), t = lane.thread || "";
    if (w.length > 24) w = "…" + w.slice(-23);
    if (t.length > 14) t = "…" + t.slice(-13);
    return w + (t ? " · " + t : "") + (lane.sub ? " +" + lane.sub : "");
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
    this.draw();
  };

  Gantt.prototype.draw = function () {
    var c = this.canvas, d = this.data, dpr = window.devicePixelRatio || 1;
    this.width = c.parentNode.clientWidth || 800;
    var n = d ? d.lanes.length : 0;
    this.laneH = n ? Math.max(3, Math.min(18, Math.floor(560 / n))) : 18;
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
    var lh = this.laneH, self = this, prev = null;
    // lane labels and stripes
    for (var i = 0; i < n; i++) {
      var lane = d.lanes[i], y = i * lh;
      if (i % 2) { g.fillStyle = "#f6f7f9"; g.fillRect(0, y, this.width, lh); }
      var label = laneLabel(lane);
      if (lh >= 9 && label !== prev) {
        g.fillStyle = "#1d2330";
        g.fillText(label, 4, y + lh - 3);
      }
      prev = label;
    }
    var colours = d.prefixes.map(function (p) { return EV.colour(p); });
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
    } else if (d.mode === "aggregated") {
      var bw = (this.width - GUTTER - 8) / d.bins;
      for (var l = 0; l < n; l++) {
        var busy = d.busy[l], main = d.main[l], er = d.errors[l];
        for (var j = 0; j < d.bins; j++) {
          if (busy[j] <= 0) continue;
          g.globalAlpha = 0.25 + 0.75 * busy[j];
          g.fillStyle = main[j] >= 0 ? colours[main[j]] : "#888";
          g.fillRect(GUTTER + j * bw, l * lh + 1, Math.max(bw, 1), lh - 2);
          if (er[j]) { g.globalAlpha = 1; g.fillStyle = "#d0312d"; g.fillRect(GUTTER + j * bw, l * lh, Math.max(bw, 2), 3); }
        }
      }
      g.globalAlpha = 1;
    }
    // time axis
    var y0 = n * lh + 2;
    g.strokeStyle = "#c5cad3"; g.lineWidth = 1;
    g.beginPath(); g.moveTo(GUTTER, y0); g.lineTo(this.width - 8, y0); g.stroke();
    var ticks = 6, span = d.t1 - d.t0;
    g.fillStyle = "#6b7385";
    for (var t = 0; t <= ticks; t++) {
      var ts = d.t0 + span * t / ticks, x = this._x(ts);
      g.beginPath(); g.moveTo(x, y0); g.lineTo(x, y0 + 4); g.stroke();
      var txt = span < 2 ? "+" + EV.duration(ts - d.t0) : EV.clock(ts).slice(0, span < 120 ? 12 : 8);
      g.fillText(txt, Math.min(x - 10, this.width - 70), y0 + 15);
    }
    if (this.drag) {
      g.fillStyle = "rgba(91,141,239,.18)";
      g.fillRect(Math.min(this.drag[0], this.drag[1]), 0, Math.abs(this.drag[1] - this.drag[0]), n * lh);
    }
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
    return { index: best, id: bar[5], prefix: d.prefixes[bar[3]], start: bar[0], end: bar[1], error: !!bar[4], lane: d.lanes[bar[2]] };
  };

  Gantt.prototype._hover = function (p) {
    var h = this.hit(p);
    if (!h) { this.tip.hidden = true; return; }
    this.tip.hidden = false;
    this.tip.textContent = h.prefix + " · " + EV.duration(h.end - h.start) + (h.error ? " · error" : "") + " · " + h.lane.worker;
    this.tip.style.left = Math.min(p.x + 12, this.width - 260) + "px";
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
