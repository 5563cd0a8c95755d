"""The report as one self-contained HTML page: tables rendered here (readable without JavaScript),
charts drawn in the page by the dashboard's vendored uPlot, inlined with its CSS, so the page works
offline and from a mail attachment. The report's JSON is embedded too (``<script id="report-data">``).
"""
from __future__ import annotations

import html
import json
from importlib import resources

from evlog.report.render_text import _call, _d, _pct, _t, _ts, left_out

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2733;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d5dbe3}
h3{font-size:15px;margin:16px 0 6px} .muted{color:#5b6877}
table{border-collapse:collapse;margin:4px 0 10px} th,td{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{font-weight:600;border-bottom:1px solid #d5dbe3} td.n{text-align:right;font-variant-numeric:tabular-nums}
ul.advice li{margin:3px 0} ul.advice{background:#fff8e1;border-left:4px solid #f0a800;padding:8px 8px 8px 28px}
table.critical-path tr.cp td{background:#fdecea} table.critical-path tr.cp td:first-child{border-left:4px solid #d93025}
.timeline{position:relative;height:auto;border:1px solid #d5dbe3;background:#f7f9fb;margin:6px 0 4px;
  padding:4px 0;max-width:1100px}
.tl-row{position:relative;height:18px;margin:2px 0}
.cp-bar{position:absolute;height:16px;top:1px;display:flex;min-width:2px;border-radius:2px;overflow:hidden}
.cp-bar span{height:100%} .seg-q{background:#f6c26b} .seg-x{background:#8e6bd6} .seg-c{background:#d93025}
.seg-e{background:#5b6877} .cp-label{position:absolute;font-size:11px;white-space:nowrap;top:1px;color:#1d2733}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;vertical-align:middle}
details{margin:2px 0 6px} summary{cursor:pointer} pre{background:#f7f9fb;padding:6px;overflow:auto;font-size:12px}
.chart{margin:6px 0}
"""

_JS = """
(function(){
  const R = JSON.parse(document.getElementById('report-data').textContent);
  function plot(el, title, xs, series, xTime){
    if (!xs.length || typeof uPlot === 'undefined') return;
    const width = Math.min(1100, el.clientWidth || 900);
    const colors = ['#d93025','#1a73e8','#188038','#f0a800','#8e6bd6','#5b6877'];
    const opts = {title, width, height: 220, scales: {x: {time: xTime}},
      series: [{label: xTime ? 'time' : 'x'}].concat(series.map((s, i) => ({label: s.label,
        stroke: colors[i % colors.length], width: 1.5, points: {show: false},
        paths: s.step ? uPlot.paths.stepped({align: 1}) : undefined})))};
    new uPlot(opts, [xs].concat(series.map(s => s.values)), el);
  }
  document.querySelectorAll('.chart[data-comp]').forEach(el => {
    const c = R.computations[+el.dataset.comp];
    plot(el, 'tasks running', c.running.t, [{label: 'tasks running', values: c.running.n, step: true}], true);
  });
  document.querySelectorAll('.chart[data-meta]').forEach(el => {
    const g = R.metadata[+el.dataset.meta];
    const keys = Object.keys(g.series);
    plot(el, g.process, g.xs, keys.map(k => ({label: k, values: g.series[k]})), g.x === 'time');
  });
  document.querySelectorAll('.chart[data-what-if]').forEach(el => {
    // what-if: predicted time against workers, the recorded run as a point (evlog.report.whatif_run)
    const w = R.what_if_curve;
    if (!w || typeof uPlot === 'undefined') return;
    const recorded = w.workers.map(x => x === w.recorded.workers ? w.recorded.seconds : null);
    new uPlot({title: 'predicted time against workers (' + w.threads + ' thread' + (w.threads === 1 ? '' : 's') + ' each)',
      width: Math.min(1100, el.clientWidth || 900), height: 240, scales: {x: {time: false}},
      axes: [{label: 'workers', incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]}, {label: 'seconds'}],
      series: [{label: 'workers'}, {label: 'predicted', stroke: '#1a73e8', width: 2},
               {label: 'recorded', stroke: '#d93025', paths: () => null, points: {show: true, size: 10, fill: '#d93025'}}]},
      [w.workers, w.predicted_s, recorded], el);
  });
  document.body.dataset.charts = 'done';
})();
"""

DETAILED = 20  # computations drawn in full on the page


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def _table(header: list[str], rows: list[list], cls: str = "", row_attrs: list[str] | None = None,
           numeric: set | None = None) -> str:
    numeric = numeric or set()
    out = [f'<table class="{cls}">' if cls else "<table>", "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header)
           + "</tr>"]
    for i, r in enumerate(rows):
        attrs = (" " + row_attrs[i]) if row_attrs else ""
        out.append(f"<tr{attrs}>" + "".join(f'<td class="n">{_e(c)}</td>' if j in numeric else f"<td>{_e(c)}</td>"
                                            for j, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _story(story: list[dict]) -> str:
    rows = [[_t(e["time"]), f"{e['start']} -> {e['finish']}" if e.get("start") or e.get("finish") else f"[{e['event']}]",
             e.get("stimulus") or e.get("message") or "", e.get("worker") or "", e.get("process") or ""] for e in story]
    return _table(["time (UTC)", "transition", "stimulus", "worker", "process"], rows, "story")


def _timeline(c: dict) -> str:
    """The critical path as bars on the computation's time axis: queued, transfer, compute."""
    t0 = c.get("critical_path_start") or c["start"]  # earlier than the call when the path began in another
    wall = c.get("critical_path_wall_s") or c["wall_s"] or 1e-9
    out = ['<div class="timeline" data-role="critical-path-timeline">']
    for r in c["critical_path"]:
        ready = r["ready"] if r["ready"] is not None else r["start"]
        if ready is None or r["end"] is None:
            continue
        left = max(0.0, (ready - t0) / wall * 100)
        width = max(0.2, (r["end"] - ready) / wall * 100)
        total = max(1e-9, r["queued_s"] + r["transfer_s"] + r["compute_s"] + r["erred_s"])
        segs = "".join(f'<span class="{cls}" style="width:{v / total * 100:.2f}%"></span>'
                       for cls, v in (("seg-q", r["queued_s"]), ("seg-x", r["transfer_s"]),
                                      ("seg-c", r["compute_s"]), ("seg-e", r["erred_s"])) if v > 0)
        tip = (f"{r['key']}: queued {_d(r['queued_s'])}, transfer {_d(r['transfer_s'])}, "
               f"compute {_d(r['compute_s'])}")
        end = left + width
        place = f"left:{end + 0.5:.2f}%" if end < 80 else f"right:{100 - left + 0.5:.2f}%"
        out.append(f'<div class="tl-row"><div class="cp-bar" data-key="{_e(r["key"])}" title="{_e(tip)}" '
                   f'style="left:{left:.3f}%;width:{width:.3f}%">{segs}</div>'
                   f'<span class="cp-label" style="{place}">{_e(r["key"])}</span></div>')
    out.append("</div>")
    out.append('<div class="legend muted">critical path:<span class="seg-q"></span>queued<span class="seg-x"></span>'
               'transfer<span class="seg-c"></span>compute<span class="seg-e"></span>erred/retried</div>')
    return "\n".join(out)


def _computation(i: int, c: dict) -> str:
    out = [f'<section class="computation" id="computation-{i}" data-name="{_e(c["name"])}">',
           f"<h2>{_e(c['name'])}</h2>",
           f'<p class="muted">{_d(c["wall_s"])} wall, {_t(c["start"])} .. {_t(c["end"])} UTC, '
           f'{c["tasks"]:,} task{"s" if c["tasks"] != 1 else ""}; '
           f'trace {_e(c["trace_id"])}</p>']
    if c["advice"]:
        out.append('<ul class="advice">' + "".join(f"<li>{_e(a)}</li>" for a in c["advice"]) + "</ul>")
    path = c["critical_path"]
    if path:
        out.append(f"<h3>Critical path: {len(path)} task{'s' if len(path) != 1 else ''}, {_d(c['critical_path_s'])} "
                   f"of {_d(c.get('critical_path_wall_s', c['wall_s']))} wall ({_pct(c['critical_path_share'])}; computing "
                   f"{_pct(c['critical_path_compute_share'])})</h3>")
        out.append(_timeline(c))
        rows = [[n, r["key"], r["prefix"], r["worker"] or "-",
                 f"{r['start'] - c['start']:+.3f} s" if r["start"] is not None else "-",
                 _d(r["queued_s"]), _d(r["transfer_s"]), _d(r["compute_s"]) + (" (erred)" if r["erred"] else "")]
                for n, r in enumerate(path, 1)]
        out.append(_table(["#", "key", "prefix", "worker", "start", "queued", "transfer", "compute"], rows,
                          "critical-path", [f'class="cp" data-key="{_e(r["key"])}"' for r in path], {0, 4, 5, 6, 7}))
    out.append(f'<div class="chart" data-comp="{i}"></div>')
    out.append("<h3>Time by prefix (sums in task-seconds; queued per task)</h3>")
    rows = [[p, f"{s['count']:,}", f"{_ts(s['compute_s'])} / {_d(s['median_compute_s'])}",
             f"{_ts(s['transfer_s'])} / {_d(s['median_transfer_s'])}",
             f"{_d(s['median_queued_s'])} / {_d(s.get('p95_queued_s'))}",
             f"{s['erred']} erred, {s['retried']} retried, {_ts(s['erred_s'])}" if s["erred"] or s["retried"] else "-"]
            for p, s in c["prefixes"].items()]
    out.append(_table(["prefix", "tasks", "compute sum / median", "transfer sum / median", "queued median / p95",
                       "erred/retried"], rows, "prefixes", numeric={1}))
    out += _profiles(c["prefixes"])  # the sampling profile's hottest functions per prefix
    out += _activity(c["prefixes"])  # Dask's fine performance metrics: where each prefix's time went
    if c["stragglers"]:
        out.append("<h3>Stragglers</h3>")
        for s in c["stragglers"]:
            out.append(f'<details class="straggler" data-key="{_e(s["key"])}"><summary><b>{_e(s["key"])}</b> '
                       f"{_d(s['compute_s'])}, {s['ratio']}x the median {_d(s['median_s'])}, on {_e(s['worker'])} "
                       f"{_e(s['thread'])}</summary>{_story(s.get('story') or [])}</details>")
    if c["failures"] or c.get("retries"):
        out.append("<h3>Failures and retries</h3>")
        for x in c.get("retries") or []:
            if x["succeeded"]:
                out.append(f'<details class="retry" data-key="{_e(x["key"])}"><summary><b>{_e(x["key"])}</b> '
                           f"{_e(x['exception'])} (failed {x['failed']} of {x['attempts']} attempts, then succeeded; "
                           f"first on {_e(x['worker'] or '?')})</summary>{_story(x.get('story') or [])}</details>")
        for f in c["failures"]:
            what = f"{f['exception']}: {f['message']}" if f["exception"] else f["message"]
            out.append(f'<details class="failure" data-key="{_e(f["key"])}" open><summary><b>{_e(f["key"])}</b> '
                       f"{_e(what)} (on {_e(f['worker'])})</summary><pre>{_e(f.get('stacktrace') or '')}</pre>"
                       f"{_story(f.get('story') or [])}</details>")
    if c["erred_dependents"]:
        out.append(f"<p>and {c['erred_dependents']:,} more erred tasks (most because a dependency erred)</p>")
    out.append("</section>")
    return "\n".join(out)


def _vendor(name: str) -> str:
    return (resources.files("evlog.viewer") / "static" / "vendor" / "uplot" / name).read_text(encoding="utf-8")


def render_html(rep: dict) -> str:
    comps = rep["computations"]
    chosen = [i for i, c in enumerate(comps) if c["failures"] or c["stragglers"]]
    chosen += sorted((i for i in range(len(comps)) if i not in chosen), key=lambda i: -(comps[i]["wall_s"] or 0))
    chosen = sorted(chosen[:DETAILED])
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>evlog report: {_e(rep['source'])}</title>",
             f"<style>{_vendor('uPlot.min.css')}\n{_CSS}</style></head><body>",
             "<h1>evlog report</h1>",
             f'<p class="muted">{_e(rep["source"])}<br>{_t(rep["start"], True)} .. {_t(rep["end"])} UTC '
             f'({_d(rep["wall_s"])}); {len(comps):,} computations, {len(rep["workers"])} workers</p>',
             f'<p class="partial">Partial: {_e(left_out(rep["left_out"]))}</p>' if rep.get("partial") else "",
             '<section id="advice"><h2>Advice</h2>',
             ('<ul class="advice">' + "".join(f"<li>{_e(a)}</li>" for a in rep["advice"]) + "</ul>")
             if rep["advice"] else "<p>Nothing stands out.</p>", "</section>"]
    if comps:
        rows = [[c["name"], _d(c["wall_s"]), f"{c['tasks']:,}", _pct(c["critical_path_share"]),
                 len(c["stragglers"]), len(c["failures"]) + c["erred_dependents"]] for c in comps[:200]]
        parts.append('<section id="computations"><h2>Computations</h2>'
                     + _table(["name", "wall", "tasks", "critical path", "stragglers", "failures"], rows, "computations",
                              numeric={1, 2, 3, 4, 5}) + "</section>")
        parts += [_computation(i, comps[i]) for i in chosen]
    if rep["workers"]:
        rows = [[w["address"], f"{w['tasks']:,}", len(w["threads"]), _d(w["busy_s"]), _pct(w["utilisation"]),
                 _pct(w["idle_share"]), f"{_d(w['longest_idle']['seconds'])} at {_t(w['longest_idle']['start'])}"
                 if w["longest_idle"] else "-", f"{_d(w['transfer_s'])} ({w['transfer_bytes']:,} B)"
                 if w["transfer_s"] else "-"] for w in rep["workers"]]
        parts.append('<section id="workers"><h2>Workers</h2>' + _table(
            ["worker", "tasks", "threads", "busy", "utilisation", "idle", "longest idle", "transfer in"], rows,
            "workers", numeric={1, 2, 3, 4, 5}) + "</section>")
    parts += _dask_spans(rep.get("dask_spans") or [])  # the program's distributed.span blocks
    p = rep.get("pools")
    if p:
        rows = [[fn, f["kind"], f"{f['count']:,}", _d(f["total_s"]), _d(f["median_s"]), _d(f["max_s"]), f["erred"]]
                for fn, f in p["functions"].items()]
        parts.append('<section id="pools"><h2>Pools: time by function</h2>' + _table(
            ["function", "kind", "calls", "total", "median", "longest", "erred"], rows, "pools", numeric={2, 3, 4, 5, 6})
            + "".join(_profiles(p["functions"]))  # the same per pool function
            + "".join(f"<p>straggler: {_e(_call(s))}{_e(s['function'])} {_d(s['seconds'])}, {s['ratio']}x the median, in "
                      f"{_e(s['process'])} {_e(s['thread'])}</p>" for s in p["stragglers"][:20])
            + "".join(f"<details open><summary>failed: {_e(_call(f))}{_e(f['function'])} {_e(f['exception'])}: {_e(f['message'])}"
                      f"</summary><pre>{_e(f['stacktrace'])}</pre></details>" for f in p["failures"][:20])
            + "</section>")
    r = rep.get("ranks")
    if r:
        rows = [[x["rank"], x["local_rank"], x["group_rank"], ",".join(map(str, x["pids"])), _d(x["duration_s"]),
                 x["spans"], x["erred"]] for x in r["ranks"]]
        parts.append('<section id="ranks"><h2>torch ranks: time by rank</h2>' + _table(
            ["rank", "local", "node", "pids", "time", "spans", "erred"], rows, "ranks", numeric={4, 5, 6})
            + "".join(f"<p>failed: {_e(f['span'])} rank {_e(f['rank'])}: {_e(f['exception'])} {_e(f['message'])}</p>"
                      for f in r["failures"][:20]) + "</section>")
    if rep["metadata"]:
        parts.append('<section id="metadata"><h2>Console metadata</h2>')
        for i, g in enumerate(rep["metadata"]):
            rows = [[k, f"{s['last']:.6g}", f"{s['first']:.6g}", f"{s['min']:.6g}", f"{s['max']:.6g}", s["trend"]]
                    for k, s in g["keys"].items()]
            parts.append(f"<h3>{_e(g['process'])} ({g['count']:,} lines, x axis: {_e(g['x'])})</h3>"
                         + _table(["key", "last", "first", "min", "max", "trend"], rows, "metadata")
                         + f'<div class="chart" data-meta="{i}"></div>')
        parts.append("</section>")
    parts += _what_if(rep)
    data = json.dumps(rep, default=str).replace("<", "\\u003c")
    parts.append(f'<script id="report-data" type="application/json">{data}</script>')
    parts.append(f"<script>{_vendor('uPlot.iife.min.js')}</script>")
    parts.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(parts) + "\n"


def _profiles(groups: dict) -> list[str]:
    """The sampling profile's top functions of each prefix (or pool function) that has one."""
    from evlog.report.profile import SHOWN, rows

    out = []
    for name, g in groups.items():
        prof = g.get("profile")
        if prof and prof["top"]:
            out.append(f'<h4>Hottest functions of {_e(name)} <span class="muted">({prof["samples"]:,} samples, '
                       f'{_d(prof["seconds"])} sampled; top {min(SHOWN, len(prof["top"]))} by self time)</span></h4>')
            out.append(_table(["function", "where", "self", "total"], rows(prof), "profile", numeric={2, 3}))
    return out


# ---- Dask's own vocabulary (evlog.report.activity) ---------------------------------------------

def _activity(prefixes: dict) -> list[str]:
    """One line per prefix: where its task time went, by Dask's fine performance metrics."""
    from evlog.report.activity import line

    lines = [line(p, s["activity_s"]) for p, s in prefixes.items() if s.get("activity_s")]
    lines = [x for x in lines if x]
    if not lines:
        return []
    return ["<h3>Where the task time went <span class=\"muted\">(Dask's fine performance metrics)</span></h3>",
            '<ul class="activity">' + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul>"]


def _dask_spans(spans: list[dict]) -> list[str]:
    """The program's Dask spans: wall time, its tasks' time and where it went."""
    from evlog.report.activity import line

    if not spans:
        return []
    rows = [[" / ".join(s["name"]), _t(s["start"]), _d(s["wall_s"]), _d(s["execute_s"]),
             line("", s["activity_s"])[2:] or "-"] for s in spans]
    return ['<section id="dask-spans"><h2>Dask spans <span class="muted">(distributed.span; a span\'s figures '
            "include its sub-spans')</span></h2>"
            + _table(["span", "start (UTC)", "wall", "task time", "where it went"], rows, "dask-spans", numeric={2, 3})
            + "</section>"]


# ---- what-if (evlog.report.whatif_run) ----------------------------------------------------------

def _what_if(rep: dict) -> list[str]:
    """The shapes asked with --what-if: a table of predicted against recorded time and what limits
    each, the model's inputs, and the curve of predicted time against workers (drawn in the page)."""
    from evlog.report.whatif_run import limit_words, model_words, shape_name

    entries = rep.get("what_if")
    if not entries:
        return []
    rows = [[shape_name(e), _d(e["predicted_s"]), _d(e["recorded_s"]), limit_words(e)] for e in entries]
    out = ['<section id="what-if"><h2>What if</h2>',
           '<p class="muted">The recorded run replayed on other shapes (docs/report.md, "What-if").</p>',
           _table(["shape", "predicted", "recorded", "limited by"], rows, "what-if", numeric={1, 2})]
    out += [f'<p class="muted">{_e(line)}</p>' for line in model_words(rep.get("what_if_model") or {})]
    if rep.get("what_if_curve"):
        out.append('<div class="chart" data-what-if="1"></div>')
    comps = [c for c in rep["computations"] if c.get("what_if")]
    if len(comps) > 1:
        shapes = [shape_name(e) for e in comps[0]["what_if"]]
        rows = [[c["name"], _d(c["wall_s"])] + [_d(e["predicted_s"]) for e in c["what_if"]] for c in comps[:200]]
        out.append("<h3>Per computation (predicted)</h3>" + _table(["name", "recorded"] + shapes, rows,
                                                                   "what-if-computations",
                                                                   numeric=set(range(1, len(shapes) + 2))))
    out.append("</section>")
    return out
