"""The Gantt: task spans as bars in lanes per worker and thread, or per lane the busy fraction of time bins
when too many spans are in view (saying so)."""
from __future__ import annotations

import collections
import heapq

from evlog.data.store import CAT_EXECUTION, CAT_OTHER, CAT_POOL_TASK, CAT_SCHED_TASK, Store

MAX_BARS = 20_000          # Gantt bars sent as such; above, time bins per lane
GANTT_BINS = 800           # bins per lane in the aggregated Gantt
THREAD_SLACK_NS = 25_000_000  # in one thread's lane, overlaps up to this are clocks disagreeing
EXECUTOR_THREAD = "-Dask-Default-Threads-"  # a Dask worker's executor threads: one task at a time, always


def _pack(rows: list[tuple], slack: int = 0) -> list[int]:
    """Sub-lane per bar so that bars in one sub-lane overlap by at most ``slack`` ns (rows sorted by start).

    A worker thread runs one task at a time, yet its tasks' spans can overlap by a few ms: a Dask
    execution's times are shifted by the worker's estimate of its clock offset from the scheduler,
    which a heartbeat may change while the task runs. So a thread's lane packs with THREAD_SLACK_NS:
    the next task stays on the thread's row, and only a real overlap (tasks that are coroutines on
    the event loop's thread, a span nested in another) adds a row.
    """
    free: list[tuple[int, int]] = []  # (end, sub-lane)
    used = 0
    out = []
    for r in rows:
        start, end = r[1], r[2]
        last = start
        if free and free[0][0] - slack <= start:
            last, lane = heapq.heappop(free)
        else:
            lane = used
            used += 1
        heapq.heappush(free, (max(end, start, last), lane))
        out.append(lane)
    return out


def task_category(store: Store) -> tuple[int | None, str]:
    """Which spans are the run's tasks (the Gantt's bars, the saturation plots' steps), and what they are."""
    cats = store.span_categories()
    if cats.get(CAT_EXECUTION):
        return CAT_EXECUTION, "Dask task executions, per worker and thread"
    if cats.get(CAT_POOL_TASK):
        return CAT_POOL_TASK, "pool tasks (concurrent.futures, multiprocessing), per process and thread"
    if cats.get(CAT_SCHED_TASK):
        return CAT_SCHED_TASK, "scheduler task spans, per worker"
    return (CAT_OTHER if cats else None), "spans, per process and thread"


def gantt(store: Store, worker: str | None = None, t0: float | None = None, t1: float | None = None,
          max_bars: int = MAX_BARS, bins: int = GANTT_BINS, whole: bool = False) -> dict:
    """The Gantt's lanes and bars in [t0, t1]; by default the tasks' time range (``whole``: the run's,
    from its start sample to its end sample, cluster start-up included)."""
    cat, what = task_category(store)
    labels = {p["id"]: p["label"] for p in store.processes()}
    ns0 = None if t0 is None else int(t0 * 1e9)
    ns1 = None if t1 is None else int(t1 * 1e9)
    rows = store.gantt_rows(cat, ns0, ns1)
    groups: dict[tuple[str, str], list[tuple]] = collections.defaultdict(list)
    for r in rows:
        w = r[3] or labels.get(r[5], "?")
        if worker and w != worker:
            continue
        groups[(w, r[4] or "")].append(r)
    prefixes: dict[str, int] = {}
    lanes: list[dict] = []
    placed: list[tuple[int, tuple]] = []
    for (w, thread) in sorted(groups):
        g = groups[(w, thread)]
        # a Dask executor thread runs one task at a time: any overlap of its spans is the worker's clock
        # offset moving (by 100 ms and more on a loaded host), so it stays one row whatever the overlap
        slack = (1 << 62) if cat == CAT_EXECUTION and EXECUTOR_THREAD in thread else THREAD_SLACK_NS
        sub = _pack(g, slack if thread and cat in (CAT_EXECUTION, CAT_POOL_TASK) else 0)
        base = len(lanes)
        for i in range(max(sub) + 1 if sub else 0):
            lanes.append({"worker": w, "thread": thread, "sub": i})
        placed.extend((base + s, r) for s, r in zip(sub, g))
    total = len(placed)
    run0, run1 = store.run_bounds()  # the run's start and end samples
    task0 = min((r[1] for _, r in placed), default=None)
    task1 = max((r[2] for _, r in placed), default=None)
    if task0 is not None and ns0 is None and ns1 is None:  # the tasks' range, a little room either side
        pad = max((task1 - task0) // 50, 1_000_000)
        task0, task1 = task0 - pad, task1 + pad
    run0 = min(x for x in (run0, task0) if x is not None) if run0 is not None or task0 is not None else 0
    run1 = max(x for x in (run1, task1) if x is not None) if run1 is not None or task1 is not None else 0
    lo, hi = (run0, run1) if whole or task0 is None else (task0, task1)
    if ns0 is not None:
        lo = ns0
    if ns1 is not None:
        hi = ns1
    out = {"what": what, "total": total, "lanes": lanes, "t0": lo / 1e9, "t1": hi / 1e9,
           "tasks_t0": None if task0 is None else task0 / 1e9, "tasks_t1": None if task1 is None else task1 / 1e9,
           "run_t0": run0 / 1e9, "run_t1": run1 / 1e9, "whole": bool(whole and ns0 is None and ns1 is None),
           "workers": sorted({w for w, _ in groups})}
    if total <= max_bars:
        bars = []
        for lane, r in placed:
            p = prefixes.setdefault(r[6] or r[9], len(prefixes))
            bars.append([r[1] / 1e9, r[2] / 1e9, lane, p, 1 if r[7] == "ERROR" else 0, r[0], r[8] or ""])
        out.update(mode="bars", bars=bars, prefixes=list(prefixes), shown=total, note="")
        return out
    # too many to draw one by one: per lane, the busy fraction of each time bin and its main prefix
    width = max(hi - lo, 1) / bins
    busy = [[0.0] * bins for _ in lanes]
    errs = [[0] * bins for _ in lanes]
    starts = [[0] * bins for _ in lanes]  # tasks started per bin: where short tasks were, however short
    main: list[list[dict]] = [[{} for _ in range(bins)] for _ in lanes]
    for lane, r in placed:
        s, e = max(r[1], lo), min(max(r[2], r[1]), hi)
        p = prefixes.setdefault(r[6] or r[9], len(prefixes))
        b0 = min(int((s - lo) / width), bins - 1)
        b1 = min(int((e - lo) / width), bins - 1)
        row, m = busy[lane], main[lane]
        starts[lane][b0] += 1
        for b in range(b0, b1 + 1):
            left = lo + b * width
            part = min(e, left + width) - max(s, left)
            if part > 0:
                row[b] += part / width
                m[b][p] = m[b].get(p, 0) + part
        if r[7] == "ERROR":
            errs[lane][b0] = 1
    out.update(
        mode="aggregated", prefixes=list(prefixes), shown=0, bins=bins,
        busy=[[round(min(x, 1.0), 3) for x in row] for row in busy],
        main=[[max(d, key=d.get) if d else -1 for d in row] for row in main],
        errors=errs, starts=starts,
        note=(f"{total:,} spans in view: too many to draw one by one, so each lane shows how busy it was "
              f"in {bins} time bins (colour: the main task prefix of the bin; the darker, the busier or the more "
              f"tasks started). Drag across the chart to "
              f"zoom in; below {max_bars:,} spans every task is drawn."),
    )
    return out
