/* The dashboard's controller: fetches the panels, follows live updates (server-sent events), and
   reconnects every 5 s when the server goes away. Pause freezes the display at the current instant;
   the worker selector narrows every panel to one worker. */
"use strict";
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var state = { worker: "", paused: false, waiting: 0, range: null, whole: false, topic: "", task: null,
    refreshing: false, again: false, version: -1, connected: false, es: null, retry: null };
  EV.state = state;
  EV.refreshes = 0;

  EV.gantt = new EV.Gantt($("gantt"), $("gantt-tip"), function (hit) { showTask({ id: hit.id }); },
    function (t0, t1) { EV.zoomTo(t0, t1); });

  /** The Gantt's (and the plots') time: a zoom, else the tasks' range, or the whole run when asked. */
  function showRange() {
    $("range-tasks").classList.toggle("on", !state.range && !state.whole);
    $("range-run").classList.toggle("on", !state.range && state.whole);
  }
  function setRange(range, whole) {
    state.range = range; state.whole = !!whole;
    showRange();
    return refreshGantt().catch(failed("gantt"));
  }

  function status(cls, text) {
    var s = $("status"); s.className = "status " + cls; s.textContent = text;
  }

  function message(text) {
    var m = $("message"); m.hidden = !text; m.textContent = text || "";
  }

  /** While `evlog view` reads a run folder: how far it has come (the panels show what is read so far,
      the report waits for the whole); while rows wait to be stored (a live run, `evlog serve`): how many. */
  function showLoading(st) {
    var l = st.loading, box = $("loading"), text = "", was = EV.loadingNow;
    EV.loadingNow = !!(l && l.state === "loading");
    if (was && !EV.loadingNow) EV.refreshReport().catch(failed("report"));  // the whole folder: its report now
    if (EV.loadingNow) text = "Reading the run folder: " + EV.loadingText(l) + "; the panels show what is read so far.";
    else if (st.pending_rows > 0) text = "Storing " + EV.num(st.pending_rows) + " rows received; the panels show what is stored so far.";
    box.hidden = !text; box.textContent = text;
    document.body.setAttribute("data-loading", EV.loadingNow ? "loading" : text ? "storing" : (l && l.state) || "");
  }

  function failed(what) {
    return function (e) {
      if (e && (e.status === 401 || e.stale)) return;  // a stale answer: of the run shown before a switch
      EV.log(what + " failed", e);
      if (e && e.status >= 500 && e.data && e.data.error) message(e.data.error);
    };
  }

  function refreshGantt() {
    var p = { worker: state.worker, bins: EV.gantt.columns() };  // a time bin per pixel column
    if (state.range) { p.t0 = state.range[0]; p.t1 = state.range[1]; } else if (state.whole) p.whole = 1;
    return EV.api("api/gantt", p).then(function (g) {
      $("gantt-what").textContent = g.what + " · " + EV.num(g.total) + " spans" + (g.mode === "bars" ? "" : " (aggregated)") +
        (g.transfer_total ? " · " + EV.num(g.transfer_total) + " transfers" : "");
      var note = $("gantt-note"); note.hidden = !g.note; note.textContent = g.note || "";
      EV.gantt.set(g);
      EV.timeRange = [g.t0, g.t1];  // the plots share it (plots.js)
      EV.syncPlots();
      var leg = $("gantt-legend"); leg.innerHTML = "";
      g.prefixes.slice(0, 40).forEach(function (p) {
        leg.appendChild(EV.el("span", {}, [EV.el("i", { style: "background:" + EV.prefixColour(p) }), p]));
      });
      if (g.prefixes.length > 40) leg.appendChild(EV.el("span", {}, "… " + (g.prefixes.length - 40) + " more"));
      if (g.mode === "bars" && g.bars.length) leg.appendChild(EV.el("span", {}, [EV.el("i", { style: "background:#fff;border:2px solid #d0312d" }), "error"]));
      if (g.transfer_total) EV.Gantt.transferLegend().forEach(function (x) { leg.appendChild(EV.el("span", {}, [EV.el("i", { style: "background:" + x[1] }), x[0]])); });
      leg.appendChild(EV.el("span", { "class": "muted" }, "shade: the share of the time busy (white idle, full colour busy throughout)"));
    });
  }

  // time bins are a pixel column each: when the chart's width changes (a scroll bar comes, the window is
  // resized), the bins are asked for again
  if (window.ResizeObserver) new ResizeObserver(function () {
    var g = EV.gantt.data, want = Math.min(4000, Math.max(50, EV.gantt.columns()));
    if (g && g.mode === "aggregated" && g.bins !== want) refreshGantt().catch(failed("gantt"));
  }).observe($("gantt-wrap"));

  /** `evlog serve` with several runs: one is shown at a time (the newest unless chosen). */
  function refreshRuns(ov) {
    var sel = $("run"), runs = ov.runs || [];
    $("run-label").hidden = runs.length <= 1;
    $("compare").hidden = runs.length <= 1 || window.self !== window.top;  // not in a frame of the side-by-side page
    var sig = runs.map(function (r) { return r.run + "/" + r.processes; }).join("|");
    if (sel.getAttribute("data-sig") === sig) { sel.value = ov.run === null || ov.run === undefined ? "" : ov.run; return; }
    sel.setAttribute("data-sig", sig);
    sel.innerHTML = "";
    runs.forEach(function (r) {
      var name = (r.services.join(", ") || "(no service)") + " · " + (r.start ? EV.clock(r.start, true).slice(0, 19) : "") +
        " · " + r.processes + " process" + (r.processes === 1 ? "" : "es") + (r.run ? "" : " · no evlog.run.id");
      sel.appendChild(EV.el("option", { value: r.run, title: "evlog.run.id " + (r.run || "(none)") }, name));
    });
    sel.value = ov.run === null || ov.run === undefined ? "" : ov.run;
  }

  /** Each worker once, by the name the Gantt's lanes give it (a Dask worker's address). */
  function refreshWorkers(ov) {
    var sel = $("worker"), sig = ov.workers.join("\n");
    if (sel.getAttribute("data-sig") === sig) return;
    sel.setAttribute("data-sig", sig);
    while (sel.options.length > 1) sel.remove(1);
    ov.workers.forEach(function (w) { sel.appendChild(EV.el("option", { value: w }, w)); });
    if (state.worker && ov.workers.indexOf(state.worker) < 0) sel.appendChild(EV.el("option", { value: state.worker }, state.worker));
    sel.value = state.worker;
  }

  function refresh() {
    if (state.refreshing) { state.again = true; return Promise.resolve(); }
    state.refreshing = true;
    var started = performance.now();
    var jobs = [
      EV.api("api/overview").then(function (ov) {
        $("source").textContent = ov.source;
        document.title = "evlog · " + ov.source;
        EV.renderCounts($("counts"), ov);
        showLoading(ov.receiver || {});
        refreshRuns(ov);
        refreshWorkers(ov);
        $("metadata-section").hidden = !ov.has_metadata;
        if (ov.has_metadata) return EV.api("api/metadata").then(function (m) { EV.renderMetadata($("metadata"), m.graphs); });
      }).catch(failed("overview")),
      refreshGantt().catch(failed("gantt")),
      EV.api("api/plots", { worker: state.worker }).then(function (ps) { EV.renderPlots($("plots"), ps); }).catch(failed("plots")),
      EV.api("api/dag", { worker: state.worker }).then(function (d) {
        var note = $("dag-note"); note.hidden = !d.note; note.textContent = d.note || "";
        EV.renderDag($("dag"), d, state.worker, showTask);
      }).catch(failed("dag")),
      refreshEvents().catch(failed("events")),
      EV.refreshReport().catch(failed("report")),  // report.js
      EV.refreshConsole().catch(failed("console")),  // console.js
      EV.refreshProgress().catch(failed("progress")),
      EV.refreshProfile().catch(failed("profile")),  // profile.js: the flame graphs
      EV.refreshFine().catch(failed("fine")),  // fine.js: Dask's fine performance metrics and spans
    ];
    if (state.task) jobs.push(loadTask(state.task).catch(failed("task")));
    return Promise.all(jobs).then(function () {
      EV.syncPlots();
      state.refreshing = false;
      EV.refreshes++;
      EV.lastRefreshMs = performance.now() - started;
      document.body.setAttribute("data-refreshes", EV.refreshes);
      if (state.again) { state.again = false; return refresh(); }
    });
  }
  EV.refresh = refresh;

  function refreshEvents() {
    return EV.api("api/events", { topic: state.topic }).then(function (d) {
      EV.renderEvents($("topics"), $("events"), d, state.topic, function (t) { state.topic = t; refreshEvents(); });
    });
  }

  function loadTask(sel) {
    return EV.api("api/task", sel).then(function (t) {
      $("task-key").textContent = t.key || (t.spans && t.spans[0] && t.spans[0].name) || "";
      EV.renderTask($("task-body"), t);
    }, function (e) {
      if (e.status === 404) EV.renderTask($("task-body"), e.data || { found: false });
      else throw e;
    });
  }

  function showTask(sel) {
    state.task = sel;
    $("task-section").hidden = false;
    return loadTask(sel).then(function () {
      $("task-section").scrollIntoView({ behavior: "auto", block: "nearest" });
    }).catch(failed("task"));
  }
  EV.showTask = showTask;

  // ---- live updates

  function connect() {
    clearTimeout(state.retry);
    if (state.es) state.es.close();
    // no token in the URL: the API answer that came before set the server's cookie, which EventSource sends
    var es = state.es = new EventSource("api/stream");
    status("connecting", "connecting");
    es.addEventListener("open", function () {
      state.connected = true;
      EV.log("connected");
      status(state.paused ? "paused" : "live", state.paused ? "paused" : "live");
      message("");
    });
    es.addEventListener("update", function (e) {
      var d = JSON.parse(e.data), v = d.version + "." + (d.status || 0);  // the store's, and the server's status
      if (v === state.version) return;
      state.version = v;
      EV.updates = (EV.updates || 0) + 1;
      if (state.paused) { state.waiting++; status("paused", "paused · " + state.waiting + " updates waiting"); return; }
      refresh();
    });
    es.addEventListener("error", function () {
      // the browser would retry on its own schedule; we close and retry every 5 s, as DaggerWebDash does
      es.close();
      if (state.es !== es) return;
      EV.log("connection lost; reconnecting in 5 s");
      retryLater();
    });
  }

  function retryLater() {
    state.connected = false;
    status("down", "disconnected · retrying every 5 s");
    clearTimeout(state.retry);
    state.retry = setTimeout(function () {
      // ask with a plain request first: a 401 shows the token dialog instead of looping
      EV.api("api/overview").then(function () { state.version = -1; connect(); }, function (e) {
        if (!(e && e.status === 401)) retryLater();
      });
    }, 5000);
  }
  EV.connect = connect;

  // ---- controls

  $("pause").addEventListener("click", function () {
    state.paused = !state.paused;
    $("pause").textContent = state.paused ? "Resume" : "Pause";
    $("pause").classList.toggle("on", state.paused);
    if (state.paused) { state.waiting = 0; status("paused", "paused"); }
    else { status(state.connected ? "live" : "down", state.connected ? "live" : "disconnected · retrying every 5 s"); if (state.waiting) refresh(); state.waiting = 0; }
  });
  /** Another run: every panel, title and the URL switch at once; answers still on their way for the
      run shown before are dropped (EV.api marks them stale). */
  $("run").addEventListener("change", function (e) {
    EV.run = e.target.value;
    EV.runGeneration = (EV.runGeneration || 0) + 1;
    var url = new URL(location.href);
    url.searchParams.set("run", EV.run);
    history.replaceState(null, "", url.pathname + url.search + url.hash);
    state.range = null; state.whole = false; state.task = null; state.worker = ""; state.topic = "";
    showRange();
    $("task-section").hidden = true;
    var w = $("worker"); while (w.options.length > 1) w.remove(1);
    w.removeAttribute("data-sig");
    if (EV.resetReport) EV.resetReport();  // report.js: this run's analysis now, not in 15 s
    if (EV.resetConsole) EV.resetConsole();
    state.refreshing = false;  // a refresh of the other run still under way: its answers are stale
    refresh();
  });
  $("worker").addEventListener("change", function (e) { state.worker = e.target.value; refresh(); });
  /** Zoom the Gantt, and with it every time plot, to [t0, t1] seconds (a drag on a plot). */
  EV.zoomTo = function (t0, t1) {
    if (!(t1 > t0)) return;
    setRange([t0, t1], state.whole);
  };
  function showClock() {
    $("clock").textContent = EV.tz === "utc" ? "UTC" : "local";
    $("clock").title = "Times on this page: " + EV.tzName() + ". Click for " + (EV.tz === "utc" ? "local time" : "UTC") + ".";
    document.body.setAttribute("data-clock", EV.tz);
  }
  showClock();
  /** The clock changed (here, or in another frame or tab of this page: the storage event): every
      panel is drawn again in it at once, the report from the analysis it has. */
  function clockChanged() {
    showClock();
    EV.resetPlots();
    if (EV.gantt.data) EV.gantt.draw();
    if (EV.rerenderReport) EV.rerenderReport();
    refresh();
  }
  $("clock").addEventListener("click", function () {
    EV.setClock(EV.tz === "utc" ? "local" : "utc");
    clockChanged();
  });
  window.addEventListener("storage", function (e) {
    if (e.key !== "evlog-clock") return;
    var tz = e.newValue === "local" ? "local" : "utc";
    if (tz !== EV.tz) { EV.tz = tz; clockChanged(); }
  });
  $("range-tasks").addEventListener("click", function () { setRange(null, false); });
  $("range-run").addEventListener("click", function () { setRange(null, true); });
  $("gantt").addEventListener("dblclick", function () { setRange(null, state.whole); });
  $("task-close").addEventListener("click", function () { state.task = null; $("task-section").hidden = true; });

  // ---- token

  EV.askToken = function () {
    if (!$("token-dialog").hidden) return;
    $("token-error").hidden = !EV.token;
    $("token-dialog").hidden = false;
    if (state.es) state.es.close();
    status("down", "token needed");
    $("token-input").focus();
  };
  $("token-form").addEventListener("submit", function (e) {
    e.preventDefault();
    EV.token = $("token-input").value;
    sessionStorage.setItem("evlog-token", EV.token);
    $("token-dialog").hidden = true;
    start();
  });

  function start() {
    EV.api("api/overview").then(function () { connect(); refresh(); }, function (e) {
      if (e && e.status === 401) return;  // the dialog is up
      status("down", "disconnected · retrying every 5 s");
      message("The evlog server does not answer; retrying every 5 s.");
      setTimeout(start, 5000);
    });
  }

  /** Runs side by side (?compare=run1,run2,...): one dashboard per run, each in a frame of the page
      with its own run selector; ?run=ID opens the dashboard on that run. */
  function sideBySide(runs) {
    document.body.innerHTML = "";
    document.body.setAttribute("data-compare", String(runs.length));
    var clock = EV.el("button", { id: "clock", type: "button" });
    function show() {
      clock.textContent = EV.tz === "utc" ? "UTC" : "local";
      clock.title = "Times in every frame: " + EV.tzName() + ". Click for " + (EV.tz === "utc" ? "local time" : "UTC") + ".";
      document.body.setAttribute("data-clock", EV.tz);
    }
    // one clock for every frame: the frames follow the choice through localStorage's storage event
    clock.addEventListener("click", function () { EV.setClock(EV.tz === "utc" ? "local" : "utc"); show(); });
    window.addEventListener("storage", function (e) { if (e.key === "evlog-clock") { EV.tz = e.newValue === "local" ? "local" : "utc"; show(); } });
    document.body.appendChild(EV.el("header", {}, [EV.el("h1", {}, "evlog"),
      EV.el("span", { "class": "muted" }, runs.length + " runs side by side; each has its own run selector"),
      EV.el("span", { "class": "spacer" }), EV.el("label", {}, ["clock ", clock]), EV.el("a", { href: location.pathname }, "one run")]));
    show();
    var grid = EV.el("div", { "class": "compare", style: "grid-template-columns: repeat(" + runs.length + ", 1fr)" });
    runs.forEach(function (r) {
      grid.appendChild(EV.el("iframe", { src: location.pathname + "?run=" + encodeURIComponent(r), title: "run " + r }));
    });
    document.body.appendChild(grid);
  }
  $("compare").addEventListener("click", function () {
    var sel = $("run"), shown = sel.value;
    var other = Array.prototype.map.call(sel.options, function (o) { return o.value; })
      .filter(function (v) { return v !== shown; })[0];
    location.search = "?compare=" + [shown, other].map(encodeURIComponent).join(",");
  });

  var m = /token=([^&]+)/.exec(location.hash);
  if (m) { EV.token = decodeURIComponent(m[1]); sessionStorage.setItem("evlog-token", EV.token); history.replaceState(null, "", location.pathname + location.search); }
  var params = new URLSearchParams(location.search);
  if (params.has("compare")) {
    sideBySide(params.get("compare").split(",").slice(0, 4));
    return;
  }
  if (params.has("run")) EV.run = params.get("run");
  start();
})();
