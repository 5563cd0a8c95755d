"""Issue 32: evlog.data.otlp_decode's two decoders (OTLP/JSON and protobuf) against one code path for both.

One path means converting one form to the other first: a run folder's JSON line to protobuf
(``json_format.ParseDict``, ids re-encoded hex -> base64) then the protobuf decoder, or a receiver's
protobuf body to JSON (``to_otlp_json``: MessageToDict) then the JSON decoder. One request of 5,000
Dask execute spans (5 attributes, 2 events each), best of 5, each way; both decoders give equal rows
(asserted). Not run by run_all.py (a leading underscore): it is the measurement behind a design choice,
not a figure held to a goal.

    python benchmarks/_decode_paths.py
"""
from __future__ import annotations

import base64
import json
import time

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from evlog.data import otlp_decode as od

req = ExportTraceServiceRequest()
rs = req.resource_spans.add()
for k, v in (("service.name", "app"), ("host.name", "h"), ("dask.worker.address", "tcp://127.0.0.1:1")):
    rs.resource.attributes.add(key=k).value.string_value = v
rs.resource.attributes.add(key="process.pid").value.int_value = 4242
ss = rs.scope_spans.add()
ss.scope.name = "evlog"
for i in range(5000):
    sp = ss.spans.add(trace_id=i.to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), parent_span_id=b"\1" * 8,
                      name="dask.execute inc", kind=1, start_time_unix_nano=10**18 + i,
                      end_time_unix_nano=10**18 + i + 5000)
    for k, v in (("dask.task.key", f"('inc-abc', {i})"), ("dask.task.prefix", "inc"),
                 ("thread.name", "Dask-Default-Threads-1-0"), ("dask.worker.address", "tcp://127.0.0.1:1")):
        sp.attributes.add(key=k).value.string_value = v
    sp.attributes.add(key="thread.id").value.int_value = 1234
    for n in ("compute start", "compute stop"):
        ev = sp.events.add(name=n, time_unix_nano=10**18 + i)
        ev.attributes.add(key="dask.stimulus_id").value.string_value = "s-1"
body = req.SerializeToString()
line = json.dumps(od.to_otlp_json(req))


def b64ids(d):
    for rs in d.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for sp in ss.get("spans", ()):
                for k in ("traceId", "spanId", "parentSpanId"):
                    if sp.get(k):
                        sp[k] = base64.b64encode(bytes.fromhex(sp[k])).decode()
    return d


def t(fn, n=5):
    best = 1e9
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


a = t(lambda: od.decode_spans(json.loads(line)))
b = t(lambda: od.decode_proto("traces", json_format.ParseDict(b64ids(json.loads(line)), ExportTraceServiceRequest())))
c = t(lambda: od.decode_proto("traces", body))
d = t(lambda: od.decode_spans(od.to_otlp_json(ExportTraceServiceRequest.FromString(body))))
assert od.decode_spans(json.loads(line)) == od.decode_proto("traces", body)
print(f"decode_json_via_protobuf: ratio {b / a:.1f} (direct {a * 1e3:.0f}, one path {b * 1e3:.0f}, ms per 5,000 spans)")
print(f"decode_protobuf_via_json: ratio {d / c:.1f} (direct {c * 1e3:.0f}, one path {d * 1e3:.0f}, ms per 5,000 spans)")
