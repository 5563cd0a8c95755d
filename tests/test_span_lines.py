"""`evlog report`'s reading of a run folder's spans (evlog.data.span_lines): each traces line gives the rows
otlp_decode gives it, or raises and is left to otlp_decode, which names what is wrong; the rows read as
dicts; and the report on them is the report on otlp_decode's dicts. Compressed files with members longer
than the reader's piece of zlib input read as the plain ones."""
from __future__ import annotations

import copy
import glob
import json
import os
import random

import pytest
from helpers import gzip_members
from synthetic_run import make_run

from evlog.data import otlp_decode, span_lines
from evlog.data.run_reader import RunFolder
from evlog.report.analysis import analyse
from evlog.report.whole import whole_computations


def _lines(folder: str) -> list[bytes]:
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "traces*.jsonl"))):
        with open(path, "rb") as f:
            out += [x.rstrip(b"\n") for x in f if x.strip()]
    return out


def _full(line: bytes):
    try:
        return otlp_decode.decode_spans(json.loads(line))
    except ValueError as e:
        return ("error", str(e))


def _fast(line: bytes):
    try:
        return span_lines.as_dicts(span_lines.rows(line))
    except Exception:
        return None  # left to otlp_decode


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("span-lines"))
    make_run(folder, n_tasks=60, batch=20, errors=2)
    return folder


def test_every_line_of_a_run_gives_otlp_decodes_rows(run):
    lines = _lines(run)
    assert len(lines) > 3
    for line in lines:
        assert _fast(line) == _full(line)


SPAN_VARIANTS = [
    ("kind", "SPAN_KIND_SERVER"), ("kind", "5"), ("kind", 9), ("kind", -1), ("kind", True), ("kind", 2.0),
    ("startTimeUnixNano", 12), ("startTimeUnixNano", 12.0), ("startTimeUnixNano", 1.5), ("startTimeUnixNano", True),
    ("startTimeUnixNano", "-3"), ("startTimeUnixNano", " 7"), ("startTimeUnixNano", "1e3"), ("startTimeUnixNano", "٣"),
    ("startTimeUnixNano", None), ("endTimeUnixNano", str(1 << 63)), ("endTimeUnixNano", str(1 << 64)),
    ("endTimeUnixNano", -5), ("parentSpanId", ""), ("parentSpanId", None), ("parentSpanId", 0),
    ("parentSpanId", "ABCDEF0123456789"), ("traceId", "A" * 32), ("traceId", "xyz"), ("traceId", None),
    ("spanId", None), ("spanId", "12"), ("name", 3), ("name", None), ("events", []), ("events", None),
    ("events", {}), ("events", "x"), ("attributes", []), ("attributes", None), ("attributes", {}),
    ("attributes", [{"key": "k"}]), ("attributes", [{"key": 1, "value": {"stringValue": "v"}}]),
    ("attributes", [{"value": {"stringValue": "no key"}}]),
    ("attributes", [{"key": "n", "value": {"intValue": "7"}}, {"key": "s", "value": {"stringValue": 5}}]),
    ("attributes", [{"key": "s", "value": {"stringValue": None}}]),
    ("attributes", [{"key": "s", "value": {}}]), ("attributes", [{"key": "s", "value": None}]),
    ("attributes", [{"key": "s", "value": {"fooValue": 1}}]),
    ("attributes", [{"key": "two", "value": {"doubleValue": 1.5, "intValue": "3"}}]),
    ("attributes", [{"key": "two", "value": {"intValue": "3", "stringValue": "x"}}]),
    ("attributes", [{"key": "i", "value": {"intValue": 7}}, {"key": "big", "value": {"intValue": str(1 << 70)}}]),
    ("attributes", [{"key": "d", "value": {"doubleValue": "-Infinity"}}, {"key": "b", "value": {"boolValue": True}}]),
    ("attributes", [{"key": "y", "value": {"bytesValue": "aGk"}}, {"key": "bad", "value": {"bytesValue": "*"}}]),
    ("attributes", [{"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": "2"}]}}},
                    {"key": "kv", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": 0}}]}}}]),
    ("status", {"code": 2, "message": "bad"}), ("status", {}), ("status", {"code": "2"}), ("status", {"code": 3}),
    ("status", {"code": "STATUS_CODE_ERROR"}), ("status", None), ("status", {"message": 5}),
    ("links", [{"traceId": "1" * 32, "spanId": "2" * 16}]), ("links", [{"traceId": "1" * 32}]),
    ("links", [{"traceId": "1" * 32, "spanId": "2" * 16, "attributes": [{"key": "k", "value": {"intValue": 1}}]}]),
]
EVENT_VARIANTS = [
    ("timeUnixNano", 2.5), ("timeUnixNano", "5"), ("timeUnixNano", 5), ("timeUnixNano", "x"), ("name", None),
    ("name", 4), ("attributes", None), ("attributes", []), ("attributes", {}), ("attributes", "x"),
    ("attributes", [{"key": "k", "value": {"intValue": "1"}}]), ("attributes", [{"key": "k", "value": {"x": 1}}]),
]


def _arr(*values) -> dict:
    return {"arrayValue": {"values": list(values)}}


ARRAYS = [  # AnyValues with arrays, as an attribute's value or an event attribute's
    _arr({"intValue": "0"}, {"intValue": "1"}, {"intValue": "45872"}),  # dask.task.priority
    _arr({"stringValue": "('x-1f2e', 0)"}, {"stringValue": "y"}), _arr(), {"arrayValue": {}},
    {"arrayValue": {"values": None}}, {"arrayValue": None}, {"arrayValue": []}, {"arrayValue": {"values": {}}},
    {"arrayValue": {"values": [], "other": 1}}, _arr({"intValue": 3}, {"intValue": 3.0}, {"intValue": 3.5}),
    _arr({"intValue": str(1 << 63)}, {"intValue": str(-(1 << 63))}), _arr({"intValue": str(1 << 64)}),
    _arr({"intValue": str(-(1 << 63) - 1)}), _arr({"intValue": " 7"}), _arr({"intValue": "x"}),
    _arr({"intValue": None}), _arr({"intValue": True}), _arr({"doubleValue": 1.5}, {"doubleValue": 2}),
    _arr({"doubleValue": "-Infinity"}, {"doubleValue": "x"}), _arr({"boolValue": True}, {"boolValue": 0}),
    _arr({"stringValue": "a"}, {"intValue": "2"}, {"doubleValue": 0.5}, {"boolValue": False}, {},
         {"bytesValue": "aGk"}, {"kvlistValue": {"values": [{"key": "k", "value": {"intValue": "1"}}]}}),
    _arr({"bytesValue": "*"}), _arr({"stringValue": 5}), _arr({"stringValue": None}), _arr(None), _arr(3),
    _arr({"fooValue": 1}), _arr({"intValue": "3", "stringValue": "x"}), _arr({"stringValue": "x", "intValue": "3"}),
    _arr({"doubleValue": 1.5, "intValue": "3"}), _arr({"arrayValue": {"values": [{"intValue": "4"}]}}),
    _arr(_arr(_arr({"stringValue": "deep"}), _arr()), {"intValue": "1"}), _arr(_arr({"intValue": str(1 << 64)})),
    _arr({"arrayValue": None}), {"arrayValue": {"values": [{"intValue": "1"}]}, "intValue": "2"},
    {"intValue": "2", "arrayValue": {"values": [{"intValue": "1"}]}}, {"arrayValue": _arr(), "stringValue": "s"},
]


def _same(a, b) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True for ``==``, not in a report's JSON)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return repr(a) == repr(b)


def test_arrays_decode_as_otlp_decode_decodes_them_or_are_left_to_it(run):
    sp = json.loads(_lines(run)[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    fast = 0
    for value in ARRAYS:
        kvs = [{"key": "n", "value": {"intValue": "1"}}, {"key": "a", "value": value}]
        v = dict(sp, attributes=kvs, events=[{"name": "e", "timeUnixNano": "1", "attributes": kvs}])
        line = json.dumps({"resourceSpans": [{"resource": {"attributes": kvs}, "scopeSpans": [{"spans": [v]}]}]})
        got, want = _fast(line.encode()), _full(line.encode())
        if got is not None:
            fast += 1
            assert _same(got, want), (value, got, want)
    assert fast >= 12  # arrays of plain values do take this path


def _requests(run: str) -> list[dict]:
    """One request per kind of span of the run (scheduler, execution, erred, with events), as a line holds it."""
    out, seen = [], set()
    for line in _lines(run):
        req = json.loads(line)
        for rs in req["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    kind = (sp["name"].split(" ")[0], bool(sp.get("events")), bool(sp.get("status")))
                    if kind not in seen:
                        seen.add(kind)
                        out.append({"resourceSpans": [dict(rs, scopeSpans=[dict(ss, spans=[sp])])]})
    return out


def test_a_span_not_plain_is_left_to_otlp_decode_and_a_plain_one_decodes_as_it_does(run):
    fast = 0
    for req in _requests(run):
        sp = req["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        variants = []
        for field, value in SPAN_VARIANTS:
            v = copy.deepcopy(sp)
            v[field] = value
            variants.append(v)
        for field, value in EVENT_VARIANTS if sp.get("events") else ():
            v = copy.deepcopy(sp)
            v["events"][0][field] = value
            variants.append(v)
        for v in variants:
            line = json.dumps({"resourceSpans": [dict(req["resourceSpans"][0], scopeSpans=[{"spans": [v]}])]}).encode()
            got, want = _fast(line), _full(line)
            if got is not None:
                fast += 1
                assert got == want, (v, got, want)
    assert fast >= 40  # the plain variants do take this path


def test_requests_that_are_not_plain_are_left_to_otlp_decode():
    for line in (b"", b"[]", b"{}", b'{"resourceSpans": null}', b'{"resourceSpans": [null]}', b"\xff\xfe",
                 b'{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": {"no": 1}}]}}]}',
                 b'{"resourceSpans": [{"scopeSpans": [{"scope": {"name": 3}}]}]}'):
        assert _fast(line) is None
    assert _fast(b'{"resourceSpans": []}') == _full(b'{"resourceSpans": []}') == []


def test_rows_read_as_dicts_and_equal_event_attributes_are_one_dict(run):
    rows = [r for line in _lines(run) for r in span_lines.rows(line)]
    r = next(r for r in rows if r["events"])
    assert r["name"] == r.get("name") == r.name and r.get("no such key") is None and r.get("x", 3) == 3
    ev = r["events"][0]
    assert ev["name"] == ev.get("name", "") and ev.get("attributes") is ev["attributes"] and ev.get("nope", 1) == 1
    sp = json.loads(_lines(run)[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    same = [{"key": "dask.transition.start", "value": {"stringValue": "released"}}]
    sp["events"] = [{"name": "transition", "timeUnixNano": str(t), "attributes": same} for t in (1, 2)]
    sp["events"].append({"name": "transition", "timeUnixNano": "3", "attributes": same + same[:0] + [
        {"key": "dask.transition.finish", "value": {"stringValue": "waiting"}}]})
    [row] = span_lines.rows(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [sp]}]}]}).encode())
    a, b, c = (e["attributes"] for e in row["events"])
    assert a is b and a == {"dask.transition.start": "released"} and c is not a


def test_the_report_on_these_rows_is_the_report_on_otlp_decodes(run):
    rows = [r for line in _lines(run) for r in span_lines.rows(line)]
    dicts = span_lines.as_dicts(rows)
    assert dicts == [r for line in _lines(run) for r in otlp_decode.decode_spans(json.loads(line))]
    assert json.dumps(analyse(rows, [])) == json.dumps(analyse(dicts, []))
    kept, left, _ = whole_computations(rows)
    assert [r["span_id"] for r in kept] == [r["span_id"] for r in whole_computations(dicts)[0]]


def test_a_folder_read_through_span_lines_gives_the_same_rows_and_problems(run, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    lines = _lines(run)
    req = json.loads(lines[1])
    req["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "F" * 32  # otlp_decode's to read
    bad = json.loads(lines[2])
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "xyz"  # and to name as wrong
    text = [lines[0], json.dumps(req).encode(), json.dumps(bad).encode(), b'{"resourceSpans": [ cut', b"\xff x",
            *lines[3:]]
    (folder / "traces-1.jsonl").write_bytes(b"\n".join(text) + b"\n")
    plain, fast = RunFolder(str(folder)), RunFolder(str(folder), span_rows=span_lines.rows)
    want = [r for _s, rows in plain.read_all() for r in rows]
    got = [r for _s, rows in fast.read_all() for r in rows]
    assert fast.problems == plain.problems and len(plain.problems) == 3
    assert "spanId: expected a span id as 16 hex digits, got 'xyz'" in plain.problems[0]
    assert [type(r) for r in got].count(dict) == len(json.loads(text[1])["resourceSpans"][0]["scopeSpans"][0]["spans"])
    assert [r if type(r) is dict else span_lines.as_dicts([r])[0] for r in got] == want
    assert fast.lines == plain.lines and fast.rows == plain.rows


def test_members_longer_than_a_piece_of_zlib_input_read_as_the_plain_file(tmp_path):
    rnd = random.Random(3)
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    lines = []
    for i in range(15):  # lines of 200 KB of random hex: members of about 300 KB compressed
        spans = [{"traceId": "%032x" % rnd.getrandbits(128), "spanId": "%016x" % rnd.getrandbits(64), "name": f"s{i}",
                  "attributes": [{"key": "blob", "value": {"stringValue": "%x" % rnd.getrandbits(8000)}}]}
                 for _ in range(100)]
        lines.append(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode() + b"\n")
    (plain / "traces-1.jsonl").write_bytes(b"".join(lines))
    members = gzip_members(lines, per=3, cut=True)  # lines 0-2, 3-4 and most of 5, the rest of 5 and 6-8, ...
    assert len(members) == 5 and min(len(m) for m in members) > 3 * 64 << 10
    bad = bytearray(members[2])
    for i in range(100_000, 100_040):  # past the first piece of zlib input
        bad[i] ^= 0x55
    path = packed / "traces-1.jsonl.gz"
    path.write_bytes(members[0] + members[1] + bytes(bad) + members[3] + members[4][:-5000])
    want = [r for _s, rows in RunFolder(str(plain)).read_all() for r in rows]
    rf = RunFolder(str(packed), span_rows=span_lines.rows)
    got = span_lines.as_dicts([r for _s, rows in rf.read_all() for r in rows])
    kept = {f"s{i}" for i in (0, 1, 2, 3, 4, 10, 11)}  # line 9 joins the start of line 5: one corrupt line
    assert got == [r for r in want if r["name"] in kept]
    corrupt, joined, cut = rf.problems
    at = len(members[0]) + len(members[1])
    assert corrupt.startswith(f"{path}: byte {at}: skipped a corrupt gzip member (")
    assert joined.startswith(f"{path}:6: skipped a corrupt line: ")
    assert cut == (f"{path}: byte {at + len(bad) + len(members[3])}: incomplete last gzip member "
                   f"({len(members[4]) - 5000:,} bytes), skipped")
