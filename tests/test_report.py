"""`evlog report` on a real Dask run under evlog-instrument (helpers.REPORT_APP), checked against graphs
whose answer is known: a chain of long tasks beside short ones (the critical path), one task of 40 made 20x slower
(the straggler), a failing task (the failure and its erred transition), inputs on one worker and
tasks restricted to the other (transfer time on that one). One run serves all: each graph is its
own client call, so its own computation in the report. The HTML page is opened in headless chromium.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import CHROMIUM, PYTHON, Browser, evlog_env, no_exceptions, open_page, run_app, start_view, stop_view

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory, report_app_run):
    tmp = tmp_path_factory.mktemp("report")
    p, run_dir = report_app_run
    where = next(json.loads(line) for line in p.stdout.decode().splitlines() if line.startswith('{"holder"'))
    return {"dir": str(run_dir), "tmp": tmp, **where}


def evlog(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "evlog.cli", *args], capture_output=True, timeout=120, cwd=cwd,
                          env=evlog_env())


@pytest.fixture(scope="module")
def report(run):
    p = evlog("report", run["dir"], "--format", "json")
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return json.loads(p.stdout)


def computation(report: dict, key: str) -> dict:
    """The computation of the client call whose (first) key is ``key``."""
    found = [c for c in report["computations"] if c["key"] == key]
    assert len(found) == 1, [(c["name"], c["key"]) for c in report["computations"]]
    return found[0]


def test_the_chain_and_the_final_task_are_the_critical_path(report):
    c = computation(report, "final-0")
    assert c["tasks"] == 35
    path = c["critical_path"]
    assert [r["key"] for r in path] == ["chain-0", "chain-1", "chain-2", "chain-3", "final-0"]
    assert all(r["compute_s"] >= 0.39 for r in path[:4])  # each slept 0.4 s
    assert all(r["start"] <= r["end"] for r in path)
    assert [r["start"] for r in path] == sorted(r["start"] for r in path)
    assert set(c["prefixes"]) == {"chain", "short", "final"}
    assert c["prefixes"]["short"]["count"] == 30 and c["prefixes"]["chain"]["compute_s"] >= 1.56
    assert 0 < c["critical_path_share"] <= 1.0001


def test_the_one_slow_task_of_forty_is_the_straggler(report):
    c = computation(report, "work-0")
    assert c["prefixes"]["work"]["count"] == 40
    s = c["stragglers"][0]
    assert s["key"] == "work-17" and s["prefix"] == "work"
    assert s["compute_s"] >= 0.59 and s["ratio"] > 5
    assert s["worker"].startswith("tcp://")
    assert any(e["start"] == "processing" and e["finish"] == "memory" for e in s["story"])
    assert not any(x["key"] != "work-17" and x["compute_s"] > 0.5 for x in c["stragglers"])


def test_the_failing_task_is_a_failure_with_its_erred_transition(report):
    c = computation(report, "boom-0")
    [f] = c["failures"]
    assert f["key"] == "boom-0" and f["exception"] == "ValueError" and f["message"] == "bad input 42"
    assert "in boom" in f["stacktrace"]
    assert any(e["start"] == "processing" and e["finish"] == "erred" for e in f["story"])
    assert c["prefixes"]["boom"]["erred"] == 1
    assert any("boom-0" in a and "ValueError" in a for a in report["advice"])


def test_transfer_time_shows_on_the_worker_without_the_inputs(run, report):
    c = computation(report, "consume-0")
    [t] = c["critical_path"]
    assert t["worker"] == run["consumer"] and t["transfer_s"] > 0
    assert c["prefixes"]["consume"]["transfer_s"] > 0
    workers = {w["address"]: w for w in report["workers"]}
    assert workers[run["consumer"]]["transfer_bytes"] >= 20_000_000
    assert workers[run["consumer"]]["transfer_s"] > 0
    assert workers[run["holder"]]["transfer_bytes"] < 20_000_000
    assert report["most_transfer"]["worker"] == run["consumer"]


def test_text_report_and_metadata(run, report):
    p = evlog("report", run["dir"])
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    text = p.stdout.decode()
    assert "Critical path: 5 tasks" in text
    assert text.index("chain-0") < text.index("chain-3") < text.index("final-0  final")
    assert "work-17" in text and "ValueError: bad input 42" in text
    [g] = report["metadata"]
    assert g["x"] == "epoch" and g["keys"]["loss"]["last"] == 0.2 and g["keys"]["loss"]["trend"] == "down"


def test_report_from_an_evlog_serve_database_matches_the_folder(run, report, tmp_path):
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store

    db = str(tmp_path / "run.sqlite")
    store = Store(db)
    RunFolder(run["dir"]).load_into(store)
    store.close()
    p = evlog("report", "--db", db, "--format", "json")
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    got = json.loads(p.stdout)
    assert [c["name"] for c in got["computations"]] == [c["name"] for c in report["computations"]]
    assert ([r["key"] for r in computation(got, "final-0")["critical_path"]]
            == [r["key"] for r in computation(report, "final-0")["critical_path"]])


def test_report_of_a_database_of_two_runs_is_of_one_run_the_newest_or_the_one_named(run, report, tmp_path):
    from synthetic_run import make_run

    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store

    db = str(tmp_path / "runs.sqlite")
    store = Store(db)
    RunFolder(run["dir"]).load_into(store)
    make_run(str(tmp_path / "other"), n_tasks=30)  # an older run, without evlog.run.id
    RunFolder(str(tmp_path / "other")).load_into(store)
    [newest, older] = [r["run"] for r in store.runs()]
    store.close()
    assert newest and older == ""
    names = [c["name"] for c in report["computations"]]
    p = evlog("report", "--db", db, "--format", "json")
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert [c["name"] for c in json.loads(p.stdout)["computations"]] == names  # the newest alone
    assert f"holds 2 runs; this is the newest, {newest!r} (--run ID for another)" in p.stderr.decode()
    p = evlog("report", "--db", db, "--run", "", "--format", "json")
    got = json.loads(p.stdout)
    assert p.returncode == 0 and got["computations"] and not set(c["name"] for c in got["computations"]) & set(names)
    p = evlog("report", "--db", db, "--run", "nope")
    assert p.returncode == 1 and f"no run 'nope' (evlog.run.id); it holds {newest!r}, ''" in p.stderr.decode()
    p = evlog("report", run["dir"], "--run", newest)
    assert p.returncode == 1 and "--run picks a run of an `evlog serve` database: give --db too" in p.stderr.decode()


FUTURES_APP = r'''
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from distributed import Client, LocalCluster


def step(x):
    time.sleep(0.4)
    return x + 1


def merge(x):
    return x * 2


def double(x):
    return 2 * x


if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        # the futures style: one client call per task, each on the previous one's future
        c = client.submit(step, 0, key="chain-0")
        for i in range(1, 4):
            c = client.submit(step, c, key=f"chain-{i}")
        m = client.submit(merge, c, key="merge-0")
        print(m.result())
        # merge-0 is held past the scheduler's grace for a task's last transitions (dask_lives.GRACE): the
        # chain's released results are forgotten only at the client's close, in second lives of their own
        time.sleep(2.5)
    # one function in three kinds of pool
    with ThreadPoolExecutor(2) as ex:
        print(sum(ex.map(double, range(3))))
    with ProcessPoolExecutor(2) as ex:
        print(sum(ex.map(double, range(4))))
    with multiprocessing.Pool(2) as pool:
        print(sum(pool.map(double, range(5))))
'''


@pytest.fixture(scope="module")
def futures_run(tmp_path_factory):
    p, run_dir = run_app(tmp_path_factory.mktemp("futures"), FUTURES_APP)
    r = evlog("report", str(run_dir), "--format", "json")
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return {"dir": str(run_dir), "report": json.loads(r.stdout)}


def _task_spans(run_dir: str) -> list[dict]:
    from evlog.data.run_reader import RunFolder

    return [s for signal, rows in RunFolder(run_dir).read_all() if signal == "traces" for s in rows
            if s["name"].startswith("dask.task")]


def test_the_critical_path_follows_futures_into_the_calls_that_made_them(futures_run):
    c = computation(futures_run["report"], "merge-0")
    path = c["critical_path"]
    assert [r["key"] for r in path] == ["chain-0", "chain-1", "chain-2", "chain-3", "merge-0"]
    # each submit is its own call, named by its method and prefix, then numbered in start order
    assert [r["computation"] for r in path] == ["submit chain"] + [f"submit chain #{i}" for i in range(2, 5)] + \
        ["submit merge"]
    assert all(r["compute_s"] >= 0.39 for r in path[:4])  # each slept 0.4 s
    assert [r["start"] for r in path] == sorted(r["start"] for r in path)
    assert c["critical_path_s"] >= 1.56 and 0.5 < c["critical_path_share"] <= 1.0001
    # each call of the chain: its path back to chain-0
    for i in range(4):
        assert [r["key"] for r in computation(futures_run["report"], f"chain-{i}")["critical_path"]] == \
            [f"chain-{j}" for j in range(i + 1)]


def test_a_second_life_never_stands_in_for_the_life_that_computed(futures_run):
    lives: dict = {}
    for s in _task_spans(futures_run["dir"]):
        lives.setdefault(s["attributes"]["dask.task.key"], []).append(s["attributes"]["dask.task.state"])
    seconds = [k for k, states in lives.items() if len(states) == 2]
    assert seconds, lives  # the run has second lives (released -> forgotten at the client's close)
    for k in seconds:
        c = computation(futures_run["report"], k)
        assert c["tasks"] == 1 and c["prefixes"]["chain"]["compute_s"] >= 0.39
        assert c["prefixes"]["chain"]["median_compute_s"] >= 0.39
        assert c["critical_path"][-1]["key"] == k and c["critical_path"][-1]["compute_s"] >= 0.39


def test_a_second_life_is_no_gantt_bar_and_no_task_of_its_own_in_progress(futures_run):
    from evlog.data.panels.progress import progress
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import CAT_SCHED_TASK, Store

    store = Store(None)
    RunFolder(futures_run["dir"]).load_into(store)
    spans = _task_spans(futures_run["dir"])
    assert len(spans) > 5  # chain-0 .. chain-3, merge-0, and second lives
    rows = store.gantt_rows(CAT_SCHED_TASK)  # the Gantt of a run without worker spans
    assert sorted(r[8] for r in rows) == ["chain-0", "chain-1", "chain-2", "chain-3", "merge-0"]
    assert all(r[2] - r[1] > 0.3e9 for r in rows if r[8].startswith("chain"))  # the lives that computed
    [chain] = [p for p in progress(store)["prefixes"] if p["prefix"] == "chain"]
    assert chain["states"] == {"memory": 4} and chain["total"] == 4


@pytest.mark.browser
def test_the_dashboards_report_panel_follows_futures_into_the_calls_that_made_them(futures_run):
    if not os.path.exists(CHROMIUM):
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    proc, url = start_view(futures_run["dir"], "--no-follow")
    b = Browser()
    try:
        open_page(b, url)
        b.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=60,
                  what="the report panel")
        rows = b.js("(() => { const d = Array.from(document.querySelectorAll('#report details.computation'))"
                    ".find(x => x.querySelector('summary').textContent.startsWith('submit merge')); "
                    "return Array.from(d.querySelectorAll('table.critical-path tbody tr')).map(r => "
                    "[r.cells[1].textContent, r.cells[4].textContent]); })()")
        assert [k for k, _ in rows] == ["chain-0 (submit chain)"] + \
            [f"chain-{i} (submit chain #{i + 1})" for i in range(1, 4)] + ["merge-0"]
        assert all(start.startswith(("+", "−")) for _, start in rows)
        # the Gantt outlines the whole path's executions, the chain's included
        marked = b.js("EV.gantt.data.bars.filter(b => EV.gantt.marked && EV.gantt.marked.has(b[5])).map(b => b[6])")
        assert {"chain-0", "chain-1", "chain-2", "chain-3", "merge-0"} <= set(marked)
        no_exceptions(b)
    finally:
        b.close()
        stop_view(proc)


def test_the_pool_kind_is_right_per_call(futures_run):
    fns = futures_run["report"]["pools"]["functions"]
    got = {(f["function"], f["kind"]): f["count"] for f in fns.values()}
    assert got == {("__main__.double", "thread"): 3, ("__main__.double", "process"): 4,
                   ("__main__.double", "mp.pool"): 5}, fns


def test_a_missing_run_folder_is_one_clear_message(tmp_path):
    p = evlog("report", str(tmp_path / "nope"))
    assert p.returncode == 1
    assert p.stderr.decode().strip() == f"evlog: {tmp_path / 'nope'}: no such run folder"
    p = evlog("report", cwd=str(tmp_path))  # no ./evlog-runs
    assert p.returncode == 1 and "no run folder given and none found" in p.stderr.decode()


@pytest.mark.browser
def test_the_html_page_shows_the_critical_path_offline_in_chromium(run, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    page = tmp_path / "report.html"
    p = evlog("report", run["dir"], "--format", "html", "-o", str(page))
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    text = page.read_text()
    assert "<script src" not in text and "<link" not in text and 'src="http' not in text  # one file, offline
    b = Browser()
    try:
        b.goto(page.as_uri())
        b.wait_js("document.body && document.body.dataset.charts === 'done'", what="the charts drawn")
        sel = "section[data-name^='get final '] table.critical-path tr.cp"
        keys = b.js(f"[...document.querySelectorAll({json.dumps(sel)})].map(r => r.dataset.key)")
        assert keys == ["chain-0", "chain-1", "chain-2", "chain-3", "final-0"]
        bars = b.js("[...document.querySelectorAll(\"section[data-name^='get final '] .cp-bar\")]"
                    ".map(e => [e.dataset.key, e.getBoundingClientRect().width])")
        assert [k for k, _ in bars] == keys and all(w > 0 for _, w in bars)
        assert b.js("document.querySelectorAll('.uplot canvas').length") >= 2  # uPlot ran: inlined, offline
        assert b.js("[...document.querySelectorAll('details.failure')].map(d => d.dataset.key)") == ["boom-0"]
        b.screenshot(str(tmp_path / "report.png"))
    finally:
        b.close()
    assert (tmp_path / "report.png").stat().st_size > 10_000
