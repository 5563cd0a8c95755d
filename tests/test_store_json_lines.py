"""A run folder's traces lines kept whole in the store (evlog/data/store/json_spans.py), as `evlog view` and
the CLI store them, answer every query as the same lines stored as row dicts do; a line that is not
plain is stored as rows, and a corrupt one reported as before."""
from __future__ import annotations

import json
import os

from synthetic_run import make_run

from evlog.data.run_reader import RunFolder
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


def _sorted(spans: list[dict]) -> list[str]:
    return sorted(json.dumps({k: v for k, v in s.items() if k not in ("resource", "scope")}, sort_keys=True, default=str)
                  for s in spans)


def test_lines_kept_whole_answer_as_rows_do(tmp_path):
    make_run(str(tmp_path), n_tasks=60, batch=25)
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
    assert strip_id[0] == strip_id[1]
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
