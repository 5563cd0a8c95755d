"""The OTLP/JSON span decoder's two paths give the same rows: the fast one (a plain span, its equal strings
shared) and the full one (everything else, and the message that names what is wrong in a bad span)."""
from __future__ import annotations

import copy
import json
import os

import pytest
from synthetic_run import make_run

from evlog.data import otlp_decode


def _spans(tmp_path) -> list[dict]:
    make_run(str(tmp_path), n_tasks=40, batch=15)
    out = []
    for name in sorted(os.listdir(tmp_path)):
        if name.startswith("traces"):
            with open(os.path.join(tmp_path, name), encoding="utf-8") as f:
                for line in f:
                    for rs in json.loads(line)["resourceSpans"]:
                        for ss in rs["scopeSpans"]:
                            out.extend(ss["spans"])
    return out


def _variants(sp: dict) -> list[dict]:
    """The span, and versions of it the fast path must decode as the full one does, or leave to it."""
    out = [sp]
    for field, value in (("kind", "SPAN_KIND_SERVER"), ("kind", 9), ("startTimeUnixNano", 12.0),
                         ("startTimeUnixNano", 1.5), ("startTimeUnixNano", True), ("startTimeUnixNano", "-3"),
                         ("endTimeUnixNano", str(1 << 64)), ("parentSpanId", ""), ("parentSpanId", 0),
                         ("parentSpanId", "ABCDEF0123456789"), ("traceId", "A" * 32), ("traceId", "xyz"),
                         ("spanId", None), ("name", 3), ("events", []), ("events", {}), ("events", "x"),
                         ("attributes", []), ("attributes", {}), ("attributes", [{"key": "k"}]),
                         ("attributes", [{"key": 1, "value": {"stringValue": "v"}}]),
                         ("attributes", [{"key": "n", "value": {"intValue": "7"}}, {"key": "s", "value": {"stringValue": 5}}]),
                         ("attributes", [{"value": {"stringValue": "no key"}}]),
                         ("attributes", [{"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}]}}}]),
                         ("status", {"code": 2, "message": "bad"}), ("status", {}),
                         ("links", [{"traceId": "1" * 32, "spanId": "2" * 16}])):
        v = copy.deepcopy(sp)
        v[field] = value
        out.append(v)
    if sp.get("events"):
        for field, value in (("timeUnixNano", 2.5), ("timeUnixNano", "5"), ("name", None), ("attributes", None),
                             ("attributes", "x")):
            v = copy.deepcopy(sp)
            v["events"][0][field] = value
            out.append(v)
    return out


def _full(sp: dict):
    try:
        return otlp_decode._span(sp, {"service.name": "s"}, "scope")
    except otlp_decode.DecodeError as e:
        return ("error", str(e))


def test_the_fast_path_gives_the_full_decoders_row_or_leaves_the_span_to_it(tmp_path):
    spans = _spans(tmp_path)
    assert any(sp.get("events") for sp in spans) and any(sp.get("parentSpanId") for sp in spans)
    fast = 0
    for sp in spans:
        for v in _variants(sp):
            want = _full(v)
            try:
                got = otlp_decode._span_fast(copy.deepcopy(v), {"service.name": "s"}, "scope")
            except Exception:
                continue  # left to the full decoder
            fast += 1
            assert got == want, (v, got, want)
    assert fast >= len(spans) * 5  # the fast path does take the plain spans and their plain variants


def test_a_request_decodes_as_span_by_span_and_equal_strings_are_one_object(tmp_path):
    spans = _spans(tmp_path)
    bad = copy.deepcopy(spans[3])
    bad["startTimeUnixNano"] = "soon"
    request = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "s"}}]},
                                  "scopeSpans": [{"scope": {"name": "scope"}, "spans": spans}]}]}
    rows = otlp_decode.decode_spans(json.loads(json.dumps(request)))
    assert rows == [_full(sp) for sp in spans]
    plain = [r for r, sp in zip(rows, spans) if not sp.get("status") and not sp.get("links")]
    names = {id(r["name"]) for r in plain if r["name"] == plain[0]["name"]}
    keys = {id(k) for r in plain for k in r["attributes"] if k == "dask.task.prefix"}
    assert len(plain) > 10 and len(names) == 1 and len(keys) == 1
    request["resourceSpans"][0]["scopeSpans"][0]["spans"].insert(2, bad)
    with pytest.raises(otlp_decode.DecodeError, match=r"resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[2\]: "
                                                      r"startTimeUnixNano: not an integer: 'soon'"):
        otlp_decode.decode_spans(request)
