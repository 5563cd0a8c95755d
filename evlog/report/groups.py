"""The parts of the report that apply to runs without Dask tasks: pool calls grouped by function
(``futures.task {function}``, ``multiprocessing.task {function}`` and their chunk spans) and torch
elastic ranks (processes with the ``torch.rank`` resource attribute): time by function or rank,
stragglers, failures. Pure functions over otlp_decode's rows.
"""
from __future__ import annotations

import statistics
from typing import Any

from evlog.data.exception_text import split_exception

from .common import MAX_LISTED, NS, STRAGGLER_MIN_COUNT, STRAGGLER_MIN_S, STRAGGLER_RATIO, label, ms
from .model import union_ns

POOL_SPANS = ("futures.task", "multiprocessing.task", "futures.chunk", "multiprocessing.chunk")
CHUNK_SPANS = ("futures.chunk", "multiprocessing.chunk")
RANK_STRAGGLER_RATIO = 1.25  # a rank that ran this much longer than the median rank ...
RANK_STRAGGLER_MIN_S = 1.0   # ... and at least this much longer


def _secs(ns: int | None) -> float | None:
    return None if ns is None else round(ns / NS, 6)


def _error(r: dict) -> tuple[str, str, str]:
    text, tb = r["status_message"], ""
    for ev in r["events"]:
        if ev.get("name") == "exception":
            a = ev.get("attributes") or {}
            text = text or str(a.get("exception.message") or "")
            tb = str(a.get("exception.stacktrace") or "")
    etype, msg = split_exception(text)
    return etype, msg, tb


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


class _Calls:
    """What one pool span says about its calls: a task span is one call; a chunk span (docs/pools.md)
    ``count`` calls of ``mean`` seconds each, the slowest ``max_s`` (call ``slowest`` of the map's input,
    one of ``slowest_of`` timed together), a failing one ``failed_at``."""

    __slots__ = ("count", "seconds", "mean", "max_s", "slowest", "slowest_of", "failed_at")

    def __init__(self, r: dict):
        a = r["attributes"]
        self.seconds = (r["end"] - r["start"]) / NS
        self.count, self.slowest, self.slowest_of, self.failed_at = 1, None, 1, None
        self.mean = self.max_s = self.seconds
        if r["name"].startswith(CHUNK_SPANS):
            self.count = max(1, _int(a.get("evlog.pool.calls")) or 1)
            self.mean = _num(a.get("evlog.pool.call.mean"), self.seconds / self.count)
            self.max_s = _num(a.get("evlog.pool.call.max"), self.mean)
            self.slowest = _int(a.get("evlog.pool.call.slowest_index"))
            self.slowest_of = max(1, _int(a.get("evlog.pool.call.slowest_calls")) or 1)
            for ev in r["events"]:
                if ev.get("name") == "exception":
                    self.failed_at = _int((ev.get("attributes") or {}).get("evlog.pool.call.index"))


def _num(value: object, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    """The median of values given with their counts (a chunk's mean stands for each of its calls)."""
    pairs = sorted(pairs)
    half, seen = sum(n for _, n in pairs) / 2, 0
    for value, n in pairs:
        seen += n
        if seen >= half:
            return value
    return pairs[-1][0] if pairs else 0.0


def pools(spans: list[dict]) -> dict | None:
    """Pool calls by function: count, total, median and longest time, failures; stragglers (the
    Dask rule: over 5x the function's median and over 100 ms); busy share per process and thread.
    A chunk span's calls count one by one (its mean for each, its slowest and failing call by index)."""
    rows = [r for r in spans if r["name"].startswith(POOL_SPANS)]
    if not rows:
        return None
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:  # per function and pool kind: one function may run in a thread pool and a process pool
        a = r["attributes"]
        fn = str(a.get("code.function.name") or r["name"].partition(" ")[2] or r["name"])
        by.setdefault((fn, str(a.get("evlog.pool.kind") or "")), []).append(r)
    kinds: dict[str, int] = {}
    for fn, _kind in by:
        kinds[fn] = kinds.get(fn, 0) + 1
    functions, strag, fails, alone = {}, [], [], {}
    calls_of = {id(r): _Calls(r) for r in rows}
    for (name, kind), rs in sorted(by.items(), key=lambda kv: -sum(r["end"] - r["start"] for r in kv[1])):
        fn = name if kinds[name] == 1 else f"{name} ({kind or 'unknown pool'})"
        cs = [calls_of[id(r)] for r in rs]
        count = sum(c.count for c in cs)
        med = _weighted_median([(c.mean, c.count) for c in cs])
        erred = [r for r in rs if r["status_code"] == "ERROR"]
        functions[fn] = {"count": count, "total_s": round(sum(c.seconds for c in cs), 6), "median_s": round(med, 6),
                         "max_s": round(max(c.max_s for c in cs), 6), "erred": len(erred), "function": name,
                         "kind": kind}
        alone[fn] = [c.seconds for r, c in zip(rs, cs) if not r["name"].startswith(CHUNK_SPANS)]
        if count >= STRAGGLER_MIN_COUNT:
            for r, c in zip(rs, cs):
                if c.max_s > STRAGGLER_RATIO * med and c.max_s > STRAGGLER_MIN_S:
                    strag.append({"function": fn, "process": label(r["resource"]),
                                  "thread": str(r["attributes"].get("thread.name") or ""), "start": _secs(r["start"]),
                                  "seconds": round(c.max_s, 6), "median_s": round(med, 6),
                                  "ratio": round(c.max_s / med, 1) if med else None, "span_id": r["span_id"],
                                  "index": c.slowest, "timed_with": c.slowest_of})
        for r in erred:
            etype, msg, tb = _error(r)
            fails.append({"function": fn, "process": label(r["resource"]), "time": _secs(r["end"]),
                          "exception": etype, "message": msg, "stacktrace": tb, "span_id": r["span_id"],
                          "index": calls_of[id(r)].failed_at})
    strag.sort(key=lambda x: -x["seconds"])
    fails.sort(key=lambda x: x["time"] or 0)
    t0, t1 = min(r["start"] for r in rows), max(r["end"] for r in rows)
    busy: dict[tuple, list] = {}
    for r in rows:
        busy.setdefault((label(r["resource"]), str(r["attributes"].get("thread.name") or "")), []).append(
            (r["start"], r["end"]))
    span = max(1, t1 - t0)
    calls: dict[tuple, int] = {}
    for r in rows:
        key = (label(r["resource"]), str(r["attributes"].get("thread.name") or ""))
        calls[key] = calls.get(key, 0) + calls_of[id(r)].count
    busy_ns = {key: union_ns(iv) for key, iv in busy.items()}
    workers = [{"process": p, "thread": th, "calls": calls[(p, th)],
                "busy_s": round(b / NS, 6), "utilisation": round(b / span, 4)}
               for (p, th), b in sorted(busy_ns.items())]
    advice = []
    for fn, ds in alone.items():  # calls sent one at a time: each pays the pool's own cost per call
        if len(ds) >= 1000 and statistics.median(ds) < 0.001:
            advice.append(f"pool: {len(ds):,} calls of {fn} sent one at a time with a median of "
                          f"{ms(statistics.median(ds))}: the pool's per-call overhead is of the same order; pass "
                          "larger items or a chunksize")
    if strag:
        s = strag[0]
        advice.append(f"pool: {call_name(s) or 'a call'} of {s['function']} took {ms(s['seconds'])}, {s['ratio']}x the median, "
                      f"in {s['process']}" + (f" (and {len(strag) - 1} more stragglers)" if len(strag) > 1 else ""))
    if fails:
        f = fails[0]
        advice.append(f"pool: {len(fails)} call(s) failed, first {call_name(f) or 'a call'} of {f['function']}: "
                      f"{f['exception'] or 'error'} {f['message'][:120]}")
    return {"start": _secs(t0), "end": _secs(t1), "functions": functions, "stragglers": strag[:MAX_LISTED],
            "failures": fails[:MAX_LISTED], "workers": workers, "advice": advice}


def call_name(x: dict) -> str:
    """How a pool straggler or failure of a chunk span names its call: ``call 17`` (its index in the
    map's input), ``one of calls 1000-1399`` (timed together); "" for a call sent alone (its own span)."""
    index, together = x.get("index"), x.get("timed_with") or 1
    if index is None:
        return ""
    if together > 1:
        return f"one of calls {index}-{index + together - 1}"
    return f"call {index}"


def ranks(spans: list[dict], logs: list[dict]) -> dict | None:
    """torchrun ranks: per rank its time (first to last telemetry of its processes), spans and
    erred spans; stragglers (a rank that ran 25% and 1 s longer than the median rank); failures
    (erred spans of ranks and of the torchelastic agent, FAILED worker-status events)."""
    per: dict[str, dict] = {}
    fails = []

    def rank_of(res: dict) -> str | None:
        r = res.get("torch.rank")
        return None if r is None else str(r)

    for r in spans:
        res = r["resource"]
        k = rank_of(res)
        if k is not None:
            d = per.setdefault(k, {"rank": k, "local_rank": res.get("torch.local_rank"),
                                   "group_rank": res.get("torch.group_rank"), "pids": set(), "host": res.get("host.name"),
                                   "start": r["start"], "end": r["end"], "spans": 0, "erred": 0})
            d["pids"].add(res.get("process.pid"))
            d["start"], d["end"] = min(d["start"], r["start"]), max(d["end"], r["end"])
            d["spans"] += 1
        if r["status_code"] == "ERROR" and (k is not None or r["name"].startswith("torchelastic.")):
            if k is not None:
                per[k]["erred"] += 1
            etype, msg, tb = _error(r)
            fails.append({"rank": k, "span": r["name"], "process": label(res), "time": _secs(r["end"]),
                          "exception": etype, "message": msg, "stacktrace": tb})
    for lg in logs:
        res = lg["resource"]
        k = rank_of(res)
        t = lg["time"] or lg["observed_time"]
        if k is not None and k in per and t:
            d = per[k]
            d["start"], d["end"] = min(d["start"], t), max(d["end"], t)
        name = lg["event_name"] or ""
        if name.startswith("torchelastic.worker.status.FAILED"):
            fails.append({"rank": k, "span": name, "process": label(res), "time": _secs(t), "exception": "",
                          "message": str(lg["body"])[:500], "stacktrace": ""})
    if not per:
        return None
    rows = []
    for _k, d in sorted(per.items(), key=lambda kv: (len(kv[0]), kv[0])):
        rows.append({"rank": d["rank"], "local_rank": d["local_rank"], "group_rank": d["group_rank"],
                     "pids": sorted(p for p in d["pids"] if p is not None), "host": d["host"],
                     "start": _secs(d["start"]), "end": _secs(d["end"]),
                     "duration_s": round((d["end"] - d["start"]) / NS, 6), "spans": d["spans"], "erred": d["erred"]})
    med = statistics.median(r["duration_s"] for r in rows)
    strag = [dict(r, median_s=med, ratio=round(r["duration_s"] / med, 2) if med else None) for r in rows
             if r["duration_s"] > RANK_STRAGGLER_RATIO * med and r["duration_s"] - med >= RANK_STRAGGLER_MIN_S]
    fails.sort(key=lambda x: x["time"] or 0)
    advice = [f"torch: rank {s['rank']} ran {ms(s['duration_s'])}, {s['ratio']}x the median rank" for s in strag]
    if fails:
        f = fails[0]
        advice.append(f"torch: {len(fails)} failure(s), first {f['span']}"
                      + (f" on rank {f['rank']}" if f["rank"] is not None else "")
                      + f": {f['exception'] or ''} {f['message'][:120]}".rstrip())
    return {"start": min(r["start"] for r in rows), "end": max(r["end"] for r in rows), "ranks": rows,
            "stragglers": strag, "failures": fails[:20], "advice": advice}
