/* The parts of a task's story that come from its spans' own data: the exception (type, message and
   stack trace, from the span's `exception` events) and each span's attributes, shown when its row in
   the spans table is clicked (the span of the clicked Gantt bar is shown at once). */
"use strict";
(function () {
  /** Adds the exception and attribute boxes after ``spansTable`` (the story's spans table). */
  EV.renderSpanDetails = function (el, t, spansTable) {
    var seen = {}, errs = [];
    t.spans.forEach(function (s) {
      (s.exceptions || []).forEach(function (x) {
        var k = x.type + "\n" + x.message + "\n" + x.stacktrace;
        if (seen[k]) { seen[k].where.push(s.process); return; }
        seen[k] = { x: x, where: [s.process] };
        errs.push(seen[k]);
      });
    });
    if (errs.length) {
      el.appendChild(EV.el("h3", {}, "Exception"));
      errs.forEach(function (e) {
        el.appendChild(EV.el("div", { "class": "exception" }, [
          EV.el("p", {}, [EV.el("b", { "class": "error exc-type" }, e.x.type || "error"),
            e.x.message ? ": " : "", EV.el("span", { "class": "exc-message" }, e.x.message),
            EV.el("span", { "class": "muted" }, "  (" + e.where.join(", ") + ")")]),
          e.x.stacktrace ? EV.el("pre", { "class": "stacktrace" }, e.x.stacktrace)
            : EV.el("p", { "class": "muted" }, "No stack trace recorded."),
        ]));
      });
    }
    var box = EV.el("div", { id: "span-attrs", "class": "span-attrs" });
    el.appendChild(box);
    var rows = spansTable.querySelectorAll("tbody tr");
    function show(i) {
      Array.prototype.forEach.call(rows, function (r, j) { r.classList.toggle("picked", j === i); });
      var s = t.spans[i];
      box.innerHTML = "";
      box.appendChild(EV.el("h3", {}, ["Attributes of ", EV.el("code", {}, s.name), " (" + s.process + ")"]));
      var ids = [["trace_id", s.trace_id], ["span_id", s.span_id], ["parent_span_id", s.parent_span_id || ""], ["kind", s.kind]];
      var attrs = Object.keys(s.attributes || {}).sort().map(function (k) {
        var v = s.attributes[k];
        return [k, EV.msg(typeof v === "string" ? v : JSON.stringify(v))];
      });
      box.appendChild(EV.table(["attribute", "value"], attrs.concat(ids.map(function (p) { return [p[0], EV.msg(String(p[1]))]; }))));
    }
    Array.prototype.forEach.call(rows, function (r, i) {
      r.classList.add("clickable");
      r.title = "Click for this span's attributes";
      r.addEventListener("click", function () { show(i); });
    });
    var want = EV.state && EV.state.task && EV.state.task.id;
    var first = t.spans.findIndex(function (s) { return want && String(s.id) === String(want); });
    if (first >= 0) show(first);
    else box.appendChild(EV.el("p", { "class": "hint" }, "Click a span above for its attributes."));
  };
})();
