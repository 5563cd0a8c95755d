"""What-if for a recorded run: the shapes asked for (``--what-if workers=N[,threads=T]``,
``processes=N``), the replay's inputs measured from the report's Computations (evlog.report.model)
and pool spans, and the report's ``what_if`` JSON (docs/report.md, "What-if"). The model itself is
evlog.report.whatif.

Inputs, all from the run:
- per task: its running time alone (the ``dask.execute`` spans' compute, earlier failed attempts
  included; with more than one thread per worker and a known CPU share, less the slow-down of sharing
  the GIL with the tasks that ran beside it), its result's size (``dask.task.nbytes``), its group and
  prefix, its priority (Dask's own, ``dask.task.priority``; for a run recorded without it, the order
  the run started the tasks in) and, for a task without dependencies in its computation, when the
  scheduler got it (the roots of one update-graph together);
- latency: the median gap between a task's last dependency ending (the scheduler's clock) and its
  start, less its transfers, over tasks whose thread was free through the gap and had run a task
  before; for a graph without dependencies, from the task's transition to processing;
- warm-up: how much longer a worker's first task waited (its first messages, imports, deserialising
  the function), the median over the workers;
- hand-off: the median gap on one thread from a task's end to the next task's start, where the next
  was already waiting on the worker;
- the network: per-transfer latency (median duration of ``dask.transfer`` spans under 64 KiB) and
  bandwidth (bytes over time of the larger ones); Dask's default 100 MB/s when the run has none;
- the CPU share per prefix: Dask's fine performance metrics (``prefixes[P].activity_s``, thread-cpu
  over thread-cpu + thread-noncpu) where the run has them, else none (threads assumed to overlap fully).
"""
from __future__ import annotations

import bisect
import statistics

from .common import NS, label
from .groups import CHUNK_SPANS, POOL_SPANS
from .model import Computation
from .whatif import DEFAULT_BANDWIDTH, LIMITS, WORKER_SATURATION, Graph, Node, Params, Replay, list_schedule, replay

SMALL_TRANSFER = 64 * 1024  # bytes: transfers under this measure latency, the others bandwidth
MAX_CURVE = 16  # worker counts on the HTML page's curve
PROCESS_POOLS = ("process", "mp.pool")  # evlog.pool.kind of the pools processes=N replays
PHASE_GAP = 5_000_000  # ns: pool calls this long apart with none running between are separate phases ...
PHASE_GAPS = 20  # ... or this many times the usual gap between two calls of one process
CPU, OFF_CPU = "thread-cpu", "thread-noncpu"  # Dask's fine performance metrics' activities of execute
SHAPE_KEYS = ("workers", "threads", "processes")


class WhatIfError(Exception):
    """A clear message for the user: a shape the run cannot answer."""


class Shape:
    """One ``--what-if`` value."""

    __slots__ = ("workers", "threads", "processes", "text")

    def __init__(self, text: str, workers: int | None = None, threads: int | None = None,
                 processes: int | None = None):
        #: as the user wrote it
        self.text = text
        #: Dask worker processes, or None for a pool shape
        self.workers = workers
        #: threads per worker; None: as recorded
        self.threads = threads
        #: pool processes, or None for a Dask shape
        self.processes = processes


def parse_shape(text: str) -> Shape:
    """``workers=N``, ``workers=N,threads=T`` or ``processes=N`` (N, T whole numbers from 1); a
    ValueError naming what is wrong otherwise."""
    got: dict[str, int] = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"{text!r}: {part.strip()!r} is not KEY=N (workers=N[,threads=T] or processes=N)")
        if key not in SHAPE_KEYS:
            raise ValueError(f"{text!r}: unknown key {key!r} (workers, threads or processes)")
        if key in got:
            raise ValueError(f"{text!r}: {key} given twice")
        value = value.strip()
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{text!r}: {key}={value} is not a whole number of at least 1")
        got[key] = int(value)
    if "processes" in got and len(got) > 1:
        raise ValueError(f"{text!r}: processes=N is a pool shape, alone (workers=N[,threads=T] is Dask's)")
    if "threads" in got and "workers" not in got:
        raise ValueError(f"{text!r}: threads=T needs workers=N")
    return Shape(text, got.get("workers"), got.get("threads"), got.get("processes"))


# -------------------------------------------------------------------------------------------------
# the inputs


def recorded_shape(comps: list[Computation]) -> tuple[int, int]:
    """(workers, threads per worker) that ran the run's tasks: the workers seen, the most threads
    seen running tasks on one of them."""
    threads: dict[str, set] = {}
    for c in comps:
        for t in c.tasks.values():
            for e in t.executions:
                threads.setdefault(e.worker, set()).add(e.thread)
    if not threads:
        return 1, 1
    return len(threads), max(len(s) for s in threads.values())


def _threads(comps: list[Computation]) -> dict[tuple[str, str], list[tuple[int, int]]]:
    out: dict[tuple[str, str], list] = {}
    for c in comps:
        for t in c.tasks.values():
            for e in t.executions:
                out.setdefault((e.worker, e.thread), []).append((e.start, e.end))
    for iv in out.values():
        iv.sort()
    return out


def latency(comps: list[Computation]) -> tuple[float, int, float]:
    """(ns, samples, warm-up ns): the median gap between a task's last dependency's end and its start,
    less its transfers, over tasks whose thread was free through the gap and had run a task before;
    with no such task, the least gap of any. A worker's first task also waits for the worker's first
    messages, imports and deserialising its function: the warm-up, the median over the workers of
    their first task's gap beyond that latency."""
    by_thread = _threads(comps)
    starts = {k: [s for s, _ in iv] for k, iv in by_thread.items()}
    first_start: dict[str, int] = {}
    for (w, _), iv in by_thread.items():
        first_start[w] = min(first_start.get(w, iv[0][0]), iv[0][0])
    idle, other, first = [], [], []
    for c in comps:
        for t in c.tasks.values():
            e = t.last
            if e is None or t.erred or t.exec_start is None:
                continue
            deps = [d.end for d in (c.tasks.get(k) for k in t.deps) if d is not None and d.end is not None]
            if deps:
                basis = max(deps)
            elif t.ready is not None and t.sent_at_once:
                basis = t.ready
            else:
                continue
            gap = t.exec_start - basis
            if gap < 0:
                continue
            gap = max(0, gap - t.transfer_ns)
            other.append(gap)
            key = (e.worker, e.thread)
            k = bisect.bisect_left(starts[key], e.start)
            if e.start == first_start[e.worker]:
                first.append(gap)
            elif k > 0 and by_thread[key][k - 1][1] <= e.start - gap:
                idle.append(gap)
    lat = float(statistics.median(idle)) if idle else float(min(other)) if other else 0.0
    warm = max(0.0, statistics.median(first) - lat) if first else 0.0
    return lat, len(idle), warm


def hand_off(comps: list[Computation], lat: float) -> tuple[float, int]:
    """(ns, samples): the median gap on one thread between a task's end and the start of the next,
    where the next was ready (on the scheduler) at least ``lat`` before that end and fetched nothing:
    it was waiting on the worker, so the gap is the worker's own work between two tasks (the worker's
    clock, both ends on it)."""
    by: dict[tuple[str, str], list] = {}
    for c in comps:
        for t in c.tasks.values():
            e = t.last
            if e is not None:
                by.setdefault((e.worker, e.thread), []).append(t)
    gaps = []
    for ts in by.values():
        ts.sort(key=lambda t: t.last.start)
        for p, n in zip(ts, ts[1:]):
            if n.ready is not None and p.end is not None and n.ready + lat <= p.end and not n.transfer_ns:
                gaps.append(max(0, n.last.start - p.last.end))
    return (float(statistics.median(gaps)), len(gaps)) if gaps else (0.0, 0)


def network(comps: list[Computation]) -> tuple[float, float, int, int]:
    """(bytes/s, ns per transfer, transfers timing the latency, transfers timing the bandwidth) from
    the run's ``dask.transfer`` spans: the latency is the median time of those under SMALL_TRANSFER,
    the bandwidth the bytes over the time (less that latency) of the others; Dask's default
    bandwidth when there are none."""
    small: list[tuple[int, int]] = []
    big: list[tuple[int, int]] = []
    for c in comps:
        for r in c.transfers:
            b = r["attributes"].get("dask.transfer.bytes")
            d = r["end"] - r["start"]
            if r["status_code"] == "ERROR" or not isinstance(b, int) or d <= 0:
                continue
            (small if b < SMALL_TRANSFER else big).append((b, d))
    lat = float(statistics.median(d for _, d in small)) if small else 0.0
    moved = sum(b for b, _ in big)
    took = sum(max(1.0, d - lat) for _, d in big)
    bw = moved / took * NS if big else float(DEFAULT_BANDWIDTH)
    return bw, lat, len(small), len(big)


def cpu_shares(out_comps: list[dict]) -> dict[str, float]:
    """prefix -> thread-cpu / (thread-cpu + thread-noncpu) of ``execute``, from Dask's fine
    performance metrics where the report has them (``prefixes[P].activity_s``); {} otherwise."""
    cpu: dict[str, list] = {}
    for c in out_comps:
        for p, s in c["prefixes"].items():
            a = s.get("activity_s") or {}
            on, off = a.get(CPU) or 0.0, a.get(OFF_CPU) or 0.0
            if on + off > 0:
                x = cpu.setdefault(p, [0.0, 0.0])
                x[0] += on
                x[1] += on + off
    return {p: on / total for p, (on, total) in cpu.items() if total > 0}


def alone_factors(comps: list[Computation], cpu: dict[str, float]) -> tuple[dict[int, float], dict[str, float]]:
    """(id(Execution) -> its running time alone over its recorded time (1 when it shared the GIL with
    nothing), prefix -> its CPU share alone). Tasks running together on one worker progress at
    min(1, 1 / their CPU shares' sum); the CPU share measured beside others (Dask counts waiting for
    the GIL as off the CPU) is its CPU time over the recorded time, so the share alone is found by
    iterating from it: CPU time over time alone (the fixed point with the least slow-down)."""
    if not cpu:
        return {}, cpu
    per_worker: dict[str, list] = {}
    for c in comps:
        for t in c.tasks.values():
            for e in t.executions:
                per_worker.setdefault(e.worker, []).append((e, t.prefix))
    recorded: dict[str, float] = {}
    for ex in per_worker.values():
        for e, p in ex:
            recorded[p] = recorded.get(p, 0.0) + (e.end - e.start)
    cpu_ns = {p: cpu.get(p, 0.0) * ns for p, ns in recorded.items()}
    share = dict(cpu)
    factors: dict[int, float] = {}
    for _ in range(20):  # a few rounds settle it to well under 1% (tests/test_whatif.py)
        factors.clear()
        alone: dict[str, float] = {}
        for ex in per_worker.values():
            _sweep(ex, share, factors, alone)
        before, share = share, {p: min(1.0, cpu_ns[p] / alone[p]) if alone.get(p) else 0.0 for p in cpu_ns}
        if all(abs(share[p] - before.get(p, 0.0)) < 1e-4 for p in share):
            break
    return factors, {p: x for p, x in share.items() if p in cpu}


def _sweep(ex: list, share: dict, factors: dict, alone: dict) -> None:
    """One worker's executions: each one's time alone, at the rate of the GIL's sharing."""
    points = []
    for k, (e, _p) in enumerate(ex):
        points.append((e.start, 1, k))
        points.append((e.end, 0, k))
    points.sort()
    run: dict[int, float] = {}
    got = [0.0] * len(ex)
    demand, last = 0.0, None
    for when, kind, k in points:
        if run and last is not None and when > last:
            r = 1.0 if demand <= 1.0 else 1.0 / demand
            for j in run:
                got[j] += (when - last) * r
        last = when
        c = share.get(ex[k][1], 0.0)
        if kind:
            run[k] = c
            demand += c
        else:
            demand -= run.pop(k, 0.0)
    for k, (e, p) in enumerate(ex):
        d = e.end - e.start
        factors[id(e)] = got[k] / d if d > 0 else 1.0
        alone[p] = alone.get(p, 0.0) + got[k]


def graph_of(c: Computation, cpu: dict[str, float], factors: dict[int, float]) -> Graph:
    """A computation as the replay's graph; times from the computation's start."""
    t0 = c.start
    if t0 is None:
        raise ValueError(f"{c.name or c.id}: a computation without a start has no graph to replay")
    tasks = list(c.tasks.values())
    index = {t.key: i for i, t in enumerate(tasks)}
    deps = [sorted({index[k] for k in t.deps if k in index}) for t in tasks]
    began = [t.exec_start if t.exec_start is not None else t.ready if t.ready is not None else t0 for t in tasks]
    # tasks made ready by one message (one update-graph: the graph's roots) reach the scheduler together;
    # their recorded ready times differ by the order the scheduler went through them
    got = [t.ready if t.ready is not None else t.submitted if t.submitted is not None else t0 for t in tasks]
    first: dict[str, int] = {}
    stimuli = [t.ready_stimulus if not deps[i] else None for i, t in enumerate(tasks)]
    for i, st in enumerate(stimuli):
        if st:
            first[st] = min(first.get(st, got[i]), got[i])
    attrs = [t.span["attributes"] if t.span is not None else {} for t in tasks]
    order = _priorities(attrs, began, t0)
    nodes = []
    ends = []
    for i, t in enumerate(tasks):
        a = attrs[i]
        run = 0.0
        for e in t.executions:
            run += max(0, e.end - e.start - e.transfer_ns) * factors.get(id(e), 1.0)
        nb = a.get("dask.task.nbytes")
        st = stimuli[i]
        nodes.append(Node(t.key, run, deps[i], prefix=t.prefix, group=str(a.get("dask.task.group") or t.prefix),
                          nbytes=nb if isinstance(nb, int) else 0, cpu=cpu.get(t.prefix, 0.0),
                          priority=order[i],
                          release=max(0, (first[st] if st else got[i]) - t0)))
        if t.end is not None:
            ends.append(t.end)
    tail = max(0, c.end - max(ends)) if ends and c.end is not None else 0
    return Graph(nodes, tail)


def _priorities(attrs: list[dict], began: list[int], t0: int) -> list[tuple]:
    """Each task's place in Dask's order: its recorded priority where every task has one (one graph's
    tasks all do), else when it started (a run recorded without priorities: Dask followed its order
    where it could, so the start order is the nearest record of it)."""
    recorded: list = [a.get("dask.task.priority") for a in attrs]
    if all(type(p) in (list, tuple) and p for p in recorded):
        return [tuple(p) for p in recorded]
    return [(b - t0,) for b in began]


# -------------------------------------------------------------------------------------------------
# the answers


def _entry(shape: dict, predicted_ns: float, recorded_ns: float, limits: dict) -> dict:
    """One answer; ``limits``: ns by cause, the first of the largest names what limits it."""
    top = max(limits, key=lambda k: limits[k])
    return {**shape, "predicted_s": round(predicted_ns / NS, 6), "recorded_s": round(recorded_ns / NS, 6),
            "limited_by": top, "limits_s": {k: round(v / NS, 6) for k, v in limits.items() if v > 0}}


def dask_what_if(comps: list[Computation], out_comps: list[dict], shapes: list[Shape], curve: bool = False) -> dict:
    """{"entries": the run's answers (one per shape), "per_computation": [answers] aligned with comps,
    "model": the inputs, "curve": predicted time against workers (with ``curve``)}."""
    workers0, threads0 = recorded_shape(comps)
    lat, lat_n, warm = latency(comps)
    hand, hand_n = hand_off(comps, lat)
    bw, xlat, n_small, n_big = network(comps)
    cpu = cpu_shares(out_comps)
    params = Params(lat, bw, xlat, WORKER_SATURATION, hand, warm)
    factors, cpu = alone_factors(comps, cpu) if threads0 > 1 else ({}, cpu)
    graphs = [graph_of(c, cpu, factors) if c.start is not None else None for c in comps]

    def run_shape(w: int, th: int) -> tuple[float, list[Replay | None]]:
        total = 0.0
        per: list[Replay | None] = []
        for _c, g in zip(comps, graphs):
            if g is None:
                per.append(None)
                continue
            r = replay(g, w, th, params)
            per.append(r)
            total += r.wall
        return total, per

    recorded = float(sum(c.wall_ns for c, g in zip(comps, graphs) if g is not None))
    asked = [(s.workers, s.threads or threads0) for s in shapes if s.workers]  # attach passes Dask shapes only
    entries = []
    per_comp: list[list[dict]] = [[] for _ in comps]
    replays: dict[tuple[int, int], tuple[float, list[Replay | None]]] = {}
    for w, th in [(workers0, threads0)] + asked:
        if (w, th) not in replays:
            replays[(w, th)] = run_shape(w, th)
    for w, th in asked:
        total, per = replays[(w, th)]
        limits = dict.fromkeys(LIMITS, 0.0)
        for k, (c, r) in enumerate(zip(comps, per)):
            if r is None:
                continue
            per_comp[k].append(_entry({"workers": w, "threads": th}, r.wall, c.wall_ns,
                                      {x: r.limits.get(x, 0.0) for x in LIMITS}))
            for x, v in r.limits.items():
                limits[x] += v
        entries.append(_entry({"workers": w, "threads": th}, total, recorded, limits))
    model = {
        "recorded": {"workers": workers0, "threads": threads0, "recorded_s": round(recorded / NS, 6),
                     "replayed_s": round(replays[(workers0, threads0)][0] / NS, 6)},
        "latency_s": round(lat / NS, 6), "latency_samples": lat_n,
        "hand_off_s": round(hand / NS, 6), "hand_off_samples": hand_n, "warm_up_s": round(warm / NS, 6),
        "bandwidth_Bps": round(bw), "bandwidth_transfers": n_big,
        "transfer_latency_s": round(xlat / NS, 6), "latency_transfers": n_small,
        "worker_saturation": WORKER_SATURATION,
        "cpu_share": {p: round(x, 4) for p, x in sorted(cpu.items())},
        "cpu_share_source": "dask fine performance metrics" if cpu else "",
    }
    out = {"entries": entries, "per_computation": per_comp, "model": model}
    if curve:
        xs = curve_workers(workers0)
        ys = [round(run_shape(w, threads0)[0] / NS, 6) if (w, threads0) not in replays
              else round(replays[(w, threads0)][0] / NS, 6) for w in xs]
        out["curve"] = {"threads": threads0, "workers": xs, "predicted_s": ys,
                        "recorded": {"workers": workers0, "seconds": round(recorded / NS, 6)}}
    return out


def curve_workers(recorded: int) -> list[int]:
    """1 .. 2x the recorded workers, at most MAX_CURVE counts, the recorded one among them."""
    top = max(2, 2 * recorded)
    if top <= MAX_CURVE:
        return list(range(1, top + 1))
    xs = {1, recorded, top} | {round(1 + k * (top - 1) / (MAX_CURVE - 1)) for k in range(MAX_CURVE)}
    return sorted(xs)


# -------------------------------------------------------------------------------------------------
# pools


def _default_chunk(n: int, processes: int) -> int:
    """The chunk size multiprocessing's Pool.map chooses for n items (Pool._map_async)."""
    size, extra = divmod(n, processes * 4)
    return size + 1 if extra else size


def _calls(r: dict) -> int:
    """The calls a chunk span made (``evlog.pool.calls``)."""
    n = r["attributes"].get("evlog.pool.calls")
    return n if isinstance(n, int) and n > 0 else 1


def _units(rows: list[dict], recorded: int, processes: int) -> list[float]:
    """The durations (ns) a pool of ``processes`` would get for one phase's calls, in order: each call
    or chunk as recorded, except a Pool.map whose chunks are the size the pool chose for the recorded
    processes: its calls chunked again as the pool would choose for ``processes``, each call at its
    chunk's mean."""
    maps: dict[str, list[dict]] = {}  # a map: the chunks of one function in the phase (their own traces
    for r in rows:                    # when the submitter had no span), their first items 0, c, 2c, ...
        if r["name"].startswith(CHUNK_SPANS) and r["attributes"].get("evlog.pool.kind") == "mp.pool":
            maps.setdefault(r["name"], []).append(r)
    rechunked: dict[int, list[float]] = {}  # id(first row of a map) -> its new chunks
    skip: set[int] = set()
    for rs in maps.values():
        firsts = [r["attributes"].get("evlog.pool.chunk.first") for r in rs]
        if not all(isinstance(f, int) for f in firsts):
            continue
        rs = [r for _, r in sorted(zip(firsts, rs), key=lambda x: x[0])]
        calls = [_calls(r) for r in rs]
        n = sum(calls)
        at = 0
        ok = True
        for r, k in zip(rs, calls):
            ok = ok and r["attributes"]["evlog.pool.chunk.first"] == at
            at += k
        size = _default_chunk(n, recorded)
        if not ok or any(k != size for k in calls[:-1]) or calls[-1] > size:
            continue
        per_call = []
        for r, k in zip(rs, calls):
            per_call += [(r["end"] - r["start"]) / k] * k
        new = max(1, _default_chunk(n, processes))
        rechunked[id(rs[0])] = [sum(per_call[i:i + new]) for i in range(0, n, new)]
        skip.update(id(r) for r in rs[1:])
    out = []
    for r in rows:
        if id(r) in rechunked:
            out += rechunked[id(r)]
        elif id(r) not in skip:
            out.append(float(r["end"] - r["start"]))
    return out


def pool_what_if(spans: list[dict], shapes: list[Shape]) -> dict | None:
    """The pool calls of process pools replayed on ``processes=N``: {"entries", "model"}; None when
    the run has none. Calls form a phase (a map, or calls submitted together) while some call runs,
    pauses under PHASE_GAP (or PHASE_GAPS times the usual gap between two calls of a process) aside;
    each phase is a list schedule of its calls on N processes, in their recorded order, with the
    usual gap between two calls of a process; the time between phases stays as recorded."""
    rows = [r for r in spans if r["name"].startswith(POOL_SPANS)
            and r["attributes"].get("evlog.pool.kind") in PROCESS_POOLS]
    if not rows:
        return None
    rows.sort(key=lambda r: (r["start"], r["end"]))
    by_proc: dict[str, list] = {}
    for r in rows:
        by_proc.setdefault(label(r["resource"]), []).append(r)
    recorded_n = len(by_proc)
    gaps = [max(0, b["start"] - a["end"]) for rs in by_proc.values() for a, b in zip(rs, rs[1:])]
    gap = float(statistics.median(gaps)) if gaps else 0.0
    pause = max(PHASE_GAP, PHASE_GAPS * gap)
    gap = float(statistics.median([g for g in gaps if g < pause] or [0]))
    phases: list[list[dict]] = []
    reach = None
    for r in rows:
        if reach is None or r["start"] >= reach + pause:
            phases.append([])
        phases[-1].append(r)
        reach = r["end"] if reach is None else max(reach, r["end"])
    recorded = float(max(r["end"] for r in rows) - rows[0]["start"])
    between = recorded - sum(max(r["end"] for r in ph) - ph[0]["start"] for ph in phases)

    def predict(n: int) -> dict:
        total, longest, slots = max(0.0, between), 0.0, 0.0
        for ph in phases:
            units = _units(ph, recorded_n, n)
            span, last = list_schedule(units, n, gap)
            total += span
            if span <= units[last] * 1.0001 + 1:
                longest += span  # the last call started at once: no process count makes it shorter
            else:
                slots += span
        return _entry({"processes": n}, total, recorded, {"processes": slots, "the longest call": longest})

    model = {"recorded": {"processes": recorded_n, "recorded_s": round(recorded / NS, 6),
                          "replayed_s": predict(recorded_n)["predicted_s"]},
             "phases": len(phases), "gap_s": round(gap / NS, 6)}
    return {"entries": [predict(s.processes) for s in shapes if s.processes],  # attach passes pool shapes only
            "model": model}


# -------------------------------------------------------------------------------------------------
# the report


def attach(out: dict, comps: list[Computation], spans: list[dict], shapes: list[Shape], curve: bool = False) -> None:
    """Adds ``what_if`` (one entry per shape asked, in order), ``what_if_model``, each computation's
    ``what_if`` and, with ``curve``, ``what_if_curve`` to the report dict ``out`` (docs/report.md)."""
    dask_shapes = [s for s in shapes if s.workers]
    pool_shapes = [s for s in shapes if s.processes]
    model: dict = {}
    got: dict[str, dict] = {}
    if dask_shapes:
        live = [c for c in comps if c.start is not None and c.tasks]
        if not live:
            raise WhatIfError(f"--what-if {dask_shapes[0].text}: this run has no Dask computations to replay")
        d = dask_what_if(comps, out["computations"], dask_shapes, curve)
        for s, e in zip(dask_shapes, d["entries"]):
            got[s.text] = e
        for oc, per in zip(out["computations"], d["per_computation"]):
            oc["what_if"] = per
        model["dask"] = d["model"]
        if "curve" in d:
            out["what_if_curve"] = d["curve"]
    if pool_shapes:
        p = pool_what_if(spans, pool_shapes)
        if p is None:
            raise WhatIfError(f"--what-if {pool_shapes[0].text}: this run has no process-pool calls to replay "
                              "(ProcessPoolExecutor, multiprocessing Pool)")
        for s, e in zip(pool_shapes, p["entries"]):
            got[s.text] = e
        model["pools"] = p["model"]
    out["what_if"] = [got[s.text] for s in shapes]
    out["what_if_model"] = model


LIMIT_WORDS = {
    "critical path": "the critical path: tasks waiting on each other",
    "workers": "the workers: tasks waiting for a thread",
    "transfers": "transfers between workers",
    "the GIL": "the GIL: CPU-bound tasks sharing a worker process",
    "scheduler latency": "the scheduler's latency per task",
    "the longest call": "the longest call",
    "processes": "the processes: calls waiting for one",
}


def shape_name(entry: dict) -> str:
    """"4 workers x 2 threads", "1 worker x 1 thread", "3 processes"."""
    if "processes" in entry:
        n = entry["processes"]
        return f"{n} process" + ("es" if n != 1 else "")
    w, t = entry["workers"], entry["threads"]
    return f"{w} worker{'s' if w != 1 else ''} x {t} thread{'s' if t != 1 else ''}"


def limit_words(entry: dict) -> str:
    """What limits a prediction, in words, with its share of the chain where known."""
    words = LIMIT_WORDS.get(entry["limited_by"], entry["limited_by"])
    limits = entry.get("limits_s") or {}
    total = sum(limits.values())
    if total > 0 and entry["limited_by"] in limits:
        share = round(100 * limits[entry["limited_by"]] / total)
        words += f" ({share}% of the time)" if "processes" in entry else f" ({share}% of the longest chain)"
    return words


def model_words(model: dict) -> list[str]:
    """The inputs the predictions rest on, one line each."""
    out = []
    d = model.get("dask")
    if d:
        r = d["recorded"]
        out.append(f"recorded on {shape_name(r)}: {r['recorded_s']:.3f} s; replayed on that shape: "
                   f"{r['replayed_s']:.3f} s (the model's own error)")
        lat = f"{d['latency_s'] * 1e3:.1f} ms per task"
        lat += f" (median of {d['latency_samples']:,})" if d["latency_samples"] else " (no task on an idle worker: the least gap)"
        net = (f"{d['bandwidth_Bps'] / 1e6:,.0f} MB/s (over {d['bandwidth_transfers']:,} transfers)"
               if d["bandwidth_transfers"] else f"{d['bandwidth_Bps'] / 1e6:,.0f} MB/s (Dask's default: no transfer "
               f"of {SMALL_TRANSFER // 1024} KiB or more)")
        net += (f" + {d['transfer_latency_s'] * 1e3:.1f} ms per transfer (median of {d['latency_transfers']:,})"
                if d["latency_transfers"] else " + no latency per transfer (no small transfer recorded)")
        cpu = (", ".join(f"{p} {round(100 * x)}%" for p, x in d["cpu_share"].items()) if d["cpu_share"] else
               "unknown (threads assumed to overlap fully)")
        hand = f"{d['hand_off_s'] * 1e3:.1f} ms" + (f" (median of {d['hand_off_samples']:,})" if d["hand_off_samples"]
                                                    else " (none measured)")
        out.append(f"scheduler latency {lat}, a worker's first task {d['warm_up_s'] * 1e3:.1f} ms more; from one "
                   f"task to the next on a thread {hand}; network {net}; CPU share {cpu}")
    p = model.get("pools")
    if p:
        r = p["recorded"]
        out.append(f"pools recorded on {shape_name(r)}: {r['recorded_s']:.3f} s in {p['phases']:,} phase(s) (calls "
                   f"overlapping in time); replayed on that shape: {r['replayed_s']:.3f} s; "
                   f"{p['gap_s'] * 1e3:.1f} ms between two calls of a process")
    return out
