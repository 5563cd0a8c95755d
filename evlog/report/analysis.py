"""The report's content from decoded rows: per computation the critical path, time by prefix,
stragglers, failures and advice; the workers' utilisation, idle gaps and transfers; console
metadata trends; pools and torch ranks (evlog.report.groups). docs/report.md defines every figure.

``analyse(spans, logs)`` returns a plain dict (the JSON of `evlog report --format json`): times are
Unix seconds, durations seconds. Pure functions over otlp_decode's rows.
"""
from __future__ import annotations

import statistics

from evlog.data.exception_text import split_exception
from evlog.data.intervals import merge
from evlog.data.panels.metadata import metadata_graphs  # the dashboard's own x-axis rules

from . import groups, profile
from .common import (
    MAX_LISTED,
    MAX_STORY,
    NS,
    STRAGGLER_MIN_COUNT,
    STRAGGLER_MIN_S,
    STRAGGLER_RATIO,
    dur,
    label,
    ms,
    pct,
    process_name,
    secs,
)
from .model import Computation, Task, build, union_ns


def analyse(spans: list[dict], logs: list[dict], source: str = "") -> dict:
    return analyse_with_model(spans, logs, source)[0]


def analyse_with_model(spans: list[dict], logs: list[dict], source: str = "", comps: list[Computation] | None = None,
                       left_out: dict | None = None) -> tuple[dict, list[Computation]]:
    """``analyse``, and the computations it found (evlog.report.model), for what-if (whatif_run).
    ``comps``: the computations already built from ``spans`` (evlog.report.whole), and ``left_out``
    ({why: computations}) those left out as not whole: the report says it is partial."""
    if comps is None:
        comps = build(spans)
    made = made_by(comps)
    out_comps = [computation(c, made) for c in comps]
    told = [x for c in out_comps for x in c["stragglers"] + c["failures"] + c["retries"]]
    stories = _stories(spans, {x["key"] for x in told})
    for x in told:
        x["story"] = stories.get(x["key"], [])
    ws = workers(comps)
    most = max(ws, key=lambda w: w["transfer_s"], default=None)
    most = {"worker": most["address"], "transfer_s": most["transfer_s"]} if most and most["transfer_s"] > 0 else None
    pools = groups.pools(spans)
    ranks = groups.ranks(spans, logs)
    meta = metadata(logs)
    profile.attach(out_comps, comps, pools, logs)  # the hottest functions per prefix, from the sampling profile
    advice = [a for c in out_comps for a in c["advice"]]
    advice += worker_advice(ws, comps)
    if pools:
        advice += pools["advice"]
    if ranks:
        advice += ranks["advice"]
    times = [x for c in comps for x in (c.start, c.end) if x is not None]
    for part in (pools, ranks):
        if part and part.get("start") is not None:
            times += [int(part["start"] * NS), int(part["end"] * NS)]
    start, end = (min(times), max(times)) if times else (None, None)
    out = {
        "source": source,
        "start": secs(start), "end": secs(end),
        "wall_s": dur(end - start) if start is not None and end is not None else None,
        "partial": bool(left_out), "left_out": dict(left_out or {}),
        "computations": out_comps,
        "workers": ws,
        "most_transfer": most,
        "pools": pools,
        "ranks": ranks,
        "metadata": meta,
        "advice": advice,
    }
    return out, comps


# -------------------------------------------------------------------------------------------------
# one computation


def critical_path(c: Computation, made: dict | None = None) -> list[Task]:
    """Backwards from the task that finished last, each step to the dependency that finished last: the
    one the task was waiting for. A dependency made by an earlier client call (futures submitted one
    call at a time) is followed into that call's computation: ``made`` is key -> the lives that
    computed it, in every computation (``made_by``)."""
    tasks = c.tasks
    ended = [(x, end) for x in tasks.values() if (end := x.end) is not None]
    if not ended:
        return []
    t, t_end = max(ended, key=lambda xe: xe[1])
    path, seen = [t], {t.key}
    while True:
        best: tuple[Task, int] | None = None
        for k in t.deps:
            d = (t.comp or c).tasks.get(k)
            d_end = d.end if d is not None else None
            if d_end is None and made:
                d, d_end = max(((x, end) for x in made.get(k, ()) if (end := x.end) is not None and end <= t_end),
                               key=lambda xe: xe[1], default=(None, None))
            if d is not None and d_end is not None and d.key not in seen and (best is None or d_end > best[1]):
                best = d, d_end
        if best is None:
            break
        t, t_end = best
        path.append(t)
        seen.add(t.key)
    path.reverse()
    return path


def made_by(comps: list[Computation]) -> dict:
    """key -> the task lives (one per computation) that stand for it: where a dependency was made."""
    out: dict = {}
    for c in comps:
        for k, t in c.tasks.items():
            out.setdefault(k, []).append(t)
    return out


def _task_row(t: Task, c: Computation) -> dict:
    return {
        "key": t.key, "prefix": t.prefix, "worker": t.exec_worker,
        "computation": c.name if t.comp is None or t.comp is c else t.comp.name,
        "ready": secs(t.ready), "start": secs(t.exec_start if t.exec_start is not None else t.ready),
        "end": secs(t.end), "compute_s": dur(t.compute_ns), "transfer_s": dur(t.transfer_ns),
        "queued_s": dur(t.queued_ns), "erred_s": dur(t.erred_ns), "erred": t.erred,
    }


def _median(xs: list) -> float:
    return statistics.median(xs) if xs else 0.0


def _p95(xs: list) -> float:
    """The 95th percentile (nearest rank): a figure a few slow tasks move, unlike the median."""
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, -(-95 * len(xs) // 100) - 1))]


def prefixes(c: Computation) -> dict:
    by: dict[str, list[Task]] = {}
    for t in c.tasks.values():
        by.setdefault(t.prefix, []).append(t)
    out = {}
    for p, ts in sorted(by.items(), key=lambda kv: -sum(t.compute_ns + t.erred_ns for t in kv[1])):
        ran = [t for t in ts if t.executions]
        out[p] = {
            "count": len(ts),
            "compute_s": dur(sum(t.compute_ns for t in ts)),
            "transfer_s": dur(sum(t.transfer_ns for t in ts)),
            "queued_s": dur(sum(t.queued_ns for t in ts)),
            "erred_s": dur(sum(t.erred_ns for t in ts)),
            "erred": sum(1 for t in ts if t.erred),
            "retried": sum(len(t.executions) - 1 for t in ts if len(t.executions) > 1),  # extra attempts
            "median_s": dur(_median([t.compute_ns + t.transfer_ns + t.queued_ns for t in ran])),
            "median_compute_s": dur(_median([t.compute_ns for t in ran])),
            "p95_compute_s": dur(_p95([t.compute_ns for t in ran])),
            "median_transfer_s": dur(_median([t.transfer_ns for t in ran])),
            "p95_transfer_s": dur(_p95([t.transfer_ns for t in ran])),
            "median_queued_s": dur(_median([t.queued_ns for t in ran])),
            "p95_queued_s": dur(_p95([t.queued_ns for t in ran])),
            "max_compute_s": dur(max((t.compute_ns for t in ran), default=0)),
        }
    return out


def stragglers(c: Computation) -> list[dict]:
    by: dict[str, list[Task]] = {}
    for t in c.tasks.values():
        if t.executions and not t.erred:
            by.setdefault(t.prefix, []).append(t)
    out: list[dict] = []
    for p, ts in by.items():
        if len(ts) < STRAGGLER_MIN_COUNT:
            continue
        med = _median([t.compute_ns for t in ts])
        for t in ts:
            if t.compute_ns > STRAGGLER_RATIO * med and t.compute_ns > STRAGGLER_MIN_S * NS:
                e = t.executions[-1]  # its last execution (it ran: ``by`` holds tasks with executions)
                out.append({"key": t.key, "prefix": p, "worker": e.worker, "thread": e.thread,
                            "start": secs(t.exec_start), "compute_s": dur(t.compute_ns), "median_s": dur(med),
                            "ratio": round(t.compute_ns / med, 1) if med else None})
    out.sort(key=lambda x: -(x["compute_s"]))
    return out[:MAX_LISTED]


def failures(c: Computation) -> tuple[list[dict], int]:
    """Erred tasks with an exception of their own, and the count of those that erred because a
    dependency did."""
    own, blamed = [], 0
    for t in sorted(c.tasks.values(), key=lambda t: t.end or 0):
        if not t.erred:
            continue
        cause = next((k for k in t.deps if k in c.tasks and c.tasks[k].erred), None)
        if cause is not None and not any(e.erred for e in t.executions):
            blamed += 1
            continue
        e = next((e for e in reversed(t.executions) if e.erred), None)
        text = (e.error if e is not None else "") or t.error
        etype, msg = split_exception(text)
        own.append({"key": t.key, "prefix": t.prefix, "worker": e.worker if e else t.worker,
                    "time": secs(t.end), "exception": etype, "message": msg, "error": text,
                    "stacktrace": e.stacktrace if e else "", "executions": len(t.executions)})
    return own[:MAX_LISTED], blamed + max(0, len(own) - MAX_LISTED)


def retries(c: Computation) -> list[dict]:
    """Tasks that ran more than once in this call because an attempt raised (Dask's ``retries=``):
    each with its attempts, the first failed attempt's exception and the time the failed attempts
    took, whether or not a later attempt succeeded."""
    out = []
    for t in sorted(c.tasks.values(), key=lambda t: t.end or 0):
        failed = [e for e in t.executions[:-1] if e.erred] + ([t.last] if t.erred and t.last is not None else [])
        if len(t.executions) < 2 or not failed:
            continue
        etype, msg = split_exception(failed[0].error)
        out.append({"key": t.key, "prefix": t.prefix, "attempts": len(t.executions), "failed": len(failed),
                    "succeeded": not t.erred, "exception": f"{etype}: {msg}" if etype else msg,
                    "exception_type": etype, "message": msg, "worker": failed[0].worker,
                    "erred_s": dur(t.erred_ns), "time": secs(failed[0].end)})
    return out


def computation(c: Computation, made: dict | None = None) -> dict:
    path = critical_path(c, made)
    rows = [_task_row(t, c) for t in path]
    # a path that began in an earlier call: its share is of the time since its first task was ready
    first = min([x for x in (path[0].ready, path[0].submitted) if x is not None], default=None) if path else None
    path_start = min(c.start, first) if c.start is not None and first is not None else c.start
    wall = max(0, (c.end or 0) - (path_start or 0)) if path_start is not None else c.wall_ns
    on_path = sum(t.compute_ns + t.transfer_ns + t.queued_ns + t.erred_ns for t in path)
    path_compute = sum(t.compute_ns for t in path)
    pre = prefixes(c)
    fails, blamed = failures(c)
    out: dict = {
        "id": c.id, "name": c.name, "method": c.method, "key": c.first_key, "trace_id": c.trace_id,
        "start": secs(c.start), "end": secs(c.end), "tasks": len(c.tasks),
        "wall_s": dur(c.wall_ns) if c.start is not None and c.end is not None else None,  # never since 1970
        "critical_path": rows,
        "critical_path_start": secs(path_start), "critical_path_wall_s": dur(wall),
        "critical_path_s": dur(on_path),
        "critical_path_share": round(on_path / wall, 4) if wall else 0.0,
        "critical_path_compute_share": round(path_compute / wall, 4) if wall else 0.0,
        "prefixes": pre,
        "stragglers": stragglers(c),
        "failures": fails,
        "retries": retries(c),
        "erred_dependents": blamed,
        "transfer_s": dur(union_ns([(x["start"], x["end"]) for x in c.transfers])),
        "running": running(c),
    }
    out["advice"] = advice(out)
    return out


MAX_RUNNING = 600  # points of a computation's tasks-running curve


def running(c: Computation) -> dict:
    """Tasks executing over time, {"t": [...], "n": [...]} (at most MAX_RUNNING points: the most
    running in each time bucket), for the HTML page's chart."""
    steps = []
    for t in c.tasks.values():
        for e in t.executions:
            steps.append((e.start, 1))
            steps.append((e.end, -1))
    if not steps or c.start is None or not c.wall_ns:
        return {"t": [], "n": []}
    steps.sort()
    width = max(1, c.wall_ns // MAX_RUNNING)
    ts, ns = [secs(c.start)], [0]
    n = 0
    bucket, peak = (steps[0][0] - c.start) // width, 0  # the first step's bucket
    for when, d in steps:
        b = (when - c.start) // width
        if b != bucket:
            ts.append(secs(c.start + bucket * width))
            ns.append(peak)
            bucket, peak = b, n
        n += d
        peak = max(peak, n)
    ts.append(secs(c.start + bucket * width))
    ns.append(peak)
    ts.append(secs(c.end))
    ns.append(0)
    return {"t": ts, "n": ns}


def advice(c: dict) -> list[str]:
    """One line per finding the figures support (thresholds in docs/report.md)."""
    out = []
    name = c["name"]
    wall = c["wall_s"]
    path = c["critical_path"]
    if path and len(c["prefixes"]) and c["tasks"] > 1 and wall >= 0.05:
        share = c["critical_path_compute_share"]
        if share >= 0.5:
            top = max({r["prefix"] for r in path}, key=lambda p: sum(r["compute_s"] for r in path if r["prefix"] == p))
            tasks = f"{len(path)} task{'s' if len(path) != 1 else ''}"
            out.append(f"{name}: {pct(share)} of wall time is the critical path's compute ({tasks}, "
                       f"mostly {top}): more workers will not help; make those tasks faster or split them")
    for p, s in c["prefixes"].items():
        total = s["compute_s"] + s["transfer_s"] + s["queued_s"]
        if s["count"] >= 20 and total > 0 and s["median_compute_s"] < 0.01 and s["queued_s"] / total >= 0.5:
            out.append(f"{name}: short tasks of {p} (median {ms(s['median_compute_s'])}) spend "
                       f"{pct(s['queued_s'] / total)} of their time queued: batch them (larger partitions)")
        elif s["count"] >= 2 and total > 0.05 and s["transfer_s"] / total >= 0.3:
            out.append(f"{name}: tasks of {p} spend {pct(s['transfer_s'] / total)} of their time fetching "
                       f"dependencies from other workers: keep data where it is used (fewer, larger inputs; "
                       f"scatter with broadcast; fuse the steps)")
    if c["stragglers"]:
        s = c["stragglers"][0]
        more = f" (and {len(c['stragglers']) - 1} more)" if len(c["stragglers"]) > 1 else ""
        out.append(f"{name}: straggler {s['key']} took {ms(s['compute_s'])}, {s['ratio']}x the median of "
                   f"{s['prefix']}, on {s['worker']}{more}: see `evlog story {s['key']}`")
    if c["failures"]:
        f = c["failures"][0]
        more = f" (and {len(c['failures']) - 1} more)" if len(c["failures"]) > 1 else ""
        out.append(f"{name}: task {f['key']} failed with {f['exception'] or 'an error'}: {f['message'][:120]}{more}")
    on_path = {r["key"] for r in path}
    saved = [x for x in c["retries"] if x["succeeded"]]
    for x in saved:
        if x["key"] in on_path and x["erred_s"] > 0:
            out.append(f"{name}: task {x['key']} failed {_times_word(x['failed'])} ({x['exception'][:120]}) and "
                       f"succeeded on a retry; its failed attempts cost {ms(x['erred_s'])} on the critical path")
    others = [x for x in saved if x["key"] not in on_path or not x["erred_s"]]
    if others:
        x = others[0]
        more = f" (and {len(others) - 1} more task{'s' if len(others) > 2 else ''})" if len(others) > 1 else ""
        out.append(f"{name}: task {x['key']} succeeded only on a retry after {x['exception'][:120]}{more}: "
                   f"see `evlog story {x['key']}`")
    return out


def _times_word(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


# -------------------------------------------------------------------------------------------------
# workers


def _clip(intervals: list[tuple[int, int]], windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for s, e in intervals:
        for ws, we in windows:
            a, b = max(s, ws), min(e, we)
            if a < b:
                out.append((a, b))
    return out


def workers(comps: list[Computation]) -> list[dict]:
    """Per worker over the computations' windows: busy share per thread, idle time and its longest
    gap, transfer time into it (the union of its dask.transfer spans) and bytes."""
    windows = merge([(c.start, c.end) for c in comps if c.start is not None and c.end and c.end > c.start])
    span_ns = sum(e - s for s, e in windows)
    busy: dict[str, dict[str, list]] = {}
    tasks: dict[str, int] = {}
    for c in comps:
        for t in c.tasks.values():
            for ex in t.executions:
                if ex.worker:
                    busy.setdefault(ex.worker, {}).setdefault(ex.thread, []).append((ex.start, ex.end))
            if t.executions and t.exec_worker:
                tasks[t.exec_worker] = tasks.get(t.exec_worker, 0) + 1
    moved: dict[str, list] = {}
    moved_bytes: dict[str, int] = {}
    for c in comps:
        for x in c.transfers:
            w = str(x["attributes"].get("dask.worker.address") or "")
            moved.setdefault(w, []).append((x["start"], x["end"]))
            b = x["attributes"].get("dask.transfer.bytes")
            moved_bytes[w] = moved_bytes.get(w, 0) + (b if isinstance(b, int) else 0)
    out = []
    for w in sorted(set(busy) | set(moved)):
        threads: list[dict] = []
        all_busy = []
        for th, iv in sorted(busy.get(w, {}).items()):
            iv = _clip(merge(iv), windows)
            all_busy += iv
            b = sum(e - s for s, e in iv)
            threads.append({"thread": th, "busy_s": dur(b), "utilisation": round(b / span_ns, 4) if span_ns else 0.0})
        union = merge(all_busy)
        busy_any = sum(e - s for s, e in union)
        gap, gap_at = 0, None
        for ws, we in windows:  # idle gaps: the window minus the time any thread was busy
            cur = ws
            for s, e in union:
                if e <= ws or s >= we:
                    continue
                if s - cur > gap:
                    gap, gap_at = s - cur, cur
                cur = max(cur, e)
            if we - cur > gap:
                gap, gap_at = we - cur, cur
        nthreads = max(1, len(threads))
        busy_sum = sum(th["busy_s"] for th in threads)
        out.append({
            "address": w, "tasks": tasks.get(w, 0), "threads": threads,
            "busy_s": round(busy_sum, 6),
            "utilisation": round(busy_sum / (nthreads * span_ns / NS), 4) if span_ns else 0.0,
            "idle_s": dur(max(0, span_ns - busy_any)),
            "idle_share": round(1 - busy_any / span_ns, 4) if span_ns else 0.0,
            "longest_idle": {"start": secs(gap_at), "seconds": dur(gap)} if gap_at is not None else None,
            "transfer_s": dur(union_ns(moved.get(w, []))), "transfer_bytes": moved_bytes.get(w, 0),
        })
    return out


def worker_advice(ws: list[dict], comps: list[Computation]) -> list[str]:
    if len(ws) < 2:
        return []
    span = sum(c.wall_ns for c in comps) / NS
    out = []
    for w in ws:
        if span >= 1.0 and w["idle_share"] >= 0.5:
            out.append(f"worker {w['address']} was idle {pct(w['idle_share'])} of the time "
                       f"(longest gap {ms(w['longest_idle']['seconds'])})" if w["longest_idle"] else
                       f"worker {w['address']} was idle {pct(w['idle_share'])} of the time")
    top = max(ws, key=lambda w: w["transfer_s"])
    busy = max(top["busy_s"], 1e-9)
    if top["transfer_s"] >= 0.1 and top["transfer_s"] >= 0.2 * busy:
        out.append(f"worker {top['address']} spent {ms(top['transfer_s'])} receiving data from other workers "
                   f"({top['transfer_bytes']:,} bytes), against {ms(top['busy_s'])} computing")
    return out


# -------------------------------------------------------------------------------------------------
# stories, metadata


def _stories(spans: list[dict], keys: set) -> dict:
    """{key: [entry, ...]}: the transitions and other span events of every span of the key, in time
    order, the shape of `evlog story --json` with times in seconds."""
    out: dict[str, list] = {}
    if not keys:
        return out
    for r in spans:
        k = r["attributes"].get("dask.task.key")
        if k not in keys or not r["events"]:
            continue
        proc = process_name(r["resource"])  # as `evlog story` names it: the worker has its own column
        worker = str(r["attributes"].get("dask.worker.address") or r["resource"].get("dask.worker.address") or "")
        lst = out.setdefault(k, [])
        for ev in r["events"]:
            a = ev.get("attributes") or {}
            lst.append({"time": secs(ev.get("time") or 0), "event": ev.get("name", ""),
                        "start": a.get("dask.transition.start"), "finish": a.get("dask.transition.finish"),
                        "stimulus": a.get("dask.stimulus_id"), "worker": a.get("dask.worker.address") or worker,
                        "process": proc, "span": r["name"],
                        **({"message": str(a["exception.message"])} if "exception.message" in a else {})})
    for lst in out.values():
        lst.sort(key=lambda e: e["time"])
        del lst[MAX_STORY:]
    return out


def _trend(xs: list[float], ys: list[float]) -> str:
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len(pts) < 2:
        return "flat"
    first, last = pts[0][1], pts[-1][1]
    scale = max(abs(first), abs(last), max(abs(y) for _, y in pts), 1e-12)
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
    span = (pts[-1][0] - pts[0][0]) or 1.0
    change = slope * span / scale
    if abs(change) < 0.05:
        return "flat"
    return "up" if change > 0 else "down"


MAX_POINTS = 2000  # per metadata series in the report (the HTML page plots them)


def metadata(logs: list[dict]) -> list[dict]:
    """Per process that printed console metadata: the x axis the dashboard uses, and per numeric
    key its last value, first, min, max and trend (a least-squares slope over the x axis)."""
    evs: list[dict] = [{"body": r["body"], "time": r["time"] or r["observed_time"] or 0,
                        "process": label(r["resource"])}
                       for r in logs if r["event_name"] == "evlog.metadata" and isinstance(r["body"], dict)]
    if not evs:
        return []
    evs.sort(key=lambda e: e["time"])
    out = []
    for g in metadata_graphs(evs):
        xs = g["xs"]
        keys = {}
        for k, ys in g["series"].items():
            vals = [y for y in ys if y is not None]
            if not vals:
                continue
            keys[k] = {"last": vals[-1], "first": vals[0], "min": min(vals), "max": max(vals), "count": len(vals),
                       "trend": _trend(xs, ys)}
        step = max(1, len(xs) // MAX_POINTS)
        out.append({"process": g["process"], "x": g["x"] or "time", "count": g["count"], "keys": keys,
                    "xs": xs[::step], "series": {k: v[::step] for k, v in g["series"].items() if k in keys}})
    return out
