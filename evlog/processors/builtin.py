"""The default log (EVLOG_CONSUMERS), fused into one span processor so that it costs almost nothing.

It gives the streams of a MultiEventLog holding the built-in consumers of the same names (core, wsat,
psat, esat, loadavg, mem, bytes), but does the least per span: a task execution or a transfer (the
spans that change those streams) updates a counter and appends one small tuple to a bounded ring; any
other span costs one dict lookup (unless core or esat is on: then every span is recorded, as Dagger
does). Sub-events are built from the ring when the log is fetched. Sampled readings (load average,
free memory, the process's resident bytes) are taken at most every ``sample_period_s`` (on the first
recorded span after the period, or at metric collection), never per span; the bytes held by a Dask
worker (``WorkerState.nbytes``) are read per event, being a plain attribute (and the resident bytes are
then not read at all).

No lock is taken per span: see the comment on the hot path.
"""
from __future__ import annotations

import os
import threading
from _thread import get_ident
from collections import deque

from evlog import notices
from evlog.processors.sampling import Readings, dask_state
from evlog.processors.spans import Classifier

FAST_NAMES = frozenset({"core", "wsat", "psat", "esat", "loadavg", "mem", "bytes"})
_NAN = float("nan")
_OPEN_MAX = 100_000
_CELLS_MAX = 256
_MISSING = object()


class BuiltinLog:
    """Dagger's default consumers (core, wsat, psat, esat, loadavg, mem, bytes) as one span processor (on an SDK
    provider through on_provider)."""

    def __init__(self, names, maxlen: int = 20_000, sample_period_s: float = 0.2):
        names = tuple(dict.fromkeys(names))
        bad = [n for n in names if n not in FAST_NAMES]
        if bad:
            raise ValueError(f"BuiltinLog cannot compute {bad} (it knows {sorted(FAST_NAMES)})")
        self.names = names
        self.maxlen = maxlen
        self.record_all = "core" in names or "esat" in names
        self._want_load = "loadavg" in names
        self._want_mem = "mem" in names
        self._want_bytes = "bytes" in names
        self._period_ns = int(sample_period_s * 1e9)
        self._readings = Readings(sample_period_s)
        if "esat" in names:
            self.on_start = self._on_start_esat
            self.on_end = self._on_end_esat
        self._fresh()

    def _fresh(self) -> None:
        """Empty state: at creation, and in a forked child (its parent's open spans are not its own)."""
        self._lock = threading.Lock()  # for fetch and the slow paths, never taken per span
        self._ring: deque = deque(maxlen=self.maxlen)
        self._cells: dict[int, list] = {}  # thread ident -> [tasks running on it, ident]: psat (and wsat)
        self._open: dict[int, list] = {}  # id(span context) -> the cell its task was counted in
        self._classifier = Classifier(self.record_all)  # Kind.n counts open spans per category: esat
        self._kinds = self._classifier.kinds
        self._samp = (_NAN, _NAN, 0)  # loadavg, free memory fraction, resident bytes
        self._next_sample = 0
        self._dstate = None  # the Dask WorkerState of this process, if any

    def disable(self) -> None:
        self.on_start = self._off
        self.on_end = self._off

    def _off(self, *args, **kw) -> None:
        pass

    # -- the hot path. A record is (timestamp, +1 start / -1 finish, category, thread or None, readings,
    # dask bytes): a tuple of atoms, which the garbage collector stops tracking, so a full ring costs
    # collections nothing. Counters are shared by threads yet need no lock under the GIL: each update
    # is one load-add-store with no call in between (``cell[0] += 1``, ``k.n += 1``), and CPython
    # switches threads only at calls and backward jumps, so no update is ever lost.
    # Spans built after the fact (the Dask instrumentation hands finished spans to on_end only) are
    # recognised by their missing start: their start and finish are recorded together, with their own
    # timestamps; records are put in time order when the log is fetched.
    def on_start(self, span, parent_context=None) -> None:
        try:
            k = self._kinds.get(span.name) or self._classifier.classify(span.name)
            if k.record:
                t = span.start_time
                if t >= self._next_sample:
                    self._sample(t)
                ds = self._dstate
                if k.compute:
                    cell = self._cells.get(get_ident()) or self._cell()
                    cell[0] += 1
                    self._open[id(span.context)] = cell
                    self._ring.append((t, 1, "compute", cell[1], self._samp, ds.nbytes if ds is not None else None))
                else:
                    self._open[id(span.context)] = None
                    self._ring.append((t, 1, k.category, None, self._samp, ds.nbytes if ds is not None else None))
        except Exception as exc:
            notices.warn_once("builtin-log", f"the default consumers failed on a span: {exc!r}")

    def on_end(self, span) -> None:
        try:
            k = self._kinds.get(span.name) or self._classifier.classify(span.name)
            if k.record:
                t = span.end_time
                if t >= self._next_sample:
                    self._sample(t)
                ds = self._dstate
                cell = self._open.pop(id(span.context), _MISSING)
                if cell is _MISSING:
                    self._after_the_fact(span, k, ds)
                elif cell is not None:
                    cell[0] -= 1
                    self._ring.append((t, -1, "compute", cell[1], self._samp, ds.nbytes if ds is not None else None))
                else:
                    self._ring.append((t, -1, k.category, None, self._samp, ds.nbytes if ds is not None else None))
        except Exception as exc:
            notices.warn_once("builtin-log", f"the default consumers failed on a span: {exc!r}")

    def _on_start_esat(self, span, parent_context=None) -> None:
        try:
            k = self._kinds.get(span.name) or self._classifier.classify(span.name)
            k.n += 1
        except Exception as exc:
            notices.warn_once("builtin-log", f"the default consumers failed on a span: {exc!r}")
        BuiltinLog.on_start(self, span)

    def _on_end_esat(self, span) -> None:
        try:
            k = self._kinds.get(span.name) or self._classifier.classify(span.name)
            if id(span.context) in self._open:  # started while we watched: no longer open
                k.n -= 1
        except Exception as exc:
            notices.warn_once("builtin-log", f"the default consumers failed on a span: {exc!r}")
        BuiltinLog.on_end(self, span)

    def _after_the_fact(self, span, k, ds) -> None:
        """A finished span whose start this log never saw: record both ends now."""
        b = ds.nbytes if ds is not None else None
        proc = None
        if k.compute:
            attrs = span.attributes
            proc = attrs.get("thread.id") if attrs else None
        self._ring.append((span.start_time, 1, k.category, proc, self._samp, b))
        self._ring.append((span.end_time, -1, k.category, proc, self._samp, b))

    def _cell(self) -> list:
        """This thread's psat counter (first task on this thread)."""
        tid = get_ident()
        with self._lock:
            cell = self._cells.get(tid)
            if cell is None:
                cell = self._cells[tid] = [0, tid]
        return cell

    # -- sampled readings, at most every period
    def _sample(self, t: int) -> None:
        self._next_sample = t + self._period_ns
        r = self._readings
        if self._want_bytes:
            self._dstate = dask_state()  # a Dask worker's bytes stand for the process's: no rss then
        self._samp = (r.loadavg() if self._want_load else _NAN,
                      r.mem_free(t) if self._want_mem else _NAN,
                      r.rss(t) if self._want_bytes and self._dstate is None else 0)
        if len(self._open) > _OPEN_MAX or len(self._cells) > _CELLS_MAX:  # spans never ended, threads gone
            with self._lock:
                if len(self._open) > _OPEN_MAX:
                    self._open.clear()
                if len(self._cells) > _CELLS_MAX:
                    alive = {th.ident for th in threading.enumerate()}
                    for tid in [tid for tid, c in self._cells.items() if c[0] <= 0 and tid not in alive]:
                        del self._cells[tid]

    # -- live values, for the OTel gauges
    @property
    def psat(self) -> dict[int, int]:
        """Tasks running now per thread ident (task spans open now: a Dask worker's executions too)."""
        return {c[1]: c[0] for c in list(self._cells.values())}

    @property
    def wsat(self) -> int:
        """Tasks running now in this process."""
        return sum(n for n in self.psat.values() if n > 0)

    @property
    def esat(self) -> dict[str, int]:
        """Spans open now per category (counted only when esat is on)."""
        return {k.category: k.n for k in self._classifier.categories()}

    def current(self, name: str, now_ns: int):
        """The value a consumer would return now: a number, or for psat/esat a {key: n} dict."""
        r = self._readings
        if name == "wsat":
            return self.wsat
        if name == "psat":
            return self.psat
        if name == "esat":
            return self.esat
        if name == "loadavg":
            return r.loadavg()
        if name == "mem":
            return r.mem_free(now_ns)
        if name == "bytes":
            ds = dask_state()  # not the sampled one: its workers may have closed since
            return ds.nbytes if ds is not None else r.rss(now_ns)
        raise KeyError(name)

    # -- logs out
    def fetch(self) -> dict[str, list]:
        """{name: [sub-events]} since the last fetch (the last maxlen events at most), then clear."""
        from evlog.processors.registry import registry

        registry.drain()  # spans assembled after the fact (Dask) arrive first
        with self._lock:
            ring, self._ring = self._ring, deque(maxlen=self.maxlen)
            recs = list(ring)  # one C call under the GIL: a consistent copy
            live = self._live()
        return self._materialize(recs, *live)

    def peek(self) -> dict[str, list]:
        """The same streams, without clearing."""
        from evlog.processors.registry import registry

        registry.drain()
        return self._materialize(list(self._ring), *self._live())

    def _live(self):
        return {c[1]: c[0] for c in list(self._cells.values())}, self.esat

    def __len__(self) -> int:
        return len(self._ring)

    def _materialize(self, recs: list, psat_now: dict, esat_now: dict) -> dict[str, list]:
        recs.sort(key=_time_of)  # after-the-fact spans arrive late; stable for equal times
        out: dict[str, list] = {}
        names = self.names
        if "core" in names:
            out["core"] = [{"timestamp": r[0], "category": r[2], "kind": "start" if r[1] > 0 else "finish"}
                           for r in recs]
        if "wsat" in names or "psat" in names:
            pid = os.getpid()
            cur = dict(psat_now)  # counts before the first record: today's, less what the records added
            for r in recs:
                if r[2] == "compute":
                    cur[r[3]] = cur.get(r[3], 0) - r[1]
            wsat, psat = [], []
            for r in recs:
                if r[2] == "compute":
                    cur[r[3]] += r[1]
                wsat.append(sum(n for n in cur.values() if n > 0))
                psat.append([((pid, t), n) for t, n in cur.items() if n > 0 and t is not None])
            out["wsat"], out["psat"] = wsat, psat
        if "esat" in names:
            cur = dict(esat_now)
            for r in recs:
                cur[r[2]] = cur.get(r[2], 0) - r[1]
            stream = []
            for r in recs:
                cur[r[2]] += r[1]
                stream.append({c: n for c, n in cur.items() if n > 0})
            out["esat"] = stream
        if "loadavg" in names:
            out["loadavg"] = [r[4][0] for r in recs]
        if "mem" in names:
            out["mem"] = [r[4][1] for r in recs]
        if "bytes" in names:
            out["bytes"] = [r[5] if r[5] is not None else r[4][2] for r in recs]
        return {n: out[n] for n in names}

    def __repr__(self) -> str:
        return f"BuiltinLog({list(self.names)}, maxlen={self.maxlen})"



def _time_of(rec) -> int:
    return rec[0]
