"""The sampling profile in the report: the hottest functions per Dask task prefix and per pool function.

Reads the ``evlog.profile`` log records (evlog/builders/profiles.py: one pprof per process, prefix and
shipping interval, each sample labelled with its task span) and ranks functions by self time (samples
with the function at the top of the stack) and total time (samples with it anywhere on the stack),
both as wall seconds. A corrupt record is reported once and skipped (evlog/data/profile_samples.py,
which the dashboard's flame graph reads too).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable

from evlog.data.profile_samples import Sample, samples

from .common import pct
from .model import Computation

TOP = 10  # functions listed per prefix in the JSON (text and HTML show 5)
SHOWN = 5
MIN_SAMPLES = 20  # a prefix's profile needs this many samples before it is advice (10 ms apart: 0.2 s)
DOMINATES = 0.3  # share of a critical-path prefix's sampled time that makes one of its functions the advice

# Frames that are never advice: what the user cannot change or call less of by changing their function
# (evlog's sampler and hooks, Dask's and Tornado's machinery, the standard library: gc callbacks,
# logging handlers, genericpath). A sample is charged to its innermost frame outside these.
_NOT_THE_USERS = re.compile(r"[/\\](evlog|distributed|dask|tornado|cloudpickle|msgpack|toolz|tlz)[/\\]"
                            r"|[/\\]lib[/\\]python3\.\d+[/\\](?!site-packages|dist-packages)"
                            r"|^<frozen |^$")


def top(ss: list[Sample], limit: int = TOP) -> list[dict]:
    """Functions ranked by self time: ``[{"function", "file", "line", "self", "total"}]`` (seconds)."""
    self_ns: dict = {}
    total_ns: dict = {}
    for s in ss:
        if not s.stack:
            continue
        leaf = s.stack[0]
        self_ns[leaf] = self_ns.get(leaf, 0) + s.ns
        for frame in set(s.stack):
            total_ns[frame] = total_ns.get(frame, 0) + s.ns
    ranked = sorted(total_ns, key=lambda f: (-self_ns.get(f, 0), -total_ns[f], f))[:limit]
    return [{"function": f[0], "file": f[1], "line": f[2], "self": round(self_ns.get(f, 0) / 1e9, 6),
             "total": round(total_ns[f] / 1e9, 6)} for f in ranked]


def summary(ss: Iterable[Sample]) -> dict:
    """``{"samples", "seconds", "top", "own"}`` of some samples; ``own`` is the user's function that the
    most sampled time is charged to (``users_hottest``), or None."""
    ss = list(ss)
    return {"samples": sum(s.count for s in ss), "seconds": round(sum(s.ns for s in ss) / 1e9, 6), "top": top(ss),
            "own": users_hottest(ss)}


def users_hottest(ss: list[Sample]) -> dict | None:
    """The function of the user's that holds the most sampled time, each sample charged to its innermost
    frame that is the user's (``_NOT_THE_USERS``): ``{"function", "file", "line", "seconds", "share"}``
    (share of all the samples' time), or None when no sample has a frame of the user's."""
    held: dict = {}
    total = 0
    for s in ss:
        total += s.ns
        frame = next((f for f in s.stack if not _NOT_THE_USERS.search(f[1] or "")), None)
        if frame is not None:
            held[frame] = held.get(frame, 0) + s.ns
    if not held or not total:
        return None
    f = max(held, key=lambda f: (held[f], f))
    return {"function": f[0], "file": f[1], "line": f[2], "seconds": round(held[f] / 1e9, 6),
            "share": round(held[f] / total, 4)}


def attach(out_comps: list[dict], comps: list[Computation], pools: dict | None, logs: list[dict]) -> None:
    """Adds ``profile`` to each computation's prefixes (the samples of its own execute spans) and to the
    pools' functions, and advice where one function dominates a prefix on the critical path."""
    ss = samples(logs)
    if not ss:
        return
    by_span: dict = {}
    for s in ss:
        by_span.setdefault(s.span_id, []).append(s)
    for c, out in zip(comps, out_comps):
        per: dict = {}
        for t in c.tasks.values():
            for e in t.executions:
                got = by_span.get(e.row.get("span_id"))
                if got:
                    per.setdefault(t.prefix, []).extend(got)
        for prefix, got in per.items():
            if prefix in out["prefixes"]:
                out["prefixes"][prefix]["profile"] = summary(got)
        out["advice"] += advice(out)
    if pools:
        per = {}
        for s in ss:
            if s.label in pools["functions"]:
                per.setdefault(s.label, []).append(s)
        for fn, got in per.items():
            pools["functions"][fn]["profile"] = summary(got)


def advice(c: dict) -> list[str]:
    """One line per prefix on the critical path whose sampled time one function of the user's holds a
    good part of, on enough samples to say so (MIN_SAMPLES, DOMINATES)."""
    out = []
    on_path = {r["prefix"] for r in c["critical_path"]}
    for prefix in sorted(on_path):
        prof = (c["prefixes"].get(prefix) or {}).get("profile") or {}
        f = prof.get("own")
        if f is None or prof["samples"] < MIN_SAMPLES or f["share"] < DOMINATES:
            continue
        out.append(f"{c['name']}: {f['function']} ({_where(f)}) holds {pct(f['share'])} of the sampled time of "
                   f"{prefix} ({prof['samples']:,} samples), on the critical path: make that function faster "
                   f"or call it less")
    return out


def _where(f: dict) -> str:
    return f"{os.path.basename(f['file'])}:{f['line']}" if f["file"] else "?"


def rows(prof: dict, limit: int = SHOWN) -> list[list[str]]:
    """Table rows of a profile's top functions, for the text and HTML pages."""
    return [[f["function"], _where(f), f"{f['self']:.3f} s", f"{f['total']:.3f} s"] for f in prof["top"][:limit]]
