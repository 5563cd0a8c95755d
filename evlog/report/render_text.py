"""The report as text for a terminal: advice first, then each computation's critical path, time by
prefix, stragglers and failures with their stories, then workers, pools, ranks, console metadata."""
from __future__ import annotations

import datetime

from evlog.report.groups import call_name

DETAILED = 10  # computations shown in full (those with failures or stragglers, then the longest)
STORY_LINES = 12  # story lines shown per straggler (failures: all)


def _t(s: float | None, date: bool = False) -> str:
    if s is None:
        return "-"
    t = datetime.datetime.fromtimestamp(s, datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f" if date else "%H:%M:%S.%f")[:-3]


def _d(s: float | None) -> str:
    if not s:
        return "-"
    if s < 1e-4:
        return f"{s * 1e6:.0f} us"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


def _call(x: dict) -> str:
    """``call 17 of `` before a pool straggler's or failure's function, where its chunk span names it."""
    name = call_name(x)
    return f"{name} of " if name else ""


def left_out(why: dict) -> str:
    """What a partial report left out: the run folder is still being written, or was cut short."""
    n = sum(why.values())
    return (f"{n:,} computation{'s' if n != 1 else ''} left out, not whole in what was recorded ("
            + "; ".join(f"{k}: {v:,}" for k, v in why.items()) + ")")


def _ts(s: float | None) -> str:
    """A sum over tasks: task-seconds, never shown as if it were wall time."""
    return "-" if not s else f"{s:.3f} task-s" if s >= 1 else _d(s)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths))).rstrip() for r in rows]


def _section(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    return ["", title] + _table([header] + rows)


def _story(story: list[dict], limit: int | None = None, indent: str = "      ") -> list[str]:
    rows = []
    shown = story if limit is None else story[:limit]
    for e in shown:
        what = f"{e['start']} -> {e['finish']}" if e.get("start") or e.get("finish") else f"[{e['event']}]"
        rows.append([_t(e["time"]), what, str(e.get("stimulus") or e.get("message") or ""), e.get("worker") or "",
                     e.get("process") or ""])
    out = _table(rows, indent)
    if limit is not None and len(story) > limit:
        out.append(f"{indent}... {len(story) - limit} more")
    return out


def _computation(c: dict) -> list[str]:
    out = [f"== {c['name']}: {_d(c['wall_s'])} wall, {_t(c['start'])} .. {_t(c['end'])} UTC"]
    path = c["critical_path"]
    if path:
        out.append(f"Critical path: {len(path)} task{'s' if len(path) != 1 else ''}, {_d(c['critical_path_s'])} of "
                   f"{_d(c.get('critical_path_wall_s', c['wall_s']))} wall ({_pct(c['critical_path_share'])}; computing "
                   f"{_pct(c['critical_path_compute_share'])})")
        rows = [["#", "key", "prefix", "worker", "start", "queued", "transfer", "compute"]]
        for i, r in enumerate(path, 1):
            rel = f"{r['start'] - c['start']:+.3f} s" if r["start"] is not None and c["start"] is not None else "-"
            key = r["key"] if r.get("computation", c["name"]) == c["name"] else f"{r['key']} ({r['computation']})"
            rows.append([str(i), key, r["prefix"], r["worker"] or "-", rel, _d(r["queued_s"]),
                         _d(r["transfer_s"]), _d(r["compute_s"]) + (" (erred)" if r["erred"] else "")])
        out += _table(rows)
    out.append("Time by prefix (sums in task-seconds; queued per task):")
    rows = [["prefix", "tasks", "compute sum / median", "transfer sum / median", "queued median / p95",
             "erred/retried"]]
    for p, s in c["prefixes"].items():
        rows.append([p, f"{s['count']:,}", f"{_ts(s['compute_s'])} / {_d(s['median_compute_s'])}",
                     f"{_ts(s['transfer_s'])} / {_d(s['median_transfer_s'])}",
                     f"{_d(s['median_queued_s'])} / {_d(s.get('p95_queued_s'))}",
                     f"{s['erred']} erred, {s['retried']} retried, {_ts(s['erred_s'])}"
                     if s["erred"] or s["retried"] else "-"])
    out += _table(rows)
    out += _profiles(c["prefixes"])  # the sampling profile's hottest functions per prefix
    out += _activity(c["prefixes"])  # Dask's fine performance metrics: where each prefix's time went
    if c["stragglers"]:
        out.append("Stragglers (over 5x their prefix's median compute, and over 100 ms):")
        for s in c["stragglers"]:
            out.append(f"  {s['key']}  {_d(s['compute_s'])}, {s['ratio']}x the median {_d(s['median_s'])}, "
                       f"on {s['worker']} {s['thread']}".rstrip())
            out += _story(s.get("story") or [], STORY_LINES)
    if c["failures"] or c.get("retries"):
        out.append("Failures and retries:")
        for x in c.get("retries") or []:
            if x["succeeded"]:
                out.append(f"  {x['key']}  {x['exception']}  (failed {x['failed']} of {x['attempts']} attempts, "
                           f"then succeeded; first on {x['worker'] or '?'}, {_t(x['time'])} UTC)")
        for f in c["failures"]:
            what = f"{f['exception']}: {f['message']}" if f["exception"] else f["message"]
            out.append(f"  {f['key']}  {what}  (on {f['worker'] or '?'}, {_t(f['time'])} UTC)")
            for line in (f.get("stacktrace") or "").rstrip().splitlines()[-6:]:
                out.append("      " + line)
            out.append("    story (evlog story " + f["key"] + "):")
            out += _story(f.get("story") or [])
    if c["erred_dependents"]:
        out.append(f"  and {c['erred_dependents']:,} more erred tasks (most because a dependency erred)")
    return out


def render_text(rep: dict) -> str:
    out = [f"evlog report: {rep['source']}"]
    comps = rep["computations"]
    if rep["start"] is not None:
        out.append(f"{_t(rep['start'], True)} .. {_t(rep['end'])} UTC ({_d(rep['wall_s'])}); "
                   f"{len(comps):,} computation{'s' if len(comps) != 1 else ''}, {len(rep['workers'])} workers")
    if rep.get("partial"):
        out.append(f"Partial: {left_out(rep['left_out'])}")
    out.append("")
    out.append("Advice:")
    out += [f"  - {a}" for a in rep["advice"]] or ["  (nothing stands out)"]
    if comps:
        out.append("")
        out.append("Computations:")
        rows = [["name", "wall", "tasks", "critical path", "stragglers", "failures"]]
        for c in comps[:50]:
            rows.append([c["name"], _d(c["wall_s"]), f"{c['tasks']:,}", _pct(c["critical_path_share"]),
                         str(len(c["stragglers"])), str(len(c["failures"]) + c["erred_dependents"])])
        out += _table(rows)
        if len(comps) > 50:
            out.append(f"  ... {len(comps) - 50:,} more (all of them in --format json)")
        chosen = [c for c in comps if c["failures"] or c["stragglers"]]
        chosen += sorted((c for c in comps if c not in chosen), key=lambda c: -(c["wall_s"] or 0))
        chosen = chosen[:DETAILED]
        for c in sorted(chosen, key=lambda c: c["start"] or 0):
            out.append("")
            out += _computation(c)
        if len(comps) > len(chosen):
            out.append("")
            out.append(f"({len(comps) - len(chosen):,} more computations in --format json or html)")
    if rep["workers"]:
        rows = []
        for w in rep["workers"]:
            li = w["longest_idle"]
            rows.append([w["address"], f"{w['tasks']:,}", str(len(w["threads"])), _d(w["busy_s"]),
                         _pct(w["utilisation"]), _pct(w["idle_share"]),
                         f"{_d(li['seconds'])} at {_t(li['start'])}" if li else "-",
                         f"{_d(w['transfer_s'])} ({w['transfer_bytes']:,} B)" if w["transfer_s"] else "-"])
        out += _section("Workers (over the computations' time):", ["worker", "tasks", "threads", "busy", "utilisation",
                        "idle", "longest idle", "transfer in"], rows)
        if rep["most_transfer"]:
            out.append(f"  most transfer time: {rep['most_transfer']['worker']} ({_d(rep['most_transfer']['transfer_s'])})")
    out += _dask_spans(rep.get("dask_spans") or [])  # the program's distributed.span blocks
    p = rep.get("pools")
    if p:
        out += _section("Pools (time by function):", ["function", "kind", "calls", "total", "median", "longest", "erred"],
                        [[fn, f["kind"], f"{f['count']:,}", _d(f["total_s"]), _d(f["median_s"]), _d(f["max_s"]),
                          str(f["erred"])] for fn, f in p["functions"].items()])
        out += _profiles(p["functions"])  # the same per pool function
        for s in p["stragglers"][:10]:
            out.append(f"  straggler: {_call(s)}{s['function']} {_d(s['seconds'])}, {s['ratio']}x the median, in "
                       f"{s['process']} {s['thread']} at {_t(s['start'])}".rstrip())
        for f in p["failures"][:10]:
            out.append(f"  failed: {_call(f)}{f['function']} {f['exception']}: {f['message'][:200]} in {f['process']}")
    r = rep.get("ranks")
    if r:
        out += _section("torch ranks (time by rank):", ["rank", "local", "node", "pids", "time", "spans", "erred"],
                        [[x["rank"], str(x["local_rank"]), str(x["group_rank"]), ",".join(map(str, x["pids"])),
                          _d(x["duration_s"]), str(x["spans"]), str(x["erred"])] for x in r["ranks"]])
        for f in r["failures"][:10]:
            out.append(f"  failed: {f['span']}" + (f" rank {f['rank']}" if f["rank"] is not None else "")
                       + f": {f['exception']} {f['message'][:200]}")
    if rep["metadata"]:
        out.append("")
        out.append("Console metadata (last value and trend):")
        for g in rep["metadata"]:
            out.append(f"  {g['process']} ({g['count']:,} lines, x axis: {g['x']})")
            rows = [["key", "last", "first", "min", "max", "trend"]]
            for k, s in g["keys"].items():
                rows.append([k, f"{s['last']:.6g}", f"{s['first']:.6g}", f"{s['min']:.6g}", f"{s['max']:.6g}",
                             s["trend"]])
            out += _table(rows, "    ")
    out += _what_if(rep)
    return "\n".join(out) + "\n"


def _profiles(groups: dict) -> list[str]:
    """The sampling profile's top functions of each prefix (or pool function) that has one."""
    from evlog.report.profile import SHOWN, rows

    out = []
    for name, g in groups.items():
        prof = g.get("profile")
        if prof and prof["top"]:
            out.append(f"Hottest functions of {name} ({prof['samples']:,} samples, {_d(prof['seconds'])} sampled; "
                       f"top {min(SHOWN, len(prof['top']))} by self time):")
            out += _table([["function", "where", "self", "total"]] + rows(prof))
    return out


# ---- Dask's own vocabulary (evlog.report.activity) ---------------------------------------------

def _activity(prefixes: dict) -> list[str]:
    """One line per prefix: where its task time went, by Dask's fine performance metrics."""
    from evlog.report.activity import line

    lines = [line(p, s["activity_s"]) for p, s in prefixes.items() if s.get("activity_s")]
    lines = [x for x in lines if x]
    return ["Where the task time went (Dask's fine performance metrics):"] + [f"  {x}" for x in lines] if lines else []


def _dask_spans(spans: list[dict]) -> list[str]:
    """The program's Dask spans: wall time, its tasks' time and where it went."""
    from evlog.report.activity import line

    rows = [[" / ".join(s["name"]), _t(s["start"]), _d(s["wall_s"]), _d(s["execute_s"]),
             line("", s["activity_s"])[2:] or "-"] for s in spans]
    return _section("Dask spans (distributed.span; a span's figures include its sub-spans'):",
                    ["span", "start", "wall", "task time", "where it went"], rows) if rows else []


# ---- what-if (evlog.report.whatif_run) ----------------------------------------------------------


def _what_if(rep: dict) -> list[str]:
    """The shapes asked with --what-if: predicted against recorded time, what limits each; the
    model's inputs; per computation when there are several."""
    from evlog.report.whatif_run import limit_words, model_words, shape_name

    entries = rep.get("what_if")
    if not entries:
        return []
    out = ["", "What if (the recorded run replayed on other shapes; docs/report.md, \"What-if\"):"]
    rows = [["shape", "predicted", "recorded", "limited by"]]
    rows += [[shape_name(e), _d(e["predicted_s"]), _d(e["recorded_s"]), limit_words(e)] for e in entries]
    out += _table(rows)
    out += [f"  {line}" for line in model_words(rep.get("what_if_model") or {})]
    comps = [c for c in rep["computations"] if c.get("what_if")]
    if len(comps) > 1:
        shapes = [shape_name(e) for e in comps[0]["what_if"]]
        out.append("  per computation (predicted):")
        rows = [["name", "recorded"] + shapes]
        for c in sorted(comps, key=lambda c: -(c["wall_s"] or 0))[:DETAILED]:
            rows.append([c["name"], _d(c["wall_s"])] + [_d(e["predicted_s"]) for e in c["what_if"]])
        out += _table(rows, "    ")
        if len(comps) > DETAILED:
            out.append(f"    ... {len(comps) - DETAILED:,} more (all of them in --format json)")
    return out
