"""Dask computations from decoded span rows: which task belongs to which client call, and each
task's times (ready, queued, transfer, compute, finish), as docs/report.md defines them.

Pure functions over otlp_decode's rows (dicts with trace_id, span_id, parent_span_id, name, start,
end, attributes, events, links, status_code, status_message, resource); nothing of the SDK.

A computation is one ``dask.compute`` span. A task belongs to the compute span it reaches through
its parent or its span links (walking up through any spans in between), so tasks split into
several linked traces still group under their client call; a task that reaches none falls back to
the compute span of its trace, else to a computation of its own trace.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter, itemgetter

from evlog.data.intervals import merge
from evlog.report.common import NS
from evlog.wire import dask as wire_dask

_FINAL = ("memory", "erred")
_LET_GO = ("released", "forgotten")
_READY = ("processing", "queued", "no-worker")
_MADE_READY_FROM = ("waiting", "released", None)
_TRANSITION_SLACK_NS = 2 * NS  # transitions recorded up to 2 s after a task span's end (conventions)
_EMPTY: dict = {}  # read only
_start = itemgetter("start")
_exec_start = attrgetter("start")


class Execution:
    """One ``dask.execute`` span: a run of the task's function on a worker thread."""

    __slots__ = ("start", "end", "worker", "thread", "erred", "error", "stacktrace", "transfer_ns", "other_ns",
                 "row")

    def __init__(self, row: dict):
        a = row["attributes"]
        self.row = row
        self.start = row["start"]
        self.end = row["end"]
        self.worker = str(a.get("dask.worker.address") or row["resource"].get("dask.worker.address") or "")
        self.thread = str(a.get("thread.name") or a.get("thread.id") or "")
        self.erred = row["status_code"] == "ERROR"
        self.error = row["status_message"] if self.erred else ""
        self.stacktrace = ""
        self.transfer_ns = 0
        self.other_ns = 0
        for ev in row["events"]:
            ea = ev.get("attributes") or {}
            name = ev.get("name")
            if name == "exception":
                self.erred = True
                self.error = self.error or str(ea.get("exception.message") or "")
                self.stacktrace = str(ea.get("exception.stacktrace") or "")
            else:
                d = ea.get("dask.startstop.duration")
                if isinstance(d, (int, float)):
                    if name == "transfer":
                        self.transfer_ns += int(d * NS)
                    else:
                        self.other_ns += int(d * NS)

    @property
    def compute_ns(self) -> int:
        """The execute span is the compute startstop widened to its other startstops (transfer,
        disk-read, ...): compute is what is left of it without transfer (disk I/O stays in compute)."""
        return max(0, self.end - self.start - self.transfer_ns)


class Task:
    """One task life on the scheduler (a ``dask.task`` span) and its executions."""

    __slots__ = ("key", "prefix", "span", "deps", "state", "worker", "executions", "submitted", "ready", "finish",
                 "erred", "error", "compute_ns", "transfer_ns", "queued_ns", "erred_ns", "comp", "let_go", "made_ready",
                 "ready_stimulus", "ran", "sent_at_once")

    def __init__(self, key: str, prefix: str, span: dict | None):
        self.key = key
        self.prefix = prefix
        self.span = span
        self.deps: list[str] = []
        self.state = ""
        self.worker = ""
        self.executions: list[Execution] = []
        self.submitted: int | None = None
        self.ready: int | None = None
        self.finish: int | None = None
        self.erred = False
        self.error = ""
        self.compute_ns = self.transfer_ns = self.queued_ns = self.erred_ns = 0
        self.comp: Computation | None = None
        self.let_go = False  #: its span says it only let its result go (``after_result``)
        # What the report reads of its transitions, read here in one pass rather than kept (a 157k-task run's
        # 385,000 transitions as tuples were 45 MB): the first, by time, that made it ready to run ...
        self.made_ready: int | None = None  #: ... (to processing, queued or no-worker, from waiting or released)
        self.ready_stimulus: str | None = None  #: ... and its stimulus id
        self.ran = False  #: a transition to processing
        self.sent_at_once = False  #: ... straight from waiting or released (not through the scheduler's queue)
        if span is not None:
            a = span["attributes"]
            deps = a.get("dask.task.dependencies")
            if isinstance(deps, (list, tuple)):
                self.deps = [str(d) for d in deps]
            self.state = str(a.get("dask.task.state") or "")
            self.worker = str(a.get("dask.worker.address") or "")
            self.submitted = span["start"]
            self.finish = span["end"]
            self.erred = span["status_code"] == "ERROR" or self.state == "erred"
            if self.erred:
                self.error = span["status_message"]
            seen = False
            let_go = True  # every transition lets the result go (none of _LET_GO is in _FINAL)
            final = ready = None
            for ev in span["events"]:
                ea = ev.get("attributes") or _EMPTY
                name = ev.get("name")
                if name == "transition":
                    seen = True
                    t = ev.get("time") or 0
                    start, fin = ea.get("dask.transition.start"), ea.get("dask.transition.finish")
                    if fin not in _LET_GO:
                        let_go = False
                        if fin in _FINAL and (final is None or t < final):
                            final = t  # the span ends at the first of these; the transition is exact
                    if fin in _READY and start in _MADE_READY_FROM and (ready is None or t < ready):
                        ready = t
                        self.ready_stimulus = ea.get("dask.stimulus_id") or None
                    if fin == "processing":
                        self.ran = True
                        if start == "waiting" or start == "released":
                            self.sent_at_once = True
                elif name == "exception" and not self.error:
                    self.error = str(ea.get("exception.message") or "")
            if final is not None:
                self.finish = final
            self.made_ready = ready
            self.let_go = let_go if seen else self.state in _LET_GO

    @property
    def last(self) -> Execution | None:
        return self.executions[-1] if self.executions else None

    @property
    def exec_start(self) -> int | None:
        """When the last execution's compute began, on the scheduler's clock where there is one."""
        e = self.last
        if e is None:
            return None
        if self.finish is not None:
            return self.finish - e.compute_ns
        return e.start + e.transfer_ns

    @property
    def exec_end(self) -> int | None:
        e = self.last
        return None if e is None else e.end

    @property
    def end(self) -> int | None:
        """When the result was known: the transition to memory/erred, else the end of the execution."""
        return self.finish if self.finish is not None else self.exec_end

    @property
    def exec_worker(self) -> str:
        e = self.last
        return e.worker if e is not None and e.worker else self.worker


class Computation:
    """One client call (a ``dask.compute`` span) and the task lives that belong to it."""

    __slots__ = ("id", "span", "trace_id", "method", "first_key", "start", "end", "tasks", "transfers", "name")

    def __init__(self, cid: str, span: dict | None, trace_id: str):
        self.id = cid
        self.span = span
        self.trace_id = trace_id
        a = span["attributes"] if span is not None else {}
        self.method = str(a.get("dask.client.method") or ("graph" if span is not None else "trace"))
        self.first_key = str(a.get("dask.task.key") or "")
        self.start: int | None = span["start"] if span is not None else None
        self.end: int | None = span["end"] if span is not None else None
        self.tasks: dict[str, Task] = {}  # the life of each key that ran for this computation
        self.transfers: list[dict] = []
        self.name = ""  # set by ``name_all``, once the run's computations are known

    def add(self, t: Task) -> None:
        """A life of a key that ran for this call. A key that ran in two lives of one call (its result
        was lost with a worker and computed again) stands as its last life, with the earlier life's
        executions as earlier attempts."""
        before = self.tasks.get(t.key)
        if before is not None and before is not t:
            t.executions[:0] = [e for e in before.executions if e not in t.executions]
        self.tasks[t.key] = t

    def close(self) -> None:
        """The window is the client call's own span; a call whose span covers only the submission
        (map, submit, persist) extends to the end of its tasks, and a computation without a span
        (a graph the scheduler received without a trace context) is its tasks' lives."""
        ends = [t.end for t in self.tasks.values() if t.end is not None]
        ends += [x["end"] for x in self.transfers]
        if self.start is None:
            starts = [t.submitted for t in self.tasks.values() if t.submitted is not None]
            self.start = min(starts) if starts else None
        if ends:
            self.end = max(ends) if self.end is None else max(self.end, max(ends))

    @property
    def wall_ns(self) -> int:
        return max(0, (self.end or 0) - (self.start or 0))

    def what(self, span_names: dict | None = None) -> str:
        """What the user computed, in Dask's words: the output's prefix (the delayed function's name, or
        the collection's last step: ``sum-aggregate``), never Dask's ``finalize-...`` wrapper, and the
        Dask span its tasks ran in (``span_names``: Dask span id -> its name path)."""
        span = dask_span_of(self.tasks.values(), span_names or {})
        key = self.first_key or (next(iter(self.tasks)) if self.tasks else "")
        t = self.tasks.get(key)
        prefix = t.prefix if t is not None else key_prefix(key)
        if prefix.startswith("finalize") and t is not None and t.deps:
            below = [self.tasks[d].prefix if d in self.tasks else key_prefix(d) for d in t.deps]
            prefix = max(set(below), key=below.count)
        prefix = prefix or self.trace_id[:16]
        return f"{prefix} in {span}" if span else prefix


def name_all(comps: list[Computation], span_names: dict | None = None) -> None:
    """Names the computations ``{method} {what} ({n} tasks)``; a name used again (the same graph
    computed in a loop) gets `` #2``, `` #3``, ... in start order, so advice can say which call."""
    seen: dict[str, int] = {}
    for c in comps:
        n = len(c.tasks)
        base = f"{c.method} {c.what(span_names)}" + (f" ({n:,} tasks)" if n != 1 else "")
        k = seen[base] = seen.get(base, 0) + 1
        c.name = base if k == 1 else f"{base} #{k}"


def dask_span_of(tasks: Iterable[Task], span_names: dict) -> str:
    """The innermost Dask span (``distributed.span``) all these tasks ran in, as ``etl / load``: the
    common start of their spans' name paths. Empty when they ran in none (Dask's implicit ``default``
    span has no ``dask.span.id``) or in unrelated ones."""
    path = None
    for t in tasks:
        sid = t.span["attributes"].get(wire_dask.ATTR_SPAN_ID) if t.span is not None else None
        p = span_names.get(str(sid), ()) if sid else ()
        if path is None:
            path = p
        elif p != path:
            n = 0
            while n < min(len(p), len(path)) and p[n] == path[n]:
                n += 1
            path = path[:n]
        if not path:
            return ""
    return " / ".join(str(x) for x in path or ())  # as the Dask spans' tables and panel write a path


def span_names(span_rows: list[dict]) -> dict:
    """Dask span id -> its name path (a tuple), from the run's ``dask.span {tag}`` spans."""
    out = {}
    for r in span_rows:
        if r["name"].startswith(wire_dask.SPAN_NAME + " "):
            a = r["attributes"]
            name = a.get(wire_dask.ATTR_SPAN_NAME)
            if a.get(wire_dask.ATTR_SPAN_ID) and isinstance(name, (list, tuple)):
                out[str(a[wire_dask.ATTR_SPAN_ID])] = tuple(str(x) for x in name)
    return out


def key_prefix(key: str) -> str:
    """A key's prefix as Dask's ``dask.utils.key_split`` makes it, for keys no task span names (the
    read side does not import Dask): ``('sum-aggregate-1f2e...', 0)`` -> ``sum-aggregate``,
    ``load-5b9c...`` -> ``load``."""
    words = key.split("-")
    if not words[0][:1].isalpha():
        prefix = words[0].split(",")[0].strip("_'()\"")
    else:
        prefix = words[0]
    for w in words[1:]:
        if not w.isalpha() or (len(w) == 8 and w[0] in "abcdef"):  # Dask's test for a hex token
            break
        prefix += f"-{w}"
    return prefix


# -------------------------------------------------------------------------------------------------
# grouping


def _computation_of(spans: dict, computes: dict, by_trace: dict) -> Callable[[dict], str | None]:
    """A function span row -> computation id (memoised), following parents and links upwards."""
    memo: dict[str, str | None] = {}

    def up(row: dict) -> str | None:
        seen = []
        cur = row
        found = None
        for _ in range(64):  # bounded: a malformed parent cycle cannot hang the report
            sid = cur["span_id"]
            if sid in memo:
                found = memo[sid]
                break
            seen.append(sid)
            nxt = None
            pid = cur["parent_span_id"]
            if pid in computes:
                found = pid
                break
            for ln in cur["links"]:
                if ln.get("span_id") in computes:
                    found = ln["span_id"]
                    break
            if found is not None:
                break
            if pid and pid in spans:
                nxt = spans[pid]
            else:
                for ln in cur["links"]:
                    if ln.get("span_id") in spans:
                        nxt = spans[ln["span_id"]]
                        break
            if nxt is None:
                break
            cur = nxt
        if found is None:
            found = by_trace.get(row["trace_id"])
        for sid in seen:
            memo[sid] = found
        return found

    return up


def build(span_rows: list[dict]) -> list[Computation]:
    """The run's Dask computations, each with its tasks and times, in start order."""
    spans: dict[str, dict] = {}
    computes: dict[str, dict] = {}
    sched: list[dict] = []
    execs: list[dict] = []
    transfers: list[dict] = []
    for r in span_rows:
        name = r["name"]
        if not name.startswith("dask."):
            spans[r["span_id"]] = r
            continue
        spans[r["span_id"]] = r
        if name == "dask.compute":
            computes[r["span_id"]] = r
        elif name.startswith("dask.task"):
            sched.append(r)
        elif name.startswith("dask.execute"):
            execs.append(r)
        elif name == "dask.transfer":
            transfers.append(r)
    if not (sched or execs):
        return []
    by_trace: dict[str, str] = {}
    for sid, r in sorted(computes.items(), key=lambda kv: kv[1]["start"]):
        by_trace.setdefault(r["trace_id"], sid)
    comp_of = _computation_of(spans, computes, by_trace)
    comps: dict[str, Computation] = {}

    def comp(row: dict) -> Computation:
        cid = comp_of(row) or "trace:" + row["trace_id"]
        c = comps.get(cid)
        if c is None:
            c = comps[cid] = Computation(cid, computes.get(cid), row["trace_id"])
        return c

    lives: dict[str, list[Task]] = {}  # key -> lives in start order
    rows_of: dict[int, dict] = {}
    for r in sorted(sched, key=_start):
        a = r["attributes"]
        key = str(a.get("dask.task.key") or "")
        if not key:
            continue
        t = Task(key, str(a.get("dask.task.prefix") or r["name"][10:]), r)
        rows_of[id(t)] = r
        lives.setdefault(key, []).append(t)
    for r in sorted(execs, key=_start):
        a = r["attributes"]
        key = str(a.get("dask.task.key") or "")
        if not key:
            continue
        life = _life_for(lives.get(key), r, rows_of)
        if life is None:  # an execution the scheduler did not report (its scheduler ran without evlog)
            life = Task(key, str(a.get("dask.task.prefix") or r["name"][13:]), None)
            rows_of[id(life)] = r
            lives.setdefault(key, []).append(life)
        life.executions.append(Execution(r))
    for ls in lives.values():
        later = [after_result(t) for t in ls]
        computed = not all(later)
        for t, after in zip(ls, later):  # in start order: the last life that computed stands for the key
            if after and computed:
                continue  # a second life (a result released or forgotten later) never stands in for the first
            t.comp = comp(rows_of[id(t)])
            t.comp.add(t)
    for r in transfers:
        comp(r).transfers.append(r)
    out = [c for c in comps.values() if c.tasks]
    _times(out, transfers)
    for c in out:
        c.close()
    out.sort(key=lambda c: (c.start or 0, c.id))
    name_all(out, span_names(span_rows))
    return out


def after_result(t: Task) -> bool:
    """A second life: one that only let its result go (released, then forgotten when the client or a
    closing cluster let go, more than dask_lives.GRACE after the life that computed it) and ran nothing."""
    return t.let_go and not t.executions


def _life_for(lives: list[Task] | None, execution: dict, rows_of: dict) -> Task | None:
    """The task life an execution belongs to. The worker got the trace context of the call it ran
    for with the task, so a life of the same key and the same parent span (the client call, or its
    batch) is the one; among those, or where none matches, the last one begun before the execution
    that can run (not a life after the result). The time test allows ``_TRANSITION_SLACK_NS``: the
    execution's times are the worker's clock."""
    if not lives:
        return None
    if len(lives) == 1:  # what the rules below come to for one life
        return lives[0]
    ran = [life for life in lives if not after_result(life)] or lives
    if len(ran) == 1:  # what the rules below come to for one (a key's life that ran, and its life after the result)
        return ran[0]
    mine = [life for life in ran
            if (r := rows_of.get(id(life))) is not None and r["trace_id"] == execution["trace_id"]
            and r["parent_span_id"] == execution["parent_span_id"]]
    t = execution["start"]
    best = None
    for life in mine or ran:
        if life.submitted is not None and life.submitted <= t + _TRANSITION_SLACK_NS:
            best = life
    return best or (mine or ran)[0]


# -------------------------------------------------------------------------------------------------
# per-task times


def union_ns(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in merge(intervals))


def _times(comps: list[Computation], transfers: list[dict]) -> None:
    """ready, queued, transfer, compute and erred/retried time of every task (docs/report.md)."""
    # transfers by (destination worker, first key fetched), sorted by start
    fetched: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for r in transfers:
        a = r["attributes"]
        fetched.setdefault((str(a.get("dask.worker.address") or ""), str(a.get("dask.task.key") or "")),
                           []).append((r["start"], r["end"]))
    for c in comps:
        for t in c.tasks.values():
            t.executions.sort(key=_exec_start)
            ready = t.made_ready
            if ready is None:  # no transitions recorded: when its last dependency finished
                dep_ends = [d.end for d in (c.tasks.get(k) for k in t.deps) if d is not None and d.end is not None]
                ready = max([x for x in (t.submitted, max(dep_ends) if dep_ends else None) if x is not None],
                            default=None)
            last = t.last
            if last is None:
                t.ready = ready
                continue
            earlier = 0
            for e in t.executions[:-1]:
                earlier += e.end - e.start
            t.erred_ns = earlier
            ran = last.compute_ns
            if last.erred:
                t.erred = True
                t.error = t.error or last.error
                t.erred_ns += ran
            else:
                t.compute_ns = ran
            # the scheduler's clock from ready to finish; the worker's only for durations (a worker's
            # times are shifted by Dask's estimate of its clock offset, which a loaded host makes wrong)
            finish = t.finish if t.finish is not None else last.end
            if ready is None:
                ready = finish - ran - last.transfer_ns - earlier
            t.ready = ready
            life = max(0, finish - ready)
            spans = [(max(s, ready), min(e, finish)) for d in t.deps
                     for s, e in fetched.get((last.worker, d), ()) if s < finish and e > ready]
            left = max(0, life - ran - earlier)
            t.transfer_ns = min((union_ns(spans) if spans else 0) + sum(e.transfer_ns for e in t.executions), left)
            t.queued_ns = left - t.transfer_ns

