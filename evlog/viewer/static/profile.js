/* Where the time went inside the tasks: a flame graph per task prefix (or pool function) of the sampling
   profile (api/profile, evlog/data/panels/flame.py), drawn with d3-flame-graph; the worker selector narrows
   it to one worker, and a clicked task's panel gets a flame graph of that task's own samples. */
"use strict";
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var shown = { label: null, sig: null };
  var asked = 0;  // the latest request: an older answer (another worker's) is never drawn over a newer one

  function label(d) {
    var total = d.parent ? rootOf(d).value : d.value;
    return d.data.name + ": " + EV.duration(d.value / 1000) + " sampled (" + (100 * d.value / (total || 1)).toFixed(1) + "%)";
  }

  function rootOf(d) { while (d.parent) d = d.parent; return d; }

  /** Draws ``tree`` ({name, value (ms), children}) into ``el`` with d3-flame-graph. */
  EV.drawFlame = function (el, tree) {
    el.innerHTML = "";
    var chart = window.flamegraph.default()
      .width(Math.max(320, el.clientWidth || 900))
      .cellHeight(18)
      .transitionDuration(0)
      .minFrameSize(2)
      .sort(true)
      .label(label);
    window.d3.select(el).datum(tree).call(chart);
    el.setAttribute("data-frames", String(el.querySelectorAll("g").length));
    return chart;
  };

  EV.refreshProfile = function () {
    var params = { worker: EV.state.worker, label: shown.label };
    var mine = ++asked;
    return EV.api("api/profile", params).then(function (p) {
      if (mine !== asked) return;
      var section = $("profile-section");
      section.hidden = !p.labels.length;
      if (!p.labels.length) return;
      var labels = $("profile-labels");
      labels.innerHTML = "";
      p.labels.forEach(function (l) {
        labels.appendChild(EV.el("button", { type: "button", "class": l.label === p.label ? "on" : "", "data-label": l.label,
          onclick: function () { shown.label = l.label; EV.refreshProfile(); } },
          l.label + " (" + EV.duration(l.ms / 1000) + ")"));
      });
      $("profile-note").textContent = EV.num(p.samples) + " samples of " + p.label +
        (params.worker ? " on " + params.worker : " on all workers") + "; click a frame to zoom in, the bottom one to zoom out.";
      var sig = JSON.stringify([p.label, params.worker, p.tree]);
      if (sig === shown.sig) return;  // unchanged: keep the reader's zoom
      shown.sig = sig;
      var el = $("flame");
      el.setAttribute("data-label", p.label);
      EV.drawFlame(el, p.tree);
    });
  };

  var TASK_SPAN = /^(dask\.execute|futures\.task|futures\.chunk|multiprocessing\.task|multiprocessing\.chunk) /;

  /** The task panel (panels.js) gets the clicked task's own samples, span by span. */
  var renderTask = EV.renderTask;
  EV.renderTask = function (el, t) {
    renderTask(el, t);
    if (!t.found) return;
    (t.spans || []).filter(function (s) { return TASK_SPAN.test(s.name) && s.span_id; }).forEach(function (s) {
      EV.api("api/profile", { span: s.span_id }).then(function (p) {
        if (!p.samples) return;
        var box = EV.el("div", { "class": "task-flame", "data-span": s.span_id, "data-label": p.label });
        el.appendChild(EV.el("h3", {}, ["Profile of ", EV.el("code", {}, s.name), " (" + EV.num(p.samples) + " samples, " +
          s.process + ")"]));
        el.appendChild(box);
        EV.drawFlame(box, p.tree);
      }).catch(function (e) { EV.log("task profile failed", e); });
    });
  };
})();
