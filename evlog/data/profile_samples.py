"""The task profile's samples: the stored ``evlog.profile`` log records (evlog/builders/profiles.py: one
pprof per process, prefix and shipping interval, each sample labelled with its task span) -> Samples.
The report ranks their functions (evlog/report/profile.py); the dashboard draws them as flame graphs
(evlog/data/panels/flame.py)."""
from __future__ import annotations

from evlog import pprof

EVENT = "evlog.profile"


class Sample:
    __slots__ = ("label", "process", "stack", "count", "ns", "span_id", "trace_id")

    def __init__(self, label, process, stack, count, ns, span_id, trace_id):
        self.label = label  # the Dask task prefix or the pool function
        self.process = process  # the log record's resource
        self.stack = stack  # ((function, file, line), ...), leaf first
        self.count = count
        self.ns = ns
        self.span_id = span_id
        self.trace_id = trace_id


def samples(logs: list[dict]) -> list[Sample]:
    """Every sample of the run's ``evlog.profile`` records (otlp_decode's log rows); a record that is
    not a profile is reported once and skipped."""
    out = []
    for r in logs:
        if r.get("event_name") != EVENT:
            continue
        a = r.get("attributes") or {}
        label = a.get("dask.task.prefix") or a.get("code.function.name") or "?"
        try:
            prof = pprof.from_body(r.get("body"))
        except pprof.DecodeError as exc:
            from evlog import notices

            notices.warn_once("report-profile-body", f"an evlog.profile log record of {label} is not a profile "
                              f"({exc}); skipped")
            continue
        res = r.get("resource") or {}
        for stack, values, labels in prof["samples"]:
            count = values[0] if values else 1
            ns = values[1] if len(values) > 1 else count * prof["period"]
            out.append(Sample(label, res, stack, count, ns, labels.get("span_id"), labels.get("trace_id")))
    return out
