"""A synthetic Dask-like run folder (OTLP/JSON lines, as the run-folder exporter writes them), for
the viewer's tests and benchmarks: a scheduler with `dask.task {prefix}` spans and their
`transition` events, workers with `dask.execute {prefix}` spans, `dask.log_event` / `evlog.log_event`
events, console `evlog.metadata` events, and the consumers' gauges."""
from __future__ import annotations

import json
import os
import random

T0 = 1_700_000_000_000_000_000  # ns
MS = 1_000_000

GAUGES = ("evlog.worker.saturation", "system.cpu.load_average.1m", "evlog.memory.free_fraction",
          "evlog.bytes.allocated", "evlog.processor.saturation")


def av(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": av(x)} for k, x in v.items()]}}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [av(x) for x in v]}}
    return {"stringValue": str(v)}


def attrs(d):
    return [{"key": k, "value": av(v)} for k, v in d.items()]


def resource(pid, role, worker=None, service="app", host="hostA"):
    r = {"service.name": service, "service.instance.id": f"inst-{pid}", "process.pid": pid, "host.name": host,
         "dask.role": role}
    if worker:
        r["dask.worker.address"] = worker
    return {"attributes": attrs(r)}


def span(trace, sid, name, start, end, a, events=(), parent="", kind=1, error=False):
    s = {"traceId": trace, "spanId": sid, "name": name, "kind": kind, "startTimeUnixNano": str(start),
         "endTimeUnixNano": str(end), "attributes": attrs(a),
         "events": [{"name": n, "timeUnixNano": str(t), "attributes": attrs(ea)} for n, t, ea in events]}
    if parent:
        s["parentSpanId"] = parent
    if error:
        s["status"] = {"code": 2, "message": "ZeroDivisionError: division by zero"}
    return s


def traces_request(res, spans):
    return {"resourceSpans": [{"resource": res, "scopeSpans": [{"scope": {"name": "evlog.dask"}, "spans": spans}]}]}


def log(t, event_name, body, a, trace="", sid=""):
    r = {"timeUnixNano": str(t), "observedTimeUnixNano": str(t), "severityNumber": 9, "eventName": event_name,
         "body": av(body), "attributes": attrs(a)}
    if trace:
        r["traceId"], r["spanId"] = trace, sid
    return r


def logs_request(res, records):
    return {"resourceLogs": [{"resource": res, "scopeLogs": [{"scope": {"name": "evlog"}, "logRecords": records}]}]}


def metrics_request(res, points):
    """points: [(name, t, value)] as gauges."""
    by: dict = {}
    for name, t, v in points:
        by.setdefault(name, []).append({"timeUnixNano": str(t), "asDouble": float(v)})
    return {"resourceMetrics": [{"resource": res, "scopeMetrics": [{"scope": {"name": "evlog.consumers"}, "metrics": [
        {"name": n, "unit": "1", "gauge": {"dataPoints": dps}} for n, dps in by.items()]}]}]}


def write_lines(path, requests):
    with open(path, "a", encoding="utf-8") as f:
        for r in requests:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def make_run(path, n_tasks=30, n_workers=2, threads=2, seed=1, errors=1, metadata=8, batch=500, t0=T0,
             trace="0af7651916cd43dd8448eb211c80319c", scheduler=True, gauge_ms=20):
    """Write a run folder at ``path``; returns a dict of what it holds (keys, counts).
    ``scheduler=False`` leaves out the scheduler's task spans (only worker executions)."""
    rnd = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    workers = [f"tcp://127.0.0.1:{40000 + i}" for i in range(n_workers)]
    sched = resource(100, "scheduler")
    wres = [resource(200 + i, "worker", w) for i, w in enumerate(workers)]
    prefixes = ["inc", "double", "add"]
    keys, sched_spans, exec_spans = [], [], {w: [] for w in workers}
    busy_until = {(w, th): t0 for w in workers for th in range(threads)}
    for i in range(n_tasks):
        prefix = prefixes[i % 3]
        key = f"{prefix}-{i:06x}"
        deps = [keys[j] for j in sorted({rnd.randrange(i) for _ in range(2)})] if i >= 3 and prefix == "add" else []
        keys.append(key)
        w = workers[i % n_workers]
        th = (i // n_workers) % threads
        start = busy_until[(w, th)] + rnd.randrange(1, 3) * MS
        dur = rnd.randrange(5, 40) * MS
        end = start + dur
        busy_until[(w, th)] = end
        err = i < errors
        sid = f"{i + 1:016x}"
        finish = "erred" if err else "memory"
        if scheduler:
            tr = [("transition", start - 2 * MS, {"dask.transition.start": "released", "dask.transition.finish": "waiting",
                                                   "dask.stimulus_id": f"update-graph-{i}", "dask.worker.address": ""}),
                  ("transition", start - MS, {"dask.transition.start": "waiting", "dask.transition.finish": "processing",
                                              "dask.stimulus_id": f"update-graph-{i}", "dask.worker.address": w}),
                  ("transition", end + MS, {"dask.transition.start": "processing", "dask.transition.finish": finish,
                                            "dask.stimulus_id": f"task-finished-{i}", "dask.worker.address": w})]
            sched_spans.append(span(trace, sid, f"dask.task {prefix}", start - 2 * MS, end + MS, {
                "dask.task.key": key, "dask.task.prefix": prefix, "dask.task.group": prefix,
                "dask.worker.address": w, "dask.task.nbytes": 28, "dask.task.dependencies": deps}, tr, error=err))
        exec_spans[w].append(span(trace, f"{0x8000000 + i:016x}", f"dask.execute {prefix}", start, end, {
            "dask.task.key": key, "dask.task.prefix": prefix, "thread.id": 1000 + th}, parent=sid, kind=5, error=err))
    tend = max(busy_until.values()) + 10 * MS
    for k in range(0, len(sched_spans) if scheduler else 0, batch):
        write_lines(os.path.join(path, "traces-100.jsonl"), [traces_request(sched, sched_spans[k:k + batch])])
    for w, res in zip(workers, wres):
        pid = 200 + workers.index(w)
        spans = exec_spans[w]
        for k in range(0, len(spans), batch):
            write_lines(os.path.join(path, f"traces-{pid}.jsonl"), [traces_request(res, spans[k:k + batch])])
    # events
    recs = [log(t0 + i * 5 * MS, "dask.log_event", {"start": i, "stop": i + 1}, {"dask.topic": "runtimes"})
            for i in range(5)]
    recs.append(log(t0 + MS, "dask.log_event", {"action": "add-worker", "worker": workers[0]},
                    {"dask.topic": "all"}))
    recs.append(log(t0 + 2 * MS, "evlog.log_event", "checkpoint saved", {"evlog.topic": "checkpoints"}))
    recs.append(log(t0 + 3 * MS, "", "plain log line", {}))
    write_lines(os.path.join(path, "logs-100.jsonl"), [logs_request(sched, recs)])
    meta = [log(t0 + (i + 1) * 7 * MS, "evlog.metadata", {"epoch": i, "loss": round(7.0 / (i + 1), 4),
                                                          "acc": round(0.1 * i, 3), "step": 100 * i, "size": "big"},
                {}) for i in range(metadata)]
    if meta:
        write_lines(os.path.join(path, "logs-200.jsonl"), [logs_request(wres[0], meta)])
    # gauges, every 20 ms per process
    for pid, res in [(100, sched)] + [(200 + i, r) for i, r in enumerate(wres)]:
        pts = []
        t = t0
        while t <= tend:
            for g in GAUGES:
                pts.append((g, t, rnd.random() * (1e6 if "bytes" in g else 1)))
            t += gauge_ms * MS
        write_lines(os.path.join(path, f"metrics-{pid}.jsonl"), [metrics_request(res, pts)])
    return {"keys": keys, "workers": workers, "tasks": n_tasks, "spans": (2 if scheduler else 1) * n_tasks, "trace": trace,
            "topics": {"runtimes": 5, "all": 1, "checkpoints": 1}, "metadata": metadata, "end": tend}
