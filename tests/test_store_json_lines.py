"""A run folder's traces lines kept whole in the store (evlog/data/store/json_spans.py), as `evlog view` and
the CLI store them, answer every query as the same lines stored as row dicts do; a line that is not
plain is stored as rows, and a corrupt one reported as before."""
from __future__ import annotations

import json
import os

from synthetic_run import make_run

from evlog.data.run_reader import RunFolder
from evlog.data.span_lines import as_dicts
from evlog.data.store import Store, store_rows
from evlog.data.store.json_spans import columns


def _stores(path: str) -> tuple[Store, Store, RunFolder]:
    rows, kept = Store(None), Store(None)
    rf = RunFolder(path, keep_traces=lambda *a: 1 / 0)  # a keeper that fails: every line as rows
    while True:
        batch = rf.poll()
        if not batch and not rf.moved:
            break
        rows.ingest(batch)
    folder = RunFolder(path)
    folder.load_into(kept)  # lines kept whole
    return rows, kept, folder


def _sorted(spans: list) -> list[str]:
    """The spans as comparable text; span_lines' records (a run folder's lines, as the report reads them) as dicts."""
    spans = [s if isinstance(s, dict) else as_dicts([s])[0] for s in spans]
    return sorted(json.dumps({k: v for k, v in s.items() if k not in ("resource", "scope")}, sort_keys=True, default=str)
                  for s in spans)


def _kv(key: str, value) -> dict:
    return {"key": key, "value": {"intValue": str(value)} if type(value) is int else {"stringValue": value}}


def _moves_and_memory(path: str, trace: str = "0af7651916cd43dd8448eb211c80319c") -> None:
    """A line of a worker's transfers and the bytes it holds (what the Gantt and the plots read whole)."""
    t0 = 1_700_000_000_000_000_000
    spans = [{"traceId": trace, "spanId": f"{0xabc000 + i:016x}", "name": "dask.transfer", "kind": 1,
              "startTimeUnixNano": str(t0 + i * 10**7), "endTimeUnixNano": str(t0 + i * 10**7 + 10**6),
              "attributes": [_kv("dask.worker.address", "tcp://127.0.0.1:40000"),
                             _kv("dask.transfer.source", "tcp://127.0.0.1:40001"), _kv("dask.transfer.bytes", 800 + i),
                             _kv("dask.task.key", f"inc-{i:06x}")]} for i in range(5)]
    spans.append({"traceId": trace, "spanId": f"{0xdef000:016x}", "name": "dask.worker.memory", "kind": 1,
                  "startTimeUnixNano": str(t0), "endTimeUnixNano": str(t0 + 10**8),
                  "attributes": [_kv("dask.worker.address", "tcp://127.0.0.1:40000")],
                  "events": [{"name": "dask.worker.memory", "timeUnixNano": str(t0 + i * 10**7),
                              "attributes": [_kv("dask.worker.nbytes", 1000 * i)]} for i in range(4)]})
    line = {"resourceSpans": [{"resource": {"attributes": [_kv("service.name", "app"), _kv("process.pid", 901)]},
                               "scopeSpans": [{"scope": {"name": "evlog"}, "spans": spans}]}]}
    with open(os.path.join(path, "traces-901.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def test_lines_kept_whole_answer_as_rows_do(tmp_path):
    make_run(str(tmp_path), n_tasks=60, batch=25)
    _moves_and_memory(str(tmp_path))
    rows, kept, folder = _stores(str(tmp_path))
    assert folder.problems == []
    assert kept._q("SELECT count(*) FROM spans WHERE req IS NOT NULL")[0][0] > 100  # the lines were kept
    assert rows._q("SELECT count(*) FROM spans WHERE req IS NOT NULL")[0][0] == 0
    assert kept.summary() == rows.summary()
    keys = [k for (k,) in rows._q("SELECT DISTINCT task_key FROM spans WHERE task_key IS NOT NULL ORDER BY 1")]
    assert len(keys) >= 60
    for key in keys[::7]:
        assert kept.story(key) == rows.story(key)
        a, b = kept.task_spans(key), rows.task_spans(key)
        strip = ("id", "req", "idx")
        assert [{k: v for k, v in d.items() if k not in strip} for d in a] == \
               [{k: v for k, v in d.items() if k not in strip} for d in b]
    strip_id = [r[1:] for r in kept.transfer_rows()], [r[1:] for r in rows.transfer_rows()]
    assert strip_id[0] == strip_id[1] and len(strip_id[0]) == 5 and strip_id[0][0][3:5] == ("tcp://127.0.0.1:40001", 800)
    assert kept.held_bytes() == rows.held_bytes() and len(kept.held_bytes()["tcp://127.0.0.1:40000"]) == 4
    # what the Gantt and the plots read of every such span is in its columns: no request decoded to draw them
    assert kept._q("SELECT count(*) FROM spans WHERE name IN ('dask.transfer', 'dask.worker.memory') "
                   "AND req IS NOT NULL AND attributes IS NOT NULL AND events IS NOT NULL")[0][0] == 6
    kept._requests.spans = None  # a decode from here on fails the test
    assert [r[1:] for r in kept.transfer_rows()] == strip_id[1] and kept.held_bytes() == rows.held_bytes()
    del kept._requests.spans
    assert kept.dependencies() == rows.dependencies() and kept.progress() == rows.progress()
    assert [r[1:] for r in kept.gantt_rows(None)] == [r[1:] for r in rows.gantt_rows(None)]
    ks, ls = store_rows(kept)
    rs, lr = store_rows(rows)
    assert _sorted(ks) == _sorted(rs) and ls == lr
    assert {s["resource"].get("service.name") for s in ks} == {s["resource"].get("service.name") for s in rs}


def test_a_line_that_is_not_plain_is_stored_as_rows_and_a_corrupt_one_is_reported(tmp_path):
    make_run(str(tmp_path), n_tasks=20, batch=10)
    path = os.path.join(tmp_path, "traces-100.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(x) for x in f]
    odd = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    odd[0]["kind"] = "SPAN_KIND_SERVER"  # valid OTLP/JSON the columns reader leaves to the full decoder
    bad = json.loads(json.dumps(lines[1]))
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["events"] = [{"name": "e", "timeUnixNano": "soon"}]
    with open(path, "w", encoding="utf-8") as f:
        for x in [lines[0], bad] + lines[2:]:
            f.write(json.dumps(x) + "\n")
    try:
        columns(lines[0], b"")
        raise AssertionError("a span kind by name is not plain")
    except ValueError:
        pass
    store = Store(None)
    rf = RunFolder(str(tmp_path))
    rf.load_into(store)
    assert rf.problems == [f"{path}:2: skipped a corrupt line: resourceSpans[0].scopeSpans[0].spans[0]: "
                           "events.timeUnixNano: not an integer: 'soon'"]
    sid = odd[0]["spanId"]
    assert store._q("SELECT kind, req FROM spans WHERE span_id = ?", (sid,)) == [("SERVER", None)]
    assert store._q("SELECT count(*) FROM spans WHERE req IS NOT NULL")[0][0] > 0


def test_store_rows_keeps_no_strings_for_sharing_once_its_rows_are_made(tmp_path):
    """A server makes a report panel now and then: the strings its reading shared go with the rows, not
    held by the decoder in between (a 157k-task run's task keys pinned about 100 MB of the server's heap)."""
    from evlog.data import otlp_decode

    make_run(str(tmp_path), n_tasks=20, batch=10)
    rows, kept, _folder = _stores(str(tmp_path))
    for store in (rows, kept):
        held = "inc-held-" + "x" * 20
        otlp_decode.shared_strings()(held, held)
        spans, _logs = store_rows(store)
        assert spans
        other = "".join(["inc-held-", "x" * 20])  # equal, not the same object
        assert otlp_decode.shared_strings()(other, other) is other, "the decoder still shares a string from before"


def test_lines_only_pythons_json_takes_are_read_and_broken_ones_named(tmp_path):
    """Lines are parsed by msgspec first; what it refuses (Python's bare NaN, a lone surrogate escaped, or as the
    bytes evlog wrote for one before it wrote U+FFFD) is still read through json.loads, a lone surrogate as
    U+FFFD, and a line that is not UTF-8 or not JSON gets the message it always had."""
    make_run(str(tmp_path), n_tasks=30, batch=10)
    path = os.path.join(tmp_path, "traces-100.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(x) for x in f]
    nan_span = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    nan_span["attributes"].append({"key": "ratio", "value": {"doubleValue": float("nan")}})
    odd_span = lines[1]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    odd_span["name"] = "task \ud800"
    with open(path, "wb") as f:
        f.write(json.dumps(lines[0]).encode() + b"\n")  # "doubleValue": NaN
        f.write(json.dumps(lines[1]).encode() + b"\n")  # "task \\ud800"
        f.write(json.dumps(lines[2], ensure_ascii=False).replace("dask.task ", "dask.task \udce9-", 1)
                .encode("utf-8", "surrogatepass") + b"\n")  # as evlog wrote a lone surrogate before it wrote U+FFFD
        f.write(b'{"resourceSpans": [\xff]}\n')
        f.write(b'{"resourceSpans": [}\n')
        for x in lines[3:]:
            f.write(json.dumps(x).encode() + b"\n")
    store = Store(None)
    rf = RunFolder(str(tmp_path))
    rf.load_into(store)
    assert rf.problems == [
        f"{path}:4: skipped a corrupt line: not UTF-8 JSON (byte 0xff at column 20)",
        f"{path}:5: skipped a corrupt line: Expecting value: line 1 column 20 (char 19)"]
    assert store._q("SELECT count(*) FROM spans WHERE name LIKE '%\ufffd-%'")[0][0] == 1
    assert store._q("SELECT name FROM spans WHERE span_id = ?", (nan_span["spanId"],))
    assert store._q("SELECT name FROM spans WHERE span_id = ?", (odd_span["spanId"],)) == [("task \ufffd",)]
    ids = [s["spanId"] for x in lines for rs in x["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    marks = ",".join("?" * len(ids))
    assert store._q(f"SELECT count(*) FROM spans WHERE span_id IN ({marks})", tuple(ids))[0][0] == len(ids)
