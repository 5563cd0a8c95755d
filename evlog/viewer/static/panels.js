/* Text panels: the run's counts, one task's story (its spans, transitions and events), and the
   events by topic (as Dask's get_events lists them). */
"use strict";
(function () {
  EV.renderCounts = function (el, ov) {
    var s = ov.summary, r = ov.receiver || {};
    var parts = [
      ["spans", s.spans], ["events", s.events], ["logs", s.logs], ["metric points", s.metric_points],
      ["processes", s.processes], ["traces", s.traces], ["task keys", s.tasks]];
    el.innerHTML = "";
    parts.forEach(function (p) {
      el.appendChild(EV.el("span", { id: "count-" + p[0].replace(" ", "-") }, [EV.el("b", {}, EV.num(p[1])), " " + p[0] + "  "]));
    });
    if (s.start) el.appendChild(EV.el("span", {}, " · " + EV.clock(s.start, true) + " → " + EV.clock(s.end) + " " + EV.tzName() + " (" + EV.duration(s.end - s.start) + ")"));
    var bad = (r.rejected || 0) + (r.sink_errors || 0) + (r.corrupt_lines || 0) + (r.write_errors || 0);
    if (bad) el.appendChild(EV.el("span", { "class": "error" },
      " · " + (r.rejected ? r.rejected + " requests rejected " : "") + (r.corrupt_lines ? r.corrupt_lines + " corrupt lines skipped " : "") +
      (r.write_errors ? r.write_errors + " rows not stored" : "")));
  };

  EV.renderTask = function (el, t) {
    el.innerHTML = "";
    if (!t.found) { el.appendChild(EV.el("p", { "class": "error" }, t.error || "not found")); return; }
    el.appendChild(EV.el("h3", {}, "Spans"));
    var spansTable = EV.table(["span", "process", "worker", "thread", "start (" + EV.tzShort() + ")", "duration", "status"],
      t.spans.map(function (s) {
        return [s.name, s.process, s.worker || "", s.thread || "", EV.clock(s.start, true), EV.duration(s.end - s.start),
          s.status_code + (s.status_message ? ": " + s.status_message : "")];
      }), function (i) { return t.spans[i].status_code === "ERROR" ? "err" : ""; });
    el.appendChild(spansTable);
    if (EV.renderSpanDetails) EV.renderSpanDetails(el, t, spansTable);  // details.js: exception, attributes
    el.appendChild(EV.el("h3", {}, "Story (transitions, in time order)"));
    var story = EV.table(["time (" + EV.tzShort() + ")", "start", "finish", "stimulus", "worker", "process"], t.story.map(function (e) {
      return e.start === null && e.finish === null
        ? [EV.clock(e.time, true), "[" + e.event + "]", "", e.stimulus || "", e.worker, e.process]
        : [EV.clock(e.time, true), e.start, e.finish, e.stimulus || "", e.worker, e.process];
    }), function (i) { return t.story[i].finish === "erred" ? "err" : ""; });
    story.id = "story";
    el.appendChild(t.story.length ? story : EV.el("p", { "class": "muted" }, "No transitions recorded."));
    el.appendChild(EV.el("h3", {}, "Events"));
    el.appendChild(t.events.length ? EV.table(["time (" + EV.tzShort() + ")", "event", "topic", "message", "process"], t.events.map(function (e) {
      return [EV.clock(e.time, true), e.event_name, e.topic || "", EV.msg(e.body), e.process];
    })) : EV.el("p", { "class": "muted" }, "No events inside this task."));
  };

  EV.renderEvents = function (topicsEl, listEl, data, current, onTopic) {
    topicsEl.innerHTML = "";
    var total = data.topics.reduce(function (a, t) { return a + t.count; }, 0);
    [{ topic: "", count: total }].concat(data.topics).forEach(function (t) {
      topicsEl.appendChild(EV.el("button", { type: "button", "class": (t.topic || "") === (current || "") ? "on" : "",
        "data-topic": t.topic, onclick: function () { onTopic(t.topic); } }, (t.topic || "all topics") + " (" + EV.num(t.count) + ")"));
    });
    listEl.innerHTML = "";
    if (!data.events.length) { listEl.appendChild(EV.el("p", { "class": "muted" }, "No events with a topic yet.")); return; }
    var tbl = EV.table(["time (" + EV.tzShort() + ")", "topic", "message", "process"], data.events.map(function (e) {
      return [EV.clock(e.time, true), e.topic, EV.msg(e.body), e.process];
    }));
    listEl.appendChild(EV.el("div", { "class": "scroll" }, tbl));
    if (data.events.length >= 500) listEl.appendChild(EV.el("p", { "class": "hint" }, "Newest 500 shown; `evlog events` prints them all."));
  };
})();
