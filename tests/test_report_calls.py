"""`evlog report` tells each client call its own story, on a real Dask run under evlog-instrument:
the same delayed keys computed in a loop are new lives of each call (never retries), a task that
fails once and succeeds with ``retries=2`` is in its call's retries, computations are named for what
the user computed (never Dask's ``finalize-...`` wrapper), and profile advice rests on enough samples
of the user's own functions.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import PYTHON, evlog_env, run_app, span_lines

from evlog.report.whole import TAIL_NS

APP = r'''
import os
import sys
import time

import dask
import dask.array as da
from distributed import Client, LocalCluster


def load(i):
    time.sleep(0.05)
    return i


def total(parts, epoch):
    return sum(parts) * epoch


def flaky(x, flag):
    if not os.path.exists(flag):
        open(flag, "w").close()
        raise RuntimeError("transient: upstream returned 503")
    return x


def tiny(i):
    time.sleep(0.002)
    return i


if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        parts = [dask.delayed(load)(i) for i in range(10)]
        for epoch in range(1, 4):
            print("total", dask.delayed(total)(parts, epoch).compute())
        # the same, holding each result: the load keys stay on the scheduler, released, between calls
        held = []
        for epoch in range(1, 4):
            held.append(client.compute(dask.delayed(total)(parts, 10 * epoch)))
            print("held", held[-1].result())
        print("flaky", client.submit(flaky, 7, os.path.join(os.getcwd(), "flag"), retries=2).result())
        print("tiny", sum(client.gather(client.map(tiny, range(5)))))
        print("sum", da.ones((60, 60), chunks=(10, 10)).sum().compute())
'''

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    p, run_dir = run_app(tmp_path_factory.mktemp("calls"), APP)
    assert b"flaky 7" in p.stdout and b"sum 3600" in p.stdout, p.stdout
    r = subprocess.run([PYTHON, "-m", "evlog.cli", "report", run_dir, "--format", "json"], capture_output=True,
                       timeout=120, env=evlog_env())
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    text = subprocess.run([PYTHON, "-m", "evlog.cli", "report", run_dir], capture_output=True, timeout=120,
                          env=evlog_env())
    assert text.returncode == 0, text.stderr.decode(errors="replace")
    return {"json": json.loads(r.stdout), "text": text.stdout.decode(), "dir": run_dir}


def _totals(rep: dict, method: str = "get") -> list[dict]:
    return [c for c in rep["computations"] if c["method"] == method and "total" in c["prefixes"]]


@pytest.mark.parametrize("method", ["get", "compute"])
def test_the_same_keys_computed_in_three_calls_are_three_computations(report, method):
    calls = _totals(report["json"], method)
    assert [c["name"] for c in calls] == [f"{method} total (11 tasks)", f"{method} total (11 tasks) #2",
                                          f"{method} total (11 tasks) #3"]
    for c in calls:
        load = c["prefixes"]["load"]
        assert (c["tasks"], load["count"], load["retried"], load["erred"]) == (11, 10, 0, 0), c["name"]
        assert load["median_compute_s"] >= 0.045, c["name"]  # each life has its own execution
        assert c["retries"] == [], c["name"]
    for a, b in zip(calls, calls[1:]):  # one after another, as the program ran them
        assert a["end"] <= b["start"], (a["name"], a["end"], b["name"], b["start"])


def test_a_task_that_failed_once_and_succeeded_on_retry_is_in_its_computations_retries(report):
    [c] = [c for c in report["json"]["computations"] if "flaky" in c["prefixes"]]
    assert c["name"] == "submit flaky"
    [r] = c["retries"]
    assert r["prefix"] == "flaky" and r["attempts"] == 2 and r["failed"] == 1 and r["succeeded"]
    assert r["exception"] == "RuntimeError: transient: upstream returned 503"
    assert r["key"].startswith("flaky-") and r["story"]
    assert c["prefixes"]["flaky"]["retried"] == 1 and c["prefixes"]["flaky"]["erred"] == 0
    assert c["failures"] == []
    assert any(f"task {r['key']} failed once (RuntimeError: transient" in a for a in report["json"]["advice"])
    text = report["text"]
    section = text[text.index("== submit flaky"):]
    assert "Failures and retries:" in section and "RuntimeError: transient: upstream returned 503" in section


def test_computations_are_named_for_what_the_user_computed(report):
    names = [c["name"] for c in report["json"]["computations"]]
    assert not [n for n in names if "finalize" in n], names
    # newer dask wraps the array's result in a finalize-... key; dask 2024.11 (the lowest allowed) does not
    [arr] = [c for c in report["json"]["computations"]
             if c["key"].startswith("finalize-") or "sum-aggregate-" in c["key"]]
    assert arr["name"].startswith("get sum-aggregate ("), names  # the step under Dask's finalize, if any
    assert "map tiny (5 tasks)" in names


def test_profile_advice_needs_twenty_samples_of_a_function_of_the_users(report):
    rep = report["json"]
    calls = _totals(rep)
    # load: 10 tasks of 50 ms sampled every 10 ms, about 50 samples, all in load
    prof = calls[0]["prefixes"]["load"]["profile"]
    assert prof["samples"] >= 20 and prof["own"]["function"] == "load" and prof["own"]["share"] >= 0.3
    assert any(a.startswith("get total (11 tasks): load (") for a in rep["advice"]), rep["advice"]
    # tiny: 5 tasks of 2 ms, a handful of samples: never advice, whatever holds them
    [tiny] = [c for c in rep["computations"] if "tiny" in c["prefixes"]]
    tprof = tiny["prefixes"]["tiny"].get("profile")
    assert tprof is None or tprof["samples"] < 20
    assert not [a for a in rep["advice"] if "sampled time of tiny" in a]
    # no advice names evlog's, Dask's or the standard library's frames
    for a in rep["advice"]:
        assert not any(w in a for w in ("_gc_callback", "genericpath", "distributed", "evlog/", "logging")), a


def test_queued_time_is_per_task_and_a_sum_says_task_seconds(report):
    for c in report["json"]["computations"]:
        for p in c["prefixes"].values():
            assert p["p95_queued_s"] >= p["median_queued_s"] >= 0
    text = report["text"]
    assert "queued median / p95" in text and "sums in task-seconds" in text


def test_a_run_folder_cut_short_is_reported_on_its_whole_computations_and_says_so(report, tmp_path):
    """As a live run's folder is: the traces cut at a third, half and two thirds of their spans. The
    command line, like the dashboard's panel, reports the computations that are whole and says how
    many it left out."""
    full = report["dir"]
    whole = {c["key"]: c for c in report["json"]["computations"]}
    assert not report["json"]["partial"] and report["json"]["left_out"] == {}
    texts = []
    for share in (0.33, 0.5, 0.67):
        cut = tmp_path / f"cut{share}"
        cut.mkdir()
        for n in os.listdir(full):
            if n.startswith("traces"):
                lines = span_lines(os.path.join(full, n))
                (cut / n.removesuffix(".gz")).write_bytes(b"".join(lines[:int(len(lines) * share)]))
            else:
                (cut / n).write_bytes(open(os.path.join(full, n), "rb").read())
        r = subprocess.run([PYTHON, "-m", "evlog.cli", "report", str(cut), "--format", "json"], capture_output=True,
                           timeout=120, env=evlog_env())
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        rep = json.loads(r.stdout)
        left = sum(rep["left_out"].values())
        assert rep["partial"] == bool(left) and len(rep["computations"]) + left <= len(whole), (share, rep["left_out"])
        for c in rep["computations"]:  # each as in the whole run: all its tasks, a start, a wall time
            assert c["tasks"] == whole[c["key"]]["tasks"] and c["start"] and c["wall_s"] is not None, (share, c["name"])
        if rep["partial"]:
            texts.append(subprocess.run([PYTHON, "-m", "evlog.cli", "report", str(cut)], capture_output=True,
                                        timeout=120, env=evlog_env()).stdout.decode())
    assert texts, "no cut left a computation out"
    assert all("Partial: " in t and "left out, not whole in what was recorded" in t for t in texts)


def test_a_folder_without_a_computations_output_yet_leaves_that_computation_out(report, tmp_path):
    """What a live run's folder holds for a while: a held result's scheduler span waits out its grace and
    its worker exports when it does, so the folder can have a call's span and its dependencies' spans
    but none of the output's own. Nothing stored depends on the dependencies then, so they look like
    outputs; the call's first key says they are not."""
    full = report["dir"]
    end = report["json"]["end"]
    recent = [c for c in report["json"]["computations"] if c["method"] in ("compute", "get")
              and end - (c["start"] + c["wall_s"]) < TAIL_NS / 1e9 - 1]  # earlier ones may hold older outputs
    assert recent, [c["name"] for c in report["json"]["computations"]]
    files = {n: span_lines(os.path.join(full, n)) for n in os.listdir(full) if n.startswith("traces")}

    def the_outputs(line: bytes, key: str) -> bool:
        [span] = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        attrs = {a["key"]: a["value"].get("stringValue") for a in span.get("attributes", [])}
        return span["name"] != "dask.compute" and attrs.get("dask.task.key") == key

    whole = {x["key"]: x for x in report["json"]["computations"]}
    for n, c in enumerate(recent):
        cut = tmp_path / f"cut{n}"
        cut.mkdir()
        dropped = 0
        for name in os.listdir(full):
            if name in files:
                kept = [line for line in files[name] if not the_outputs(line, c["key"])]
                dropped += len(files[name]) - len(kept)
                (cut / name.removesuffix(".gz")).write_bytes(b"".join(kept))
            else:
                (cut / name).write_bytes(open(os.path.join(full, name), "rb").read())
        assert dropped >= 2, (c["name"], dropped)  # its scheduler span and its execution
        r = subprocess.run([PYTHON, "-m", "evlog.cli", "report", str(cut), "--format", "json"], capture_output=True,
                           timeout=120, env=evlog_env())
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        rep = json.loads(r.stdout)
        assert rep["left_out"] == {"fewer results than the call asked for": 1}, (c["name"], rep["left_out"])
        assert c["key"] not in [x["key"] for x in rep["computations"]], c["name"]
        assert all(x["tasks"] == whole[x["key"]]["tasks"] for x in rep["computations"]), c["name"]
