"""What-if: a recorded task graph replayed on another cluster shape (docs/report.md, "What-if").

Pure functions over plain inputs, nothing of the run's rows (evlog.report.whatif_run makes the
inputs from a run): a ``Graph`` of ``Node``s (each task's own running time, result size, CPU share,
dependencies, priority), the ``Params`` measured in the run (the scheduler's latency per task, the
network's bandwidth and latency per transfer), and a shape (workers x threads). ``replay`` is a
discrete-event simulation of Dask's scheduler on that shape:

- A task is ready when its last dependency ends; it can start ``latency`` later (the scheduler
  hears of the end, decides, and tells the worker), after its inputs held by other workers arrive
  (per source worker: ``transfer_latency`` + bytes / ``bandwidth``, the sources in parallel, while
  the task waits for a thread), on a free thread, its worker's ready tasks taken in priority order;
  a thread that a task's end frees takes the next one ``hand_off`` later, and a worker starts nothing
  until ``warm_up`` after its first task came.
- Worker choice is Dask's: a root-ish task (its group over twice the threads, its group's
  dependencies under 5 tasks: ``Scheduler.is_rootish``) waits in the scheduler's queue until a
  worker has fewer than ceil(worker-saturation x threads) tasks (``_task_slots_available``), then
  goes to the least busy such worker (``decide_worker_rootish_queuing_enabled``); a task with
  dependencies goes to the worker holding one of them where it would start earliest: occupancy over
  threads plus the bytes it lacks over the bandwidth, then the fewest bytes held
  (``decide_worker``, ``worker_objective``); any other to the idle worker with the least occupancy,
  round-robin among empty ones (``decide_worker_non_rootish``). Occupancy is the expected time of the
  tasks a worker has (its prefix's mean), as Dask estimates it.
- Threads of one worker process share one GIL: tasks running together on a worker progress at
  rate min(1, 1 / (sum of their CPU shares)), so a task's CPU share does not speed up with threads
  in one process and its off-CPU share does.
- Work stealing is left out: Dask steals from saturated to idle workers only when the move costs
  less than it gains, and a replay that places tasks by Dask's own objective leaves it little to
  gain; its effect is the replay's error, measured against real runs (docs/report.md).

``replay`` also says what limited the result: it walks back from the last task, each step to what
made a task start no earlier (its last dependency, or the task whose end freed its thread) and
charges the time on that chain to the critical path (tasks waiting on each other), the workers
(tasks that waited for a thread or a queue slot), transfers, the GIL (the slow-down of tasks
sharing one), the scheduler's latency, or the submission (the time before the chain's first task
reached the scheduler: the client sending the graph, or an earlier call's result).

``list_schedule`` is the model of pools: independent calls, each to the process free first.
"""
from __future__ import annotations

import heapq
import itertools
import math

#: Dask's defaults (distributed.yaml): ``distributed.scheduler.worker-saturation``,
#: ``distributed.scheduler.bandwidth`` (bytes/s), ``rootish-taskgroup`` and
#: ``rootish-taskgroup-dependencies``
WORKER_SATURATION = 1.1
DEFAULT_BANDWIDTH = 100_000_000
ROOTISH_TG = 5
ROOTISH_TG_DEPENDENCIES = 5

LIMITS = ("critical path", "workers", "transfers", "the GIL", "scheduler latency", "submission")


class Node:
    """One task of a graph to replay."""

    __slots__ = ("key", "prefix", "group", "deps", "duration", "nbytes", "cpu", "priority", "release")

    def __init__(self, key: str, duration: float, deps: list[int] | None = None, *, prefix: str = "",
                 group: str = "", nbytes: int = 0, cpu: float = 0.0, priority: float | tuple = 0.0,
                 release: float = 0.0):
        #: the task's key (for the caller; the replay uses indexes)
        self.key = key
        #: its prefix: the unit of Dask's duration estimates (occupancy)
        self.prefix = prefix or key
        #: its task group: the unit of Dask's root-ish test
        self.group = group or self.prefix
        #: indexes in the graph of the tasks it depends on (in this graph; others count as present)
        self.deps = list(deps or ())
        #: its running time alone on a worker (ns): no other task sharing the GIL
        self.duration = float(duration)
        #: the size of its result (bytes), moved when a task on another worker needs it
        self.nbytes = int(nbytes)
        #: the share of its running time on the CPU (holding the GIL), 0..1
        self.cpu = min(1.0, max(0.0, float(cpu)))
        #: Dask's order: among ready tasks on a worker, the lowest runs first (one graph's priorities are
        #: all numbers or all tuples: they are compared with each other)
        self.priority = priority
        #: for a task without dependencies in the graph: when the scheduler gets it (ns from the start)
        self.release = float(release)


#: a graph's shape (``Graph.shape``): per node its dependents, its count of dependencies and its prefix's
#: mean duration (ns), and per task group its size, its dependency groups' count and their total size
_Shape = tuple[list[list[int]], list[int], list[float], dict[str, tuple[int, int, int]]]


class Graph:
    """The tasks of one computation, and the time outside the replay: ``tail`` from the last task's
    end to the end of the client's call (its results coming back)."""

    __slots__ = ("nodes", "tail", "_shape")

    def __init__(self, nodes: list[Node], tail: float = 0.0):
        self.nodes = nodes
        self.tail = float(tail)
        self._shape: _Shape | None = None

    def shape(self) -> _Shape:
        """What every replay of the graph needs, made once: each node's dependents and count of
        dependencies, its prefix's mean duration (Dask's estimate), and per task group its size and
        its dependency groups' count and total size."""
        if self._shape is None:
            nodes = self.nodes
            dependents: list[list[int]] = [[] for _ in nodes]
            waiting = []
            for i, nd in enumerate(nodes):
                ds = set(nd.deps)
                waiting.append(len(ds))
                for d in ds:
                    dependents[d].append(i)
            sums: dict[str, list] = {}
            size: dict[str, int] = {}
            dep_groups: dict[str, set] = {}
            for nd in nodes:
                x = sums.setdefault(nd.prefix, [0.0, 0])
                x[0] += nd.duration
                x[1] += 1
                size[nd.group] = size.get(nd.group, 0) + 1
                g = dep_groups.setdefault(nd.group, set())
                for d in nd.deps:
                    g.add(nodes[d].group)
            est = [sums[nd.prefix][0] / sums[nd.prefix][1] for nd in nodes]
            groups = {g: (k, len(dep_groups[g]), sum(size[x] for x in dep_groups[g])) for g, k in size.items()}
            self._shape = (dependents, waiting, est, groups)
        return self._shape


class Params:
    """What the replay takes from the recorded run."""

    __slots__ = ("latency", "bandwidth", "transfer_latency", "saturation", "hand_off", "warm_up")

    def __init__(self, latency: float = 0.0, bandwidth: float = DEFAULT_BANDWIDTH, transfer_latency: float = 0.0,
                 saturation: float = WORKER_SATURATION, hand_off: float = 0.0, warm_up: float = 0.0):
        #: ns from a task's last dependency ending to its start on an idle worker
        self.latency = float(latency)
        #: ns from a task's end to the start of the next one its thread had waiting (the worker's own
        #: work between two tasks: storing the result, telling the scheduler, taking the next)
        self.hand_off = float(hand_off)
        #: ns more that a worker's first task waits (the worker's first messages, imports, the
        #: function's deserialising)
        self.warm_up = float(warm_up)
        #: bytes/s between two workers
        self.bandwidth = float(bandwidth)
        #: ns each transfer takes besides its bytes (a message to the other worker and back)
        self.transfer_latency = float(transfer_latency)
        #: Dask's ``worker-saturation``: a worker gets root-ish tasks until it has ceil(this x threads)
        self.saturation = float(saturation)


class Replay:
    """A replay's answer: ``makespan`` (ns from the graph's start to its last task's end), ``wall``
    (with the graph's tail), and ``limits``: ns of the chain that made the last end what it is,
    by cause (LIMITS)."""

    __slots__ = ("makespan", "wall", "limits", "start", "end", "worker")

    def __init__(self, makespan: float, wall: float, limits: dict, start: list, end: list, worker: list):
        self.makespan = makespan
        self.wall = wall
        self.limits = limits
        #: per node: when it started and ended (ns), and the worker that ran it (0..workers-1)
        self.start = start
        self.end = end
        self.worker = worker

    @property
    def limited_by(self) -> str:
        """The cause with the most time on the chain (the critical path on a tie or an empty graph)."""
        return max(LIMITS, key=lambda k: (self.limits.get(k, 0.0), k == "critical path"))


def rootish_groups(graph: Graph, total_threads: int) -> set[str]:
    """The task groups Dask's ``is_rootish`` calls root-ish on a cluster of ``total_threads``:
    over twice as many tasks as threads, and their dependency groups fewer than ROOTISH_TG with fewer
    than ROOTISH_TG_DEPENDENCIES tasks in all."""
    return {g for g, (k, ndeps, deps_size) in graph.shape()[3].items()
            if k > 2 * total_threads and ndeps < ROOTISH_TG and deps_size < ROOTISH_TG_DEPENDENCIES}


# the kinds of events of a replay, in the order they are handled at one time
_END, _ARRIVE, _RELEASE = 0, 1, 2


def replay(graph: Graph, workers: int, threads: int, params: Params) -> Replay:
    """The graph run on ``workers`` worker processes of ``threads`` threads each (module docstring)."""
    if workers < 1 or threads < 1:
        raise ValueError("workers and threads must be at least 1")
    nodes = graph.nodes
    n = len(nodes)
    if not n:
        return Replay(0.0, graph.tail, {}, [], [], [])
    W, T = workers, threads
    lat, xlat, per_byte, hand = params.latency, params.transfer_latency, 1e9 / params.bandwidth, params.hand_off
    warm_at: list = [None] * W        # when a worker is warm: its first task's arrival and the warm-up
    cap = max(math.ceil(params.saturation * T), 1) if not math.isinf(params.saturation) else None
    rootish = rootish_groups(graph, W * T) if cap is not None else set()
    dependents, waiting0, est, _ = graph.shape()
    waiting = list(waiting0)
    gil = T > 1 and any(nd.cpu > 0 for nd in nodes)
    duration = [nd.duration for nd in nodes]
    priority = [nd.priority for nd in nodes]
    deps_of = [nd.deps for nd in nodes]
    nbytes = [nd.nbytes for nd in nodes]
    queued = [nd.group in rootish for nd in nodes]

    free = [T] * W                    # free threads
    processing = [0] * W              # tasks sent to the worker and not ended
    occ = [0.0] * W                   # their expected time
    held = [0] * W                    # bytes of results the worker holds
    ready_at: list[list] = [[] for _ in range(W)]  # heap (priority, i): arrived, waiting for a thread
    who: list = [None] * n            # workers holding the result
    # with the GIL: running tasks per worker, i -> [time left alone (ns), cpu share]; the worker's
    # rate and when its tasks' progress was last taken
    running: list[dict] = [{} for _ in range(W)]
    rate = [1.0] * W
    updated = [0.0] * W
    version = [0] * n
    queue: list = []                  # the scheduler's queue of root-ish tasks: (priority, i)
    ev: list = []                     # (time, kind, priority, seq, i, worker, version): at one time,
    #                                   ends first, then arrivals and releases in Dask's priority order
    seq = itertools.count()
    push = heapq.heappush

    ready = [0.0] * n                 # when the last dependency ended (or the release)
    last_dep = [-1] * n               # that dependency
    sent = [0.0] * n                  # when the scheduler sent it to a worker
    fetch = [0.0] * n                 # its inputs' transfer time
    arrive = [0.0] * n                # when it could start on its worker
    start = [0.0] * n
    end = [0.0] * n
    worker = [-1] * n
    freed_by = [-1] * n               # the task whose end gave it its thread (it waited for one)
    rr = 0                            # Dask's round-robin among empty workers

    def send(i: int, w: int, t: float) -> None:
        """The scheduler sends task i to worker w at t: its inputs come, then it waits for a thread."""
        worker[i] = w
        sent[i] = t
        processing[w] += 1
        occ[w] += est[i]
        f = 0.0
        deps = deps_of[i]
        if deps:
            by_source: dict[int, int] = {}
            for d in deps:
                h = who[d]
                if w not in h:
                    src = min(h)
                    by_source[src] = by_source.get(src, 0) + nbytes[d]
                    h.add(w)
                    held[w] += nbytes[d]
            if by_source:
                f = xlat + max(by_source.values()) * per_byte
        fetch[i] = f
        a = t + lat + f
        if warm_at[w] is None:
            warm_at[w] = t + lat + params.warm_up
        arrive[i] = a = max(a, warm_at[w])
        push(ev, (a, _ARRIVE, priority[i], next(seq), i, w, 0))

    def place(i: int, t: float) -> None:
        """Task i is ready at t: to the scheduler's queue, or to a worker now."""
        nonlocal rr
        if queued[i]:
            push(queue, (priority[i], i))
            return
        deps = deps_of[i]
        if deps:
            holders = set()
            for d in deps:
                holders |= who[d]
            if len(holders) == 1:
                w = next(iter(holders))
            else:
                def objective(x: int) -> tuple:
                    lack = sum(nbytes[d] for d in deps if x not in who[d])
                    return (occ[x] / T + lack * per_byte, held[x], x)
                w = min(holders, key=objective)
        else:
            mean = sum(occ) / (W * T)
            idle = [x for x in range(W) if processing[x] < T or occ[x] < T * mean / 2] or list(range(W))
            w = min(idle, key=occ.__getitem__)
            if occ[w] == 0:
                for k in range(W):
                    x = (rr + k) % W
                    if occ[x] == 0 and x in idle:
                        w = x
                        break
            rr += 1
        send(i, w, t)

    def dispatch(t: float) -> None:
        """Queued root-ish tasks to workers with a free slot, the least busy first."""
        if cap is None:  # no saturation cap: no group is root-ish, nothing is queued
            return
        while queue:
            best, load = -1, cap
            for x in range(W):
                if processing[x] < load:
                    best, load = x, processing[x]
            if best < 0:
                return
            send(heapq.heappop(queue)[1], best, t)

    def progress(w: int, t: float) -> None:
        """With the GIL: the worker's running tasks' progress up to t at its rate."""
        elapsed = (t - updated[w]) * rate[w]
        updated[w] = t
        if elapsed:
            for st in running[w].values():
                st[0] -= elapsed

    def rerate(w: int, t: float) -> None:
        """With the GIL: the worker's rate after a change of who runs, and its tasks' new ends."""
        run = running[w]
        demand = sum(st[1] for st in run.values())
        r_new = 1.0 if demand <= 1.0 else 1.0 / demand
        if r_new == rate[w] == 1.0:
            return
        rate[w] = r_new
        for j, st in run.items():
            version[j] += 1
            push(ev, (t + max(0.0, st[0]) / r_new, _END, 0, next(seq), j, w, version[j]))

    def begin(w: int, t: float, after: int) -> None:
        """Free threads of w take its arrived tasks, in priority order: at once for a thread that was
        idle, after the hand-off for one that a task's end (``after``) just freed."""
        ra = ready_at[w]
        while free[w] and ra:
            i = heapq.heappop(ra)[1]
            free[w] -= 1
            s = t + hand if after >= 0 else t
            start[i] = s
            if s > arrive[i]:
                freed_by[i] = after
            if gil:
                progress(w, t)
                running[w][i] = [duration[i] + s - t, nodes[i].cpu]
                before = rate[w]
                rerate(w, t)
                if not (rate[w] == before == 1.0):
                    continue  # rerate gave it its end
            version[i] += 1
            push(ev, (s + duration[i], _END, 0, next(seq), i, w, version[i]))

    for i in range(n):
        if not waiting[i]:
            push(ev, (nodes[i].release, _RELEASE, priority[i], next(seq), i, -1, 0))
    pop = heapq.heappop
    while ev:
        t, kind, _, _, i, w, v = pop(ev)
        if kind == _END:
            if v != version[i]:
                continue
            end[i] = t
            if gil:
                progress(w, t)
                del running[w][i]
                rerate(w, t)
            free[w] += 1
            processing[w] -= 1
            occ[w] -= est[i]
            who[i] = {w}
            held[w] += nbytes[i]
            for j in dependents[i]:
                waiting[j] -= 1
                if not waiting[j]:
                    ready[j] = t
                    last_dep[j] = i
                    place(j, t)
            if ready_at[w]:
                begin(w, t, i)
            if queue:
                dispatch(t)
        elif kind == _ARRIVE:
            push(ready_at[w], (priority[i], i))
            if free[w]:
                begin(w, t, -1)
        else:
            ready[i] = t
            place(i, t)
            if queue:
                dispatch(t)
    makespan = max(end)
    return Replay(makespan, makespan + graph.tail, _limits(nodes, ready, last_dep, sent, fetch, arrive, start, end,
                                                           freed_by), start, end, worker)


def _limits(nodes: list[Node], ready: list[float], last_dep: list[int], sent: list[float], fetch: list[float],
            arrive: list[float], start: list[float], end: list[float], freed_by: list[int]) -> dict:
    """ns by cause on the chain back from the last task to end (module docstring). The chain tiles
    the time: a task that waited for a thread is preceded by the task whose end freed it, and counts
    to the workers; one that started when it arrived is preceded by its transfers, the scheduler's
    latency, its time in the scheduler's queue (the workers) and its last dependency, and counts to
    the critical path. A task's slow-down by the GIL counts to the GIL, and the time before the
    chain's first task reached the scheduler to the submission."""
    out = dict.fromkeys(LIMITS, 0.0)
    i = max(range(len(nodes)), key=lambda k: end[k])
    for _ in range(len(nodes)):
        ran = end[i] - start[i]
        alone = min(ran, nodes[i].duration)
        out["the GIL"] += ran - alone
        if freed_by[i] >= 0:
            out["workers"] += alone
            i = freed_by[i]
            continue
        out["critical path"] += alone
        out["transfers"] += fetch[i]
        out["scheduler latency"] += max(0.0, arrive[i] - fetch[i] - sent[i])
        out["workers"] += sent[i] - ready[i]  # in the scheduler's queue, for a slot
        if last_dep[i] < 0:
            out["submission"] += ready[i]
            break
        i = last_dep[i]
    return out


def list_schedule(durations: list[float], processes: int, gap: float = 0.0) -> tuple[float, int]:
    """Independent calls, in order, each to the process free first (``gap`` ns between two calls of
    one process): (the makespan in ns, the index of the call that ended last)."""
    if processes < 1:
        raise ValueError("processes must be at least 1")
    free = [(0.0, k) for k in range(min(processes, max(1, len(durations))))]
    heapq.heapify(free)
    last, last_i = 0.0, -1
    for i, d in enumerate(durations):
        t, k = heapq.heappop(free)
        e = t + d
        if e >= last:
            last, last_i = e, i
        heapq.heappush(free, (e + gap, k))
    return last, last_i
