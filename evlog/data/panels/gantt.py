"""The Gantt: task spans as bars in lanes per worker and thread, or per lane the busy fraction of time bins
when too many spans are in view (saying so); below each Dask worker's threads, a lane of its transfers
(``dask.transfer`` spans: data it fetched from other workers, and data others fetched from it).

What a lane shows is absolute: a bin's value is the share of its time a task ran (0 idle, 1 busy
throughout), however many spans are in view, so the page can shade it as it was (gantt.js)."""
from __future__ import annotations

import collections
import heapq

from evlog.data.store import CAT_EXECUTION, CAT_OTHER, CAT_POOL_TASK, CAT_SCHED_TASK, Store

MAX_BARS = 20_000          # Gantt bars sent as such; above, time bins per lane
GANTT_BINS = 800           # bins per lane in the aggregated Gantt, unless the page asks for its width in pixels
MIN_BINS, MAX_BINS = 50, 4000
TRANSFERS = "transfers"    # the thread name of a worker's transfer lane
IN, OUT = 0, 1             # a transfer as its lane shows it: data the worker fetched, data fetched from it
THREAD_SLACK_NS = 25_000_000  # in one thread's lane, overlaps up to this are clocks disagreeing
# a Dask worker's executor threads, one task at a time, always: "Dask-Default-Threads-{pid}-{n}" up to
# distributed 2024.x, "{i}-Dask-Default-Threads-{pid}-{n}" on newer ones
EXECUTOR_THREAD = "Dask-Default-Threads-"


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
    from its start sample to its end sample, cluster start-up included).

    Lanes: per worker its threads (rows packed so that a thread's tasks stay on one), then, in a Dask
    run, its transfer lane when it has transfers in view. ``bars``: [start, end, lane, prefix, error, row
    id, key]; ``transfers``: [start, end, lane, IN | OUT, row id, bytes, the other worker, key, error].
    Past ``max_bars`` of both, ``busy`` per lane and bin instead (a transfer lane: data fetched in),
    with ``transfer_busy`` [[lane, in, out], ...]."""
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
    moves: list[tuple[str, int, tuple]] = []  # (the lane's worker, IN | OUT, transfer row)
    if cat == CAT_EXECUTION:
        for r in store.transfer_rows(ns0, ns1):
            for w, d in ((r[3], IN), (r[4], OUT)):
                if w and (not worker or w == worker):
                    moves.append((w, d, r))
    movers = {w for w, _d, _r in moves}
    prefixes: dict[str, int] = {}
    lanes: list[dict] = []
    placed: list[tuple[int, tuple]] = []
    transfer_lane: dict[str, int] = {}
    threads: dict[str, list[str]] = collections.defaultdict(list)
    for w, thread in sorted(groups):
        threads[w].append(thread)
    for w in sorted(set(threads) | movers):
        for thread in threads.get(w, ()):
            g = groups[(w, thread)]
            # a Dask executor thread runs one task at a time: any overlap of its spans is the worker's clock
            # offset moving (by 100 ms and more on a loaded host), so it stays one row whatever the overlap
            slack = (1 << 62) if cat == CAT_EXECUTION and EXECUTOR_THREAD in thread else THREAD_SLACK_NS
            sub = _pack(g, slack if thread and cat in (CAT_EXECUTION, CAT_POOL_TASK) else 0)
            base = len(lanes)
            for i in range(max(sub) + 1 if sub else 0):
                lanes.append({"worker": w, "thread": thread, "sub": i})
            placed.extend((base + s, r) for s, r in zip(sub, g))
        if w in movers:
            transfer_lane[w] = len(lanes)
            lanes.append({"worker": w, "thread": TRANSFERS, "sub": 0, "transfers": True})
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
           "workers": sorted(set(threads) | movers), "transfer_total": len({r[0] for _w, _d, r in moves})}
    if total + len(moves) <= max_bars:
        bars = []
        for lane, r in placed:
            p = prefixes.setdefault(r[6] or r[9], len(prefixes))
            bars.append([r[1] / 1e9, r[2] / 1e9, lane, p, 1 if r[7] == "ERROR" else 0, r[0], r[8] or ""])
        out.update(mode="bars", bars=bars, prefixes=list(prefixes), shown=total, note="", transfers=[
            [r[1] / 1e9, r[2] / 1e9, transfer_lane[w], d, r[0], r[5], r[4] if d == IN else r[3], r[7] or "",
             1 if r[6] == "ERROR" else 0] for w, d, r in moves])
        return out
    # too many to draw one by one: per lane, the busy fraction of each time bin and its main prefix
    width = max(hi - lo, 1) / bins
    busy = [[0.0] * bins for _ in lanes]
    errs = [[0] * bins for _ in lanes]
    starts = [[0] * bins for _ in lanes]  # tasks started per bin: where short tasks were, however short
    main: list[list[dict]] = [[{} for _ in range(bins)] for _ in lanes]
    for lane, r in placed:
        p = prefixes.setdefault(r[6] or r[9], len(prefixes))
        b0 = _spread(busy[lane], r[1], r[2], lo, hi, width, main[lane], p)
        if b0 is None:
            continue
        starts[lane][b0] += 1
        if r[7] == "ERROR":
            errs[lane][b0] = 1
    moved = {lane: ([0.0] * bins, [0.0] * bins) for lane in transfer_lane.values()}
    for w, d, r in moves:
        _spread(moved[transfer_lane[w]][d], r[1], r[2], lo, hi, width)
    for lane, (into, _out) in moved.items():
        busy[lane] = into
    out.update(
        mode="aggregated", prefixes=list(prefixes), shown=0, bins=bins,
        busy=[[round(min(x, 1.0), 4) for x in row] for row in busy],
        main=[[max(d, key=d.get) if d else -1 for d in row] for row in main],
        errors=errs, starts=starts,
        transfer_busy=[[lane, [round(min(x, 1.0), 4) for x in a], [round(min(x, 1.0), 4) for x in b]]
                       for lane, (a, b) in sorted(moved.items())],
        note=(f"{total:,} spans in view: too many to draw one by one, so each lane shows how busy it was "
              f"in {bins} time bins: the shade is the share of the bin's time a task ran (white: idle; full "
              f"colour: busy throughout), the colour the bin's main task prefix. Drag across the chart to "
              f"zoom in; below {max_bars:,} spans every task is drawn."),
    )
    return out


def _spread(row: list[float], start: int, end: int, lo: int, hi: int, width: float, main: list | None = None,
            prefix: int = 0) -> int | None:
    """Add the part of [start, end] in each bin of ``row`` (as a share of the bin), and to ``main``'s count
    of ``prefix``; returns the first bin (None when the span is outside [lo, hi])."""
    s, e = max(start, lo), min(max(end, start), hi)
    if e < s:
        return None
    bins = len(row)
    b0 = min(int((s - lo) / width), bins - 1)
    b1 = min(int((e - lo) / width), bins - 1)
    for b in range(b0, b1 + 1):
        left = lo + b * width
        part = min(e, left + width) - max(s, left)
        if part > 0:
            row[b] += part / width
            if main is not None:
                main[b][prefix] = main[b].get(prefix, 0) + part
    return b0
