/* The report panel: `evlog report` of the run (GET api/report, the same analysis as the command):
   advice, then per computation its critical path, time by prefix, stragglers and failures; the
   workers; pool functions and torch ranks where they apply. Task keys open their story as a Gantt bar
   click does (a pool call's straggler or failure, its span); the critical path is outlined in the Gantt and the task graph. The analysis reads every
   span, so a live run asks for it at most every 15 s. While a run folder is still being read the server
   does not analyse it (the panel says how far the reading has come); afterwards it analyses whole
   computations only, and says how many it left out (still running, or not all stored) and why. Times per
   prefix are per task (median, p95 where the report has it); their sums are labelled task-seconds. */
"use strict";
(function () {
  var MIN_GAP_MS = 15000;
  var last = 0, timer = null, busy = null;
  var $ = function (id) { return document.getElementById(id); };

  function keyLink(key) {
    return EV.el("a", { href: "#", "class": "task-link", "data-key": key, onclick: function (e) {
      e.preventDefault(); EV.showTask({ key: key });
    } }, key);
  }

  function spanLink(text, rowId) {
    if (rowId === undefined || rowId === null) return text;
    return EV.el("a", { href: "#", "class": "task-link", "data-id": rowId, onclick: function (e) {
      e.preventDefault(); EV.showTask({ id: rowId });
    } }, text);
  }

  function secs(s) { return s ? EV.duration(s) : "-"; }
  /** A sum of task times (many tasks at once): task-seconds, never read as wall time. */
  function taskSecs(s) {
    if (!s) return "-";
    return (s >= 100 ? EV.num(Math.round(s)) : s.toFixed(s >= 10 ? 1 : 2)) + " task-s";
  }
  /** Per task: the median, the p95 where the report gives it, and the sum in task-seconds. */
  function perTask(median, p95, sum) {
    return secs(median) + (p95 !== undefined && p95 !== null ? " · p95 " + secs(p95) : "") + " (Σ " + taskSecs(sum) + ")";
  }
  function n(k, what) { return k + " " + what + (k === 1 ? "" : "s"); }
  function pct(x) { return Math.round(100 * (x || 0)) + "%"; }

  function computation(c, open) {
    var d = EV.el("details", open ? { open: "", "class": "computation" } : { "class": "computation" });
    d.appendChild(EV.el("summary", {}, [EV.el("b", {}, c.name), " · " + secs(c.wall_s) + " wall · " + n(c.tasks, "task") +
      " · critical path " + pct(c.critical_path_share) +
      (c.stragglers.length ? " · " + n(c.stragglers.length, "straggler") : "") +
      (c.failures.length ? " · " + c.failures.length + " failed" : "") +
      ((c.retries || []).length ? " · " + n(c.retries.length, "retried task") : "")]));
    var wall = c.critical_path_wall_s || c.wall_s;
    d.appendChild(EV.el("h4", {}, "Critical path: " + n(c.critical_path.length, "task") + ", " + EV.duration(c.critical_path_s) +
      " of " + EV.duration(wall) + " (" + pct(c.critical_path_share) + "; computing " + pct(c.critical_path_compute_share) + ")"));
    // a task made by an earlier client call (futures) names that call; start: signed from this call's start
    var t = EV.table(["#", "key", "prefix", "worker", "start", "queued", "transfer", "compute"], c.critical_path.map(function (r, i) {
      var off = r.start - c.start, other = r.computation && r.computation !== c.name;
      var when = r.start && c.start ? (off < 0 ? "−" : "+") + EV.duration(Math.abs(off)) : "-";
      return [String(i + 1), other ? EV.el("span", {}, [keyLink(r.key), EV.el("span", { "class": "muted" }, " (" + r.computation + ")")]) : keyLink(r.key),
        r.prefix, r.worker || "", when,
        secs(r.queued_s), secs(r.transfer_s), r.erred ? "(erred)" : secs(r.compute_s)];
    }));
    t.classList.add("critical-path");
    d.appendChild(t);
    var pre = Object.keys(c.prefixes);
    d.appendChild(EV.el("h4", {}, "Time by prefix, per task: median (p95) and the sum over its tasks in task-seconds"));
    var byPrefix = EV.table(["prefix", "tasks", "compute", "transfer", "queued", "erred / retried"], pre.map(function (p) {
      var x = c.prefixes[p];
      return [EV.el("span", {}, [EV.el("i", { "class": "swatch", style: "background:" + EV.prefixColour(p) }), p]), EV.num(x.count),
        perTask(x.median_compute_s, x.p95_compute_s, x.compute_s), perTask(x.median_transfer_s, x.p95_transfer_s, x.transfer_s),
        perTask(x.median_queued_s, x.p95_queued_s, x.queued_s), x.erred || x.retried ? x.erred + " / " + x.retried : "-"];
    }));
    byPrefix.classList.add("prefixes");
    d.appendChild(byPrefix);
    if (c.stragglers.length) {
      d.appendChild(EV.el("h4", {}, "Stragglers (over 5× their prefix's median compute, and over 100 ms)"));
      var st = EV.table(["key", "compute", "× median", "worker", "thread"], c.stragglers.map(function (s) {
        return [keyLink(s.key), secs(s.compute_s), s.ratio ? s.ratio + "× " + secs(s.median_s) : "-", s.worker || "", s.thread || ""];
      }));
      st.classList.add("stragglers");
      d.appendChild(st);
    }
    var saved = (c.retries || []).filter(function (x) { return x.succeeded; });
    if (c.failures.length || saved.length) d.appendChild(EV.el("h4", {}, "Failures and retries"));
    if (c.failures.length) {
      var ft = EV.table(["key", "exception", "worker", "time (" + EV.tzShort() + ")"], c.failures.map(function (f) {
        return [keyLink(f.key), EV.msg((f.exception ? f.exception + ": " : "") + f.message), f.worker || "", EV.clock(f.time, true)];
      }), function () { return "err"; });
      ft.classList.add("failures");
      d.appendChild(ft);
    }
    if (saved.length) {  // a task that failed, then succeeded on a retry (Dask's retries=)
      var rt = EV.table(["key", "first failure", "attempts", "failed attempts took", "worker"], saved.map(function (x) {
        return [keyLink(x.key), EV.msg(x.exception), x.failed + " failed of " + x.attempts, secs(x.erred_s), x.worker || ""];
      }));
      rt.classList.add("retries");
      d.appendChild(rt);
    }
    if (c.erred_dependents) d.appendChild(EV.el("p", { "class": "muted" }, c.erred_dependents + " more tasks erred because a dependency did."));
    return d;
  }

  /* What if: `evlog report --what-if` for 1 .. 2x the recorded workers (GET api/what-if), asked for by a
     button, as the replay of a big run takes seconds. The answer stays drawn when the report is made again,
     until another run is shown; "Predict again" replays what is stored now (a live run goes on). */
  var whatIf = null, whatIfChart = null;  // the answer for the run shown, and its chart

  function whatIfBox() {
    var box = EV.el("div", { id: "what-if" });
    fillWhatIf(box);
    return box;
  }

  function fillWhatIf(box) {
    if (whatIfChart) { whatIfChart.destroy(); whatIfChart = null; }
    box.innerHTML = "";
    box.appendChild(EV.el("h3", {}, "What if"));
    if (whatIf) drawWhatIf(box, whatIf);
    else box.appendChild(EV.el("p", { "class": "muted" }, "How long would the whole computations take on 1 to 2× the workers? " +
      "The recorded graph is replayed on each (evlog report --what-if; docs/report.md says how)."));
    var button = EV.el("button", { type: "button", id: "what-if-predict", onclick: function () {
      button.disabled = true;
      button.textContent = "Replaying…";
      var gen = EV.runGeneration;
      EV.api("api/what-if").then(function (w) {
        if (gen !== EV.runGeneration) return;
        whatIf = w;
        fillWhatIf($("what-if") || box);
      }, function (e) {
        if (e && e.stale) return;
        button.disabled = false;
        button.textContent = "Predict";
        box.appendChild(EV.el("p", { "class": "error" }, "The prediction failed: " + ((e && e.data && e.data.error) || (e && e.status) || e)));
      });
    } }, whatIf ? "Predict again" : "Predict");
    box.appendChild(button);
  }

  function drawWhatIf(box, w) {
    if (w.none) { box.appendChild(EV.el("p", { "class": "muted" }, "No prediction: " + w.none + ".")); return; }
    var c = w.curve, each = c.threads + " thread" + (c.threads === 1 ? "" : "s") + " each";
    if (w.partial) box.appendChild(EV.el("p", { "class": "partial" }, "Of the whole computations only (the report says which were left out)."));
    box.appendChild(EV.el("p", { "class": "what-if-line" }, "Recorded on " + n(c.recorded.workers, "worker") + " (" + each + "): " +
      EV.duration(c.recorded.seconds) + ". Predicted: " + c.workers.map(function (x, i) {
        return n(x, "worker") + " " + EV.duration(c.predicted_s[i]);
      }).join(" · ") + "."));
    var chart = EV.el("div", { "class": "what-if-chart" });
    box.appendChild(chart);
    if (typeof uPlot !== "undefined") {
      var recorded = c.workers.map(function (x) { return x === c.recorded.workers ? c.recorded.seconds : null; });
      whatIfChart = new uPlot({ title: "predicted time against workers (" + each + ")", width: Math.min(900, box.clientWidth || 700),
        height: 220, scales: { x: { time: false } }, axes: [{ label: "workers", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500] }, { label: "seconds" }],
        series: [{ label: "workers" }, { label: "predicted", stroke: "#1a73e8", width: 2 },
          { label: "recorded", stroke: "#d93025", paths: function () { return null; }, points: { show: true, size: 9, fill: "#d93025" } }] },
        [c.workers, c.predicted_s, recorded], chart);
    }
    box.appendChild(EV.el("ul", { "class": "muted what-if-model" }, w.lines.map(function (l) { return EV.el("li", {}, l); })));
  }

  function workers(ws) {
    return EV.table(["worker", "tasks", "threads", "busy", "utilisation", "idle", "longest idle", "transfer in"], ws.map(function (w) {
      return [w.address, EV.num(w.tasks), String(w.threads.length), secs(w.busy_s), pct(w.utilisation), pct(w.idle_share),
        w.longest_idle ? EV.duration(w.longest_idle.seconds) : "-",
        w.transfer_s ? EV.duration(w.transfer_s) + " (" + EV.num(w.transfer_bytes) + " B)" : "-"];
    }));
  }

  // A chunk span's call: its index in the map's input ("1000–1399": one of the calls timed together);
  // empty for a call sent alone (its own span).
  function callIndex(x) {
    if (x.index === null || x.index === undefined) return "";
    return x.timed_with > 1 ? x.index + "–" + (x.index + x.timed_with - 1) : String(x.index);
  }

  function pools(p) {
    var box = EV.el("div");
    box.appendChild(EV.el("h4", {}, "Pool calls by function"));
    box.appendChild(EV.table(["function", "kind", "calls", "total", "median", "longest", "erred"], Object.keys(p.functions).map(function (f) {
      var x = p.functions[f];
      return [f, x.kind, EV.num(x.count), secs(x.total_s), secs(x.median_s), secs(x.max_s), String(x.erred)];
    })));
    if (p.stragglers.length) box.appendChild(EV.table(["straggler", "call", "took", "× median", "process", "thread"], p.stragglers.map(function (s) {
      return [spanLink(s.function, s.row_id), callIndex(s), secs(s.seconds), s.ratio ? s.ratio + "×" : "-", s.process, s.thread || ""];
    })));
    if (p.failures.length) box.appendChild(EV.table(["failed call", "call", "exception", "process"], p.failures.map(function (f) {
      return [spanLink(f.function, f.row_id), callIndex(f), EV.msg((f.exception ? f.exception + ": " : "") + f.message), f.process];
    }), function () { return "err"; }));
    return box;
  }

  function ranks(r) {
    var box = EV.el("div");
    box.appendChild(EV.el("h4", {}, "Torch elastic ranks"));
    box.appendChild(EV.table(["rank", "host", "pids", "duration", "spans", "erred"], r.ranks.map(function (x) {
      return [String(x.rank), x.host || "", x.pids.join(", "), secs(x.duration_s), EV.num(x.spans), String(x.erred)];
    })));
    if (r.failures.length) box.appendChild(EV.table(["rank", "failed", "exception"], r.failures.map(function (f) {
      return [String(f.rank), f.span, EV.msg((f.exception ? f.exception + ": " : "") + f.message)];
    }), function () { return "err"; }));
    return box;
  }

  /** "12.3 MB of 45.6 MB read (27%)" */
  EV.loadingText = function (l) {
    var pct = l.total ? " (" + Math.floor(100 * l.read / l.total) + "%)" : "";
    return EV.short(l.read, "bytes") + " of " + EV.short(l.total, "bytes") + " read" + pct + ", " + EV.num(l.rows) + " rows";
  };

  /** Computations left out: "2 computations left out, not whole yet: its client call's span is not stored yet (1), ..." */
  function leftOut(left) {
    var why = Object.keys(left || {}), total = why.reduce(function (a, k) { return a + left[k]; }, 0);
    return n(total, "computation") + " left out, not whole yet (still running, or not all stored): " +
      why.map(function (k) { return k + " (" + left[k] + ")"; }).join("; ") + ".";
  }

  EV.renderReport = function (el, rep) {
    el.innerHTML = "";
    var section = $("report-section");
    section.toggleAttribute("data-partial", !!rep.partial);
    if (rep.error) { el.appendChild(EV.el("p", { "class": "error" }, rep.error)); return; }
    if (rep.loading) {
      el.appendChild(EV.el("p", { "class": "muted partial" }, "The report is made once the run folder is read: " +
        EV.loadingText(rep.loading) + " so far."));
      return;
    }
    if (rep.empty) { el.appendChild(EV.el("p", { "class": "muted" }, "Nothing to report yet.")); return; }
    if (rep.partial) el.appendChild(EV.el("p", { "class": "partial" }, "Partial: " + leftOut(rep.left_out) +
      " The figures below are of the whole computations only."));
    el.appendChild(EV.el("p", { "class": "muted" }, (rep.start ? EV.clock(rep.start, true) + " → " + EV.clock(rep.end) + " " + EV.tzName() + " (" +
      EV.duration(rep.wall_s) + "); " : "") + n(rep.computations.length, "computation") + ", " + n(rep.workers.length, "worker") + ". " +
      "The critical path is outlined in black in the Gantt and the task graph; click a key for its story."));
    if (rep.advice.length) {
      el.appendChild(EV.el("h3", {}, "Advice"));
      el.appendChild(EV.el("ul", { "class": "advice" }, rep.advice.map(function (a) { return EV.el("li", {}, a); })));
    }
    if (rep.computations.length) {
      el.appendChild(EV.el("h3", {}, "Computations"));
      rep.computations.forEach(function (c, i) { el.appendChild(computation(c, i < 3)); });
    }
    if (rep.computations.some(function (c) { return c.tasks > 0; })) el.appendChild(whatIfBox());
    if (rep.workers.length) { el.appendChild(EV.el("h3", {}, "Workers")); el.appendChild(workers(rep.workers)); }
    if (rep.pools) el.appendChild(pools(rep.pools));
    if (rep.ranks) el.appendChild(ranks(rep.ranks));
  };

  function apply(rep) {
    var m = rep.marks || {};
    EV.criticalKeys = new Set(m.critical_keys || []);
    if (EV.gantt) EV.gantt.mark($("report-mark").checked ? m.critical_ids : null, m.critical_spans);
    if (EV.markDag) EV.markDag();
  }

  function load() {
    last = Date.now();
    var mine = busy = EV.api("api/report").then(function (rep) {
      EV.report = rep;
      EV.renderReport($("report"), rep);
      apply(rep);
      $("report-section").setAttribute("data-loaded", "1");
    }).then(function () { if (busy === mine) busy = null; }, function (e) {
      if (busy === mine) busy = null;
      if (e && e.stale) return;  // the run shown changed meanwhile: resetReport asked again
      if (!(e && e.status === 401)) {
        $("report").innerHTML = "";
        $("report").appendChild(EV.el("p", { "class": "error" }, "The report failed: " + ((e && e.data && e.data.error) || (e && e.status) || e)));
      }
      throw e;
    });
    return mine;
  }

  /** Another run is shown: its analysis at once, and nothing of the previous run meanwhile. */
  EV.resetReport = function () {
    clearTimeout(timer);
    whatIf = null;
    if (whatIfChart) { whatIfChart.destroy(); whatIfChart = null; }
    last = 0; busy = null; EV.report = null;
    $("report-section").removeAttribute("data-loaded");
    $("report").innerHTML = "";
    $("report").appendChild(EV.el("p", { "class": "muted" }, "Analysing…"));
    apply({});
  };

  /** The clock changed: the report is drawn again from the analysis it has. */
  EV.rerenderReport = function () { if (EV.report) EV.renderReport($("report"), EV.report); };

  /** Called on every dashboard refresh: loads the report now, or once 15 s have passed since the last load. */
  EV.refreshReport = function () {
    if (busy) return busy;
    var wait = last + MIN_GAP_MS - Date.now();
    if (!last || wait <= 0 || (EV.report && EV.report.loading && !EV.loadingNow)) return load();
    clearTimeout(timer);
    timer = setTimeout(function () { load().catch(function (e) { EV.log("report failed", e); }); }, wait);
    return Promise.resolve();
  };

  $("report-mark").addEventListener("change", function () { if (EV.report) apply(EV.report); });
  $("report-reload").addEventListener("click", function () { if (!busy) load().catch(function (e) { EV.log("report failed", e); }); });
})();
