"""The dashboard's Gantt, task story, task graph and report panel in headless chromium, on real Dask
runs (2 worker processes x 2 threads) under evlog-instrument, shown by `evlog view`:

- the program of tests/test_report.py (helpers.REPORT_APP), whose answers are known (a chain of 0.4 s
  tasks and a final task are the critical path, `work-17` the straggler, `boom-0` fails with ValueError);
- 23,008 tasks, most of a few µs and 8 of 0.2 s: the aggregated Gantt must show where the short ones ran;
- a process pool's 30 calls, one slow and one failing;
- 400 short tasks whose worker's estimate of the scheduler's clock offset (``Worker.scheduler_delay``,
  which Dask's heartbeat updates) changes while they run, as it does on a loaded machine: their
  spans in one thread overlap by a few ms, and each thread must still be one row.
"""
from __future__ import annotations

import json
import os
import re

import pytest
from helpers import (
    NEEDS_CHROMIUM,
    click_bar,
    click_element,
    element_center,
    no_exceptions,
    open_page,
    run_app,
    shoot,
    start_view,
    stop_view,
    wait_until,
)

pytestmark = NEEDS_CHROMIUM

SKEW_APP = r'''
import time
from dask.distributed import Client, LocalCluster, get_worker

def inc(x):
    time.sleep(0.005)
    # what a heartbeat does when it re-estimates the scheduler's clock offset while a task runs
    get_worker().scheduler_delay = 0.004 * (x % 2)
    return x + 1

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        print(sum(client.gather(client.map(inc, range(400)))))
'''

MANY_APP = r'''
import time
from dask.distributed import Client, LocalCluster

def inc(x):
    return x + 1

def slow(x):
    time.sleep(0.2)
    return x

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        print(sum(client.gather(client.map(inc, range(12000)))))
        print(sum(client.gather(client.map(slow, range(8)))))
        print(sum(client.gather(client.map(inc, range(12000, 23000)))))
'''

POOL_APP = r'''
import time
from concurrent.futures import ProcessPoolExecutor

def f(x):
    time.sleep(0.5 if x == 7 else 0.02)
    if x == 3:
        raise KeyError("three")
    return x

if __name__ == "__main__":
    with ProcessPoolExecutor(2) as ex:
        for fu in [ex.submit(f, i) for i in range(30)]:
            try:
                fu.result()
            except KeyError:
                pass
'''


@pytest.fixture(scope="module")
def report_view(report_app_run):
    proc, url = start_view(report_app_run[1], "--no-follow")
    try:
        yield url
    finally:
        stop_view(proc)


def test_a_2_worker_2_thread_run_has_4_task_rows(tmp_path, browser):
    folder = run_app(tmp_path, SKEW_APP)[1]
    proc, url = start_view(folder, "--no-follow")
    try:
        open_page(browser, url)
        assert browser.js("EV.gantt.data.total") == 400
        lanes = browser.js("EV.gantt.data.lanes")
        assert len(lanes) == 4, lanes
        assert len({(x["worker"], x["thread"]) for x in lanes}) == 4 and not any(x["sub"] for x in lanes)
        assert browser.js("document.getElementById('gantt').getAttribute('data-lanes')") == "4"
        # the overlap the rows absorb is real: some task in a thread starts before the previous one ends
        overlaps = browser.js("""(() => { const d = EV.gantt.data, last = {}; let n = 0;
            d.bars.slice().sort((a, b) => a[0] - b[0]).forEach(b => {
              if (last[b[2]] !== undefined && b[0] < last[b[2]]) n++; last[b[2]] = Math.max(last[b[2]] || 0, b[1]); });
            return n; })()""")
        assert overlaps > 0
        # a thread runs one task at a time, overlapping spans or not: saturation never exceeds the threads
        plots = {p["name"]: p for p in browser.js("EV.api('api/plots')")}
        ws, ps = plots["evlog.worker.saturation"], plots["evlog.processor.saturation"]
        assert max(v or 0 for s in ws["series"] for v in s["values"]) == 2
        assert max(v or 0 for s in ps["series"] for v in s["values"]) == 100
    finally:
        stop_view(proc)
    no_exceptions(browser)


def test_lane_labels_show_worker_and_thread_in_full(report_view, browser):
    open_page(browser, report_view)
    lanes = browser.js("EV.gantt.data.lanes")
    labels = browser.js("EV.gantt.labels()")
    assert len(labels) == len(lanes) and sum(not x.get("transfers") for x in lanes) == 4  # and transfer lanes
    for lane, label in zip(lanes, labels):
        if lane.get("transfers"):
            assert label["lines"] == [lane["worker"], "transfers: fetched in ▲ / out ▼"], label
        else:
            assert label["lines"] == [lane["worker"], lane["thread"]], label  # two lines, nothing cut
    assert len({tuple(x["lines"]) for x in labels}) == len(lanes)
    # hovering a label gives it in full
    r = browser.js("(() => { const r = document.getElementById('gantt').getBoundingClientRect(); "
                   "return {x: r.left + 30, y: r.top + EV.gantt.laneH * 1.5}; })()")
    browser.cmd("Input.dispatchMouseEvent", type="mouseMoved", x=r["x"], y=r["y"])
    assert browser.wait_js("!document.getElementById('gantt-tip').hidden && "
                           "document.getElementById('gantt-tip').textContent") == labels[1]["full"]
    # prefixes get different colours
    colours = browser.js("EV.gantt.data.prefixes.map(p => EV.prefixColour(p))")
    assert len(set(colours)) == len(colours) >= 5
    no_exceptions(browser)


def test_a_failed_tasks_story_shows_its_exception_and_stack_trace(report_view, browser):
    open_page(browser, report_view)
    click_bar(browser, "b[4] === 1")  # the erred bar: boom-0
    browser.wait_js("document.getElementById('task-key').textContent === 'boom-0'", what="boom-0's story")
    assert browser.wait_js("document.querySelector('#task-body .exc-type') && "
                           "document.querySelector('#task-body .exc-type').textContent") == "ValueError"
    assert browser.js("document.querySelector('#task-body .exc-message').textContent") == "bad input 42"
    trace = browser.js("document.querySelector('#task-body pre.stacktrace').textContent")
    assert "in boom" in trace
    no_exceptions(browser)


def test_a_spans_attributes_show_on_click(report_view, browser):
    open_page(browser, report_view)
    click_bar(browser, "EV.gantt.data.prefixes[b[3]] === 'work'")
    key = browser.wait_js("document.getElementById('task-key').textContent.startsWith('work-') && "
                          "document.getElementById('task-key').textContent", what="a work task's story")
    attrs = "Object.fromEntries(Array.from(document.querySelectorAll('#span-attrs tbody tr')).map(r => [r.cells[0].textContent, r.cells[1].textContent]))"
    got = browser.wait_js(f"Object.keys({attrs}).length && {attrs}", what="the clicked span's attributes")
    assert got["dask.task.key"] == key and got["dask.task.prefix"] == "work"
    assert "Dask-Default-Threads" in got["thread.name"] and got["span_id"]  # "0-Dask-..." on newer Dask
    # click the scheduler's span of the same task in the spans table: its attributes instead
    row = browser.js("Array.from(document.querySelectorAll('#task-body table')[0].tBodies[0].rows)"
                     ".findIndex(r => r.cells[0].textContent.startsWith('dask.task '))")
    assert row >= 0
    click_element(browser, f"#task-body table tbody tr:nth-child({row + 1})")
    got = browser.wait_js(f"{attrs}['dask.task.group'] !== undefined && {attrs}", what="the scheduler span's attributes")
    assert got["dask.task.key"] == key and got["dask.task.state"] == "memory"
    no_exceptions(browser)


def test_the_report_panel_lists_the_critical_path_and_the_gantt_marks_it(report_view, browser, tmp_path):
    open_page(browser, report_view)
    browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=60,
                    what="the report panel")
    first = browser.js("(() => { const d = Array.from(document.querySelectorAll('#report details.computation'))"
                       ".find(x => x.querySelector('summary').textContent.startsWith('get final ')); "
                       "return Array.from(d.querySelectorAll('table.critical-path tbody tr')).map(r => r.cells[1].textContent); })()")
    assert first == ["chain-0", "chain-1", "chain-2", "chain-3", "final-0"]
    # time by prefix, per task (median, sum in task-seconds): a sum of task times never reads as wall time
    cells = browser.js("Array.from(document.querySelectorAll('#report table.prefixes tbody tr')).map(r => "
                       "Array.from(r.cells).slice(2, 5).map(c => c.textContent))")
    assert cells and all(re.fullmatch(r"(-|[\d.]+ [µm]?s)( · p95 (-|[\d.]+ [µm]?s))? \(Σ (-|[\d.,]+ task-s)\)", c) for r in cells for c in r), cells
    advice = browser.js("Array.from(document.querySelectorAll('#report ul.advice li')).map(l => l.textContent)")
    assert any("straggler work-17" in a for a in advice) and any("boom-0 failed with ValueError" in a for a in advice)
    # the Gantt outlines the critical paths' executions: one bar per task on a path, of the
    # computations' critical paths (get final-0's five, map work-0's work-17, each submit's task)
    keys = browser.js("EV.report.marks.critical_keys")
    assert {"chain-0", "chain-1", "chain-2", "chain-3", "final-0", "work-17", "boom-0"} <= set(keys)
    marked = int(browser.js("document.getElementById('gantt').getAttribute('data-critical')"))
    assert marked == len(keys)
    prefixes = browser.js("EV.gantt.data.bars.filter(b => EV.gantt.marked.has(b[5])).map(b => EV.gantt.data.prefixes[b[3]])")
    assert sorted(prefixes).count("chain") == 4 and "final" in prefixes and prefixes.count("work") == 1
    # and the task graph too
    dag = browser.js("Array.from(document.querySelectorAll('#dag .node.critical')).map(n => n.getAttribute('data-key'))")
    assert set(dag) == set(keys)
    assert browser.js("document.querySelectorAll('#dag .edge.critical').length") == 4  # chain-0 -> ... -> final-0
    shoot(browser, ["#gantt-section", "#report-section"], str(tmp_path / "dashboard-report.png"))
    # the outline goes when asked
    click_element(browser, "#report-mark")
    assert browser.js("document.getElementById('gantt').getAttribute('data-critical')") == "0"
    no_exceptions(browser)


def test_stragglers_and_failures_in_the_report_open_their_stories(report_view, browser):
    open_page(browser, report_view)
    browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=60,
                    what="the report panel")
    click_element(browser, "#report table.stragglers a.task-link[data-key='work-17']")
    browser.wait_js("document.getElementById('task-key').textContent === 'work-17'", what="work-17's story")
    finishes = browser.wait_js("Array.from(document.querySelectorAll('#story tbody tr')).map(r => r.cells[2].textContent)",
                               what="work-17's transitions")
    assert "memory" in finishes
    click_element(browser, "#report table.failures a.task-link[data-key='boom-0']")
    browser.wait_js("document.getElementById('task-key').textContent === 'boom-0'", what="boom-0's story")
    assert browser.wait_js("document.querySelector('#task-body .exc-message') && "
                           "document.querySelector('#task-body .exc-message').textContent") == "bad input 42"
    no_exceptions(browser)


def test_dag_labels_show_prefix_and_short_key_and_a_tasks_edges_on_hover(report_view, browser, tmp_path):
    open_page(browser, report_view)
    labels = browser.js("Object.fromEntries(Array.from(document.querySelectorAll('#dag .node')).map(n => "
                        "[n.getAttribute('data-key'), n.querySelector('text').textContent]))")
    assert labels["work-17"] == "work 17" and labels["final-0"] == "final 0"
    assert browser.js("document.querySelector('#dag .node[data-key=\"work-17\"] tspan').getAttribute('font-weight')") == "600"
    assert browser.js("document.querySelector('#dag .node[data-key=\"work-17\"] title').textContent").startswith("work-17 on tcp://")
    assert browser.js("EV.shortKey(\"('getitem-0123456789abcdef0123456789abcdef', 3, 1)\", 'getitem')") == "(3, 1)"
    assert browser.js("EV.shortKey('inc-0123456789abcdef0123456789abcdef', 'inc')") == "…abcdef"
    # the final task's 31 dependencies (chain-3 and the 30 short tasks): drawn in full while the pointer is on it
    assert browser.js("document.querySelectorAll('#dag .edge.hot').length") == 0
    c = element_center(browser, '#dag .node[data-key="final-0"] rect')
    browser.cmd("Input.dispatchMouseEvent", type="mouseMoved", x=c["x"], y=c["y"])
    assert browser.wait_js("document.querySelectorAll('#dag .edge.hot').length") == 31
    browser.screenshot(str(tmp_path / "dag-hover.png"))
    no_exceptions(browser)


def test_the_report_api_is_evlog_reports_json(report_view):
    import urllib.request

    with urllib.request.urlopen(report_view + "api/report", timeout=60) as r:
        rep = json.loads(r.read())
    [c] = [c for c in rep["computations"] if c["key"] == "final-0"]
    assert [r["key"] for r in c["critical_path"]] == ["chain-0", "chain-1", "chain-2", "chain-3", "final-0"]
    assert {"computations", "workers", "metadata", "advice"} <= set(rep)


@pytest.fixture(scope="module")
def many_view(tmp_path_factory):
    """MANY_APP's run (23,008 executions) shown by `evlog view`, once read whole: its URL."""
    import urllib.request

    folder = run_app(tmp_path_factory.mktemp("many"), MANY_APP, timeout=480)[1]
    proc, url = start_view(folder, "--no-follow")
    try:
        def executions_read():  # `evlog view` reads the folder in the background
            with urllib.request.urlopen(url + "api/gantt", timeout=60) as r:
                return json.loads(r.read())["total"]

        wait_until(lambda: executions_read() == 23_008, 240, "the run folder read whole", interval=0.5)
        yield url
    finally:
        stop_view(proc)


def test_the_aggregated_gantt_shades_each_bin_by_its_busy_share(many_view, browser, tmp_path):
    """23,008 executions: the Gantt aggregates, a time bin per pixel column. A bin is shaded by the share of
    its time a task ran, never relative to the busiest: where tasks of a few µs ran it is pale (their
    workers were idle most of it; the tooltip still counts the tasks started), where the 0.2 s tasks ran
    it is full colour, and each lane's ink is its busy share."""
    browser.goto(many_view)
    browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", timeout=120, what="the first refresh")
    assert browser.js("document.getElementById('gantt').getAttribute('data-mode')") == "aggregated"
    lanes = browser.js("EV.gantt.data.lanes")
    assert len(lanes) == 4, lanes  # 2 workers x 2 threads, each thread one row whatever its clock offset did
    browser.wait_js("EV.gantt.data.bins === EV.gantt.columns()", what="a time bin per pixel column")
    per_prefix = browser.js("(() => { const d = EV.gantt.data, v = {};"
                            "d.main.forEach((row, l) => row.forEach((p, j) => { if (p >= 0) (v[d.prefixes[p]] = v[d.prefixes[p]] || [])"
                            ".push(d.busy[l][j]); })); Object.values(v).forEach(x => x.sort((a, b) => a - b)); return v; })()")
    assert per_prefix["inc"][len(per_prefix["inc"]) // 2] < 0.25  # mostly idle, drawn so
    assert per_prefix["slow"][-1] >= 0.9
    ink = browser.js("EV.gantt.laneInk(EV.gantt.data.t0, EV.gantt.data.t1)")
    mean = browser.js("EV.gantt.data.busy.map(row => row.reduce((a, b) => a + Math.min(b, 1), 0) / row.length)")
    assert ink == pytest.approx(mean, abs=0.02)
    # the report's critical paths (each map's last task) are outlined over the bins
    browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=120,
                    what="the report panel")
    assert len(browser.js("EV.report.computations")) == 3
    assert int(browser.js("document.getElementById('gantt').getAttribute('data-critical')")) >= 3
    shoot(browser, ["#gantt-section"], str(tmp_path / "aggregated.png"))
    no_exceptions(browser)


def test_saturation_of_short_tasks_agrees_with_the_reports_utilisation(many_view, browser):
    """A step per task would paint a solid band from 0 to 1 where the workers were mostly idle: the plot
    is the mean of busy threads per time bucket, whose mean over the run is the report's utilisation."""
    import urllib.request

    with urllib.request.urlopen(many_view + "api/report", timeout=120) as r:
        rep = json.loads(r.read())
    with urllib.request.urlopen(many_view + "api/plots", timeout=120) as r:
        plots = {p["name"]: p for p in json.loads(r.read())}
    ps = plots["evlog.processor.saturation"]
    assert ps["downsampled"] and "mean of threads busy" in ps["note"]
    windows = sorted((c["start"], c["end"]) for c in rep["computations"])
    span = sum(e - s for s, e in windows)  # the maps ran one after the other
    x = ps["x"]
    for s in ps["series"]:
        assert max(v for v in s["values"] if v is not None) <= 100
        mean = sum(v * (b - a) for v, a, b in zip(s["values"], x, x[1:]) if v) / 100 / span
        [w] = [w for w in rep["workers"] if w["address"] == s["label"]]
        assert mean == pytest.approx(w["utilisation"], abs=0.02 + 0.1 * w["utilisation"]), (s["label"], mean, w)
        values = sorted(v for v in s["values"] if v is not None)
        assert values[len(values) // 2] < 50  # mostly idle: no solid band
    browser.goto(many_view)
    browser.wait_js("Object.keys(EV.plotWorkers()).length >= 2", timeout=120, what="the saturation plots")
    assert len(browser.js("EV.plotWorkers()")["evlog.processor.saturation"]) == 2
    no_exceptions(browser)


def test_a_pool_runs_report_links_its_straggler_and_failure_to_their_stories(tmp_path, browser):
    folder = run_app(tmp_path, POOL_APP)[1]
    proc, url = start_view(folder, "--no-follow")
    try:
        open_page(browser, url)
        browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=60,
                        what="the report panel")
        links = browser.js("Array.from(document.querySelectorAll('#report a.task-link')).map(a => a.textContent)")
        assert links == ["__main__.f", "__main__.f"]  # the straggler, the failure
        click_element(browser, "#report tr.err a.task-link")
        assert browser.wait_js("document.querySelector('#task-body .exc-type') && "
                               "document.querySelector('#task-body .exc-type').textContent") == "KeyError"
        assert "'three'" in browser.js("document.querySelector('#task-body .exc-message').textContent")
        assert "in f" in browser.js("document.querySelector('#task-body pre.stacktrace').textContent")
    finally:
        stop_view(proc)
    no_exceptions(browser)


# -------------------------------------------------------------------------------------------------
# a run whose workers were about 10% busy: the Gantt's ink is the busy fraction at every zoom

IDLE_APP = r'''
import time
import dask
from dask.distributed import Client, LocalCluster

def tick(i, prev):
    time.sleep(0.045)
    return i

def work(t, side):
    time.sleep(0.005)
    return t

if __name__ == "__main__":
    # worker c runs a chain of 45 ms ticks; after each, workers a and b each run a 5 ms task that needs
    # it (fetched from c): a and b are about 10% busy, c about 80%, in one client call
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(3)
        a, b, c = sorted(client.scheduler_info()["workers"])
        prev, outs = None, []
        for i in range(200):
            with dask.annotate(workers=[c], allow_other_workers=False):
                prev = dask.delayed(tick)(i, prev, dask_key_name=f"tick-{i}")
            for side, w in (("a", a), ("b", b)):
                with dask.annotate(workers=[w], allow_other_workers=False):
                    outs.append(dask.delayed(work)(prev, side, dask_key_name=f"work-{side}-{i}"))
        total = client.compute(dask.delayed(sum)(outs, dask_key_name="total"), optimize_graph=False).result()
        assert total == 2 * sum(range(200)), total
        print(a, b, c)
'''


@pytest.fixture(scope="module")
def idle_run(tmp_path_factory):
    """IDLE_APP's run folder and `evlog view` of it: (folder, URL)."""
    folder = run_app(tmp_path_factory.mktemp("idle"), IDLE_APP)[1]
    proc, url = start_view(folder, "--no-follow")
    try:
        yield folder, url
    finally:
        stop_view(proc)


def _ink_at(browser, t0: float, t1: float, aggregated: bool = False) -> tuple[str, list]:
    """The Gantt zoomed to [t0, t1] (as drawing bars, or time bins: ``aggregated``): its mode and each
    lane's mean ink over [t0, t1], read back from the canvas's pixels."""
    if aggregated:  # what a run of more spans than MAX_BARS gets: time bins, one per pixel column
        return browser.js(f"EV.api('api/gantt', {{max_bars: 0, bins: EV.gantt.columns(), t0: {t0}, t1: {t1}}})"
                          f".then(g => {{ EV.gantt.set(g); return [g.mode, EV.gantt.laneInk({t0}, {t1})]; }})")
    browser.js(f"EV.zoomTo({t0}, {t1})")
    browser.wait_js(f"Math.abs(EV.gantt.data.t0 - {t0}) < 1e-6 && Math.abs(EV.gantt.data.t1 - {t1}) < 1e-6",
                    what="the zoom")
    return browser.js("EV.gantt.data.mode"), browser.js(f"EV.gantt.laneInk({t0}, {t1})")


def _busy_in(spans: list[dict], worker: str, t0: float, t1: float) -> float:
    """The share of [t0, t1] (seconds) in which ``worker`` ran a task: its dask.execute spans in the run folder."""
    iv = sorted((max(s["start"] / 1e9, t0), min(s["end"] / 1e9, t1)) for s in spans
                if s["name"].startswith("dask.execute") and s["attributes"].get("dask.worker.address") == worker)
    busy, cur = 0.0, t0
    for a, b in iv:
        a = max(a, cur)
        if b > a:
            busy, cur = busy + b - a, b
    return busy / (t1 - t0)


def test_a_lanes_ink_is_its_busy_fraction_at_every_zoom(idle_run, browser, tmp_path):
    """The mean shade of each worker's lane against the report's utilisation (busy time over the
    computation's window), drawn as bars (most narrower than a pixel) and as time bins; and, zoomed to
    the middle fifth and to one second (where every task is several pixels wide), against the busy
    share of that window counted from the run folder's execution spans."""
    from helpers import read_run_folder

    folder, url = idle_run
    spans = read_run_folder(folder)["spans"]
    open_page(browser, url)
    browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=120,
                    what="the report panel")
    click_element(browser, "#report-mark")  # no critical-path outline: only the lanes' own ink
    assert browser.wait_js("document.getElementById('gantt').getAttribute('data-critical') === '0'")
    [c] = browser.js("EV.report.computations")
    busy = {w["address"]: w["utilisation"] for w in browser.js("EV.report.workers")}
    lanes = browser.js("EV.gantt.data.lanes")
    threads = [i for i, lane in enumerate(lanes) if not lane.get("transfers")]
    assert len(threads) == 3 and {lanes[i]["worker"] for i in threads} == set(busy)
    assert sum(0.05 <= u <= 0.2 for u in busy.values()) == 2, busy  # the run was what the test is about
    for aggregated, mode in ((False, "bars"), (True, "aggregated")):
        assert _ink_at(browser, c["start"], c["end"], aggregated)[0] == mode
        ink = browser.js(f"EV.gantt.laneInk({c['start']}, {c['end']})")
        for i in threads:
            w = lanes[i]["worker"]
            assert abs(ink[i] - busy[w]) <= 0.1, (mode, w, ink[i], busy)
            assert abs(ink[i] - _busy_in(spans, w, c["start"], c["end"])) <= 0.02, (mode, w, ink[i])
    wall = c["end"] - c["start"]
    for t0, t1 in ((c["start"] + 0.4 * wall, c["start"] + 0.6 * wall), (c["start"] + 0.5 * wall, c["start"] + 0.5 * wall + 1)):
        mode, ink = _ink_at(browser, t0, t1)
        assert mode == "bars"
        for i in threads:
            w = lanes[i]["worker"]
            assert abs(ink[i] - _busy_in(spans, w, t0, t1)) <= 0.1, (t1 - t0, w, ink[i])
    shoot(browser, ["#gantt-section"], str(tmp_path / "idle.png"))
    no_exceptions(browser)


def test_a_band_above_the_lanes_moves_them_down_and_clicks_follow(idle_run, browser):
    """gantt.addBand: a layer drawn above the lanes on the Gantt's time axis (what Dask's spans or fine
    performance metrics can be drawn in); the lanes, their labels and the bars' hit tests move with it."""
    _folder, url = idle_run
    open_page(browser, url)
    before = browser.js("EV.gantt.laneY(0)")
    browser.js("EV.gantt.addBand({id: 'test', height: () => 40, draw: (g, G, top, h) => { window.bandDrawn = [top, h, G.plotLeft, "
               "G.plotWidth]; g.fillStyle = '#000'; g.fillRect(G.x(G.data.t0), top, 5, h); }})")
    assert browser.js("window.bandDrawn") == [0, 40, browser.js("EV.gantt.plotLeft"), browser.js("EV.gantt.plotWidth")]
    assert browser.js("EV.gantt.laneY(0)") == before + 40
    click_bar(browser, "EV.gantt.data.prefixes[b[3]] === 'tick'")
    browser.wait_js("document.getElementById('task-key').textContent.startsWith('tick-')", what="a tick's story")
    browser.js("EV.gantt.addBand({id: 'test', height: () => 0, draw: () => {}})")
    assert browser.js("EV.gantt.laneY(0)") == before
    no_exceptions(browser)


def test_transfers_have_a_lane_per_worker_coloured_by_direction(idle_run, browser):
    from helpers import read_run_folder

    folder, url = idle_run
    spans = read_run_folder(folder)["spans"]
    moved = [s for s in spans if s["name"] == "dask.transfer"]
    assert len(moved) >= 300  # a and b fetch most ticks from c, and the total's worker the other's results
    open_page(browser, url)
    g = browser.js("EV.gantt.data")
    assert g["transfer_total"] == len(moved)
    lanes = g["lanes"]
    transfer_lane = {lane["worker"]: i for i, lane in enumerate(lanes) if lane.get("transfers")}
    assert set(transfer_lane) == {lane["worker"] for lane in lanes}  # every worker fetched or was fetched from
    want = {}  # (worker, 0: fetched by it | 1: fetched from it) -> transfers, counted in the run folder
    for s in moved:
        a = s["attributes"]
        for key in ((a["dask.worker.address"], 0), (a["dask.transfer.source"], 1)):
            want[key] = want.get(key, 0) + 1
    got = {}
    for _start, _end, lane, direction, *_rest in g["transfers"]:
        got[(lanes[lane]["worker"], direction)] = got.get((lanes[lane]["worker"], direction), 0) + 1
    assert got == want
    # drawn: data fetched in, blue in the upper half of the lane; data fetched from it, orange in the lower
    halves = browser.js("""(() => { const G = EV.gantt, g = G.canvas.getContext('2d'), d = G.data, out = {};
        d.lanes.forEach((lane, l) => { if (!lane.transfers) return;
          const y = G.laneY(l) + 1, h = Math.floor((G.laneH - 2) / 2), ink = [];
          for (const top of [y, y + h]) { const px = g.getImageData(G.plotLeft, top, G.plotWidth, h).data; let blue = 0, orange = 0;
            for (let i = 0; i < px.length; i += 4) { if (px[i + 2] > px[i] + 30) blue++; if (px[i] > px[i + 2] + 30) orange++; }
            ink.push([blue, orange]); }
          out[lane.worker] = ink; });
        return out; })()""")
    assert set(halves) == set(transfer_lane)
    for w, ((top_blue, top_orange), (low_blue, low_orange)) in halves.items():
        assert (top_blue > 0) == ((w, 0) in want) and (low_orange > 0) == ((w, 1) in want), halves
        assert top_orange == 0 and low_blue == 0, halves
    # a transfer's hover names where its data came from
    k = browser.js("EV.gantt.data.transfers.findIndex(t => t[3] === 0 && t[1] - t[0] > 0.001)")
    c_xy = browser.js(f"""(() => {{ const G = EV.gantt, t = G.data.transfers[{k}], r = G.canvas.getBoundingClientRect();
        G.canvas.scrollIntoView({{block: 'center'}});
        return new Promise(ok => requestAnimationFrame(() => requestAnimationFrame(() => {{ const r = G.canvas.getBoundingClientRect();
          ok({{x: r.left + (G.x(t[0]) + Math.max(G.x(t[1]), G.x(t[0]) + 1)) / 2, y: r.top + G.laneY(t[2]) + 3}}); }}))); }})()""")
    browser.cmd("Input.dispatchMouseEvent", type="mouseMoved", x=c_xy["x"], y=c_xy["y"])
    tip = browser.wait_js("!document.getElementById('gantt-tip').hidden && document.getElementById('gantt-tip').textContent",
                          what="the transfer's hover")
    assert tip.startswith("fetched from " + browser.js(f"EV.gantt.data.transfers[{k}][6]") + " · "), tip
    no_exceptions(browser)


def test_the_task_graph_counts_the_tasks_run_not_the_spans(idle_run):
    """A key whose result was let go later has a second dask.task span: the graph counts it once. Its
    counts, per task and per prefix, sum to the executions in the run folder."""
    import urllib.request

    from helpers import read_run_folder

    from evlog.data.panels.dag import task_graph
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store

    folder, url = idle_run
    spans = read_run_folder(folder)["spans"]
    executions = [s for s in spans if s["name"].startswith("dask.execute")]
    lives = [s for s in spans if s["name"].startswith("dask.task")]
    assert len(executions) == 601 and len(lives) > len(executions)  # some keys have a second life
    with urllib.request.urlopen(url + "api/dag", timeout=60) as r:
        dag = json.loads(r.read())
    assert dag["mode"] == "tasks" and len(dag["nodes"]) == len(executions)
    store = Store(None)
    RunFolder(folder).load_into(store)
    by_prefix = task_graph(store, max_nodes=10)  # past 10 tasks: a node per prefix
    assert by_prefix["mode"] == "prefixes"
    counts = {n["prefix"]: n["count"] for n in by_prefix["nodes"]}
    assert counts == {"tick": 200, "work-a": 200, "work-b": 200, "total": 1}, counts
    assert sum(counts.values()) == len(executions) and f"{len(executions):,} tasks" in by_prefix["note"]


def test_machine_figures_once_per_host_and_no_processor_saturation_for_one_thread(idle_run):
    import urllib.request

    from helpers import read_run_folder

    folder, url = idle_run
    with urllib.request.urlopen(url + "api/plots", timeout=60) as r:
        plots = {p["name"]: p for p in json.loads(r.read())}
    # each worker has one thread: processor saturation would be worker saturation again
    assert "evlog.processor.saturation" not in plots
    assert all(s["threads"] == 1 for s in plots["evlog.worker.saturation"]["series"])
    metrics = read_run_folder(folder)["metrics"]
    for name in ("system.cpu.load_average.1m", "evlog.memory.free_fraction"):
        sampled_by = {m["resource"].get("process.pid") for m in metrics if m["name"] == name}
        assert len(sampled_by) >= 4  # the client, the workers, the exporter ...
        [series] = plots[name]["series"]  # ... one line: the machine's
        assert series["label"] == metrics[0]["resource"]["host.name"]
        points = sum(v is not None for v in series["values"])
        times = {m["time"] for m in metrics if m["name"] == name}
        assert points == len({t / 1e9 for t in times}) or plots[name]["downsampled"]


# -------------------------------------------------------------------------------------------------
# a folder still being read; a run cut short: the report of whole computations only


def _get(url: str):
    import urllib.request

    with urllib.request.urlopen(url, timeout=120) as r:
        return json.loads(r.read())


def test_a_folder_being_read_says_how_far_and_the_report_waits_for_the_whole(tmp_path, browser):
    """An 80 MB run folder (compressed: the reader's work is the same) takes seconds to read: the page
    says how much of it is read, of how much, and the report panel waits; once read, both say so."""
    from helpers import gzip_run_folder
    from synthetic_run import make_run
    make_run(str(tmp_path / "plain"), n_tasks=40_000, batch=200, gauge_ms=200)
    folder = str(tmp_path / "run")
    total = sum(len(b) for m in gzip_run_folder(str(tmp_path / "plain"), folder, per=3).values() for b in m)
    proc, url = start_view(folder)  # following the folder, as for a live run
    try:
        loading = _get(url + "api/overview")["receiver"]["loading"]
        assert loading["state"] == "loading" and loading["total"] == total and loading["read"] < total
        rep = _get(url + "api/report")
        assert rep["loading"]["state"] == "loading" and rep["partial"] and not rep["computations"]
        browser.goto(url)
        text = browser.wait_js("document.body.getAttribute('data-loading') === 'loading' && "
                               "document.getElementById('loading').textContent", what="the loading banner")
        assert re.fullmatch(r"Reading the run folder: [\d.]+ k?M?B of [\d.]+ MB read \(\d+%\), [\d,]+ rows; the panels "
                            r"show what is read so far\.", text), text
        assert "made once the run folder is read" in browser.wait_js(
            "document.querySelector('#report p.partial') && document.querySelector('#report p.partial').textContent")
        browser.wait_js("document.body.getAttribute('data-loading') === 'live'", timeout=300, what="the folder read")
        assert browser.js("document.getElementById('loading').hidden")
        browser.wait_js("EV.report && !EV.report.loading && !EV.report.empty", timeout=120, what="the report")
        assert not browser.js("EV.report.partial") and browser.js("EV.report.computations.length") >= 1
        assert browser.wait_js("EV.gantt.data && EV.gantt.data.total") == 40_000
        loading = _get(url + "api/overview")["receiver"]["loading"]
        assert loading["read"] == loading["total"] == total and loading["pending_rows"] == 0
    finally:
        stop_view(proc)
    no_exceptions(browser)


CALLS_APP = r'''
import time
import dask
from dask.distributed import Client, LocalCluster

def step(x, *deps):
    time.sleep(0.002)
    return x

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for call in range(6):  # six client calls, one after the other, each a small tree
            leaves = [dask.delayed(step)(i, dask_key_name=f"leaf{call}-{i}") for i in range(40)]
            mids = [dask.delayed(step)(i, *leaves[i::4], dask_key_name=f"mid{call}-{i}") for i in range(4)]
            dask.delayed(step)(call, *mids, dask_key_name=f"top{call}").compute()
            time.sleep(0.3)  # the program's pause between client calls
'''


def test_the_report_panel_of_a_run_cut_short_analyses_whole_computations_only(tmp_path):
    """The traces of a run of six client calls, cut at nine points (as a run still going, or a folder
    read in part, is): the panel's computations are the whole ones, each with all its tasks, and the
    panel says how many it left out; a cut never shows a start of 0 (the epoch)."""
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store
    from evlog.viewer.report_panel import dashboard_report

    full = run_app(tmp_path, CALLS_APP)[1]
    whole = dashboard_report(_load(full), "full")
    assert not whole["partial"] and whole["left_out"] == {}
    tasks = {c["name"]: c["tasks"] for c in whole["computations"]}
    assert len(tasks) == 6 and set(tasks.values()) == {45}
    from helpers import run_files, span_lines

    [path] = run_files(full, "traces")
    name = os.path.basename(path)
    lines = span_lines(path)  # cut at spans (helpers.span_lines)
    seen_partial = False
    for share in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        cut = tmp_path / f"cut{share}"
        cut.mkdir()
        for n in os.listdir(full):
            if n != name:
                os.link(os.path.join(full, n), cut / n)
        (cut / name.removesuffix(".gz")).write_bytes(b"".join(lines[:int(len(lines) * share)]))
        store = Store(None)
        RunFolder(str(cut)).load_into(store)
        rep = dashboard_report(store, "cut")
        left = sum(rep["left_out"].values())
        assert rep["partial"] == bool(left)
        seen_partial = seen_partial or rep["partial"]
        for c in rep["computations"]:
            assert tasks.get(c["name"]) == c["tasks"] == 45, (share, c["name"])  # whole, as in the full run
            assert c["start"] and c["wall_s"] is not None and c["wall_s"] < 600, c
        assert len(rep["computations"]) + left <= 6
    assert seen_partial


def _load(folder: str):
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store

    store = Store(None)
    RunFolder(folder).load_into(store)
    return store
