"""The dashboard's Gantt, task story, task graph and report panel in headless chromium, on real Dask
runs (2 worker processes x 2 threads) under evlog-instrument, shown by `evlog view`:

- the program of tests/test_report.py, whose answers are known (a chain of 0.4 s tasks and a final
  task are the critical path, `work-17` the straggler, `boom-0` fails with ValueError);
- 23,008 tasks, most of a few µs and 8 of 0.2 s: the aggregated Gantt must show where the short ones ran;
- a process pool's 30 calls, one slow and one failing;
- 400 short tasks whose worker's estimate of the scheduler's clock offset (``Worker.scheduler_delay``,
  which Dask's heartbeat updates) changes while they run, as it does on a loaded machine: their
  spans in one thread overlap by a few ms, and each thread must still be one row.
"""
from __future__ import annotations

import contextlib
import json
import os

import pytest

import test_dashboard_browser
from test_dashboard_browser import CHROMIUM, click_element

browser = test_dashboard_browser.browser  # the fixture: a headless chromium page per test

pytestmark = [
    pytest.mark.browser, pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)"),
]

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


def _run(tmp, app: str, timeout: float = 240, **env: str) -> str:
    from helpers import PYTHON, evlog_env, run_instrumented

    (tmp / "app.py").write_text(app)
    run_dir = tmp / "run"
    p = run_instrumented([PYTHON, str(tmp / "app.py")], env=evlog_env(EVLOG_RUN_DIR=str(run_dir), **env), cwd=str(tmp),
                         timeout=timeout)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    return str(run_dir)


@contextlib.contextmanager
def viewed(tmp, app: str, **env: str):
    """The run folder of ``app`` run under evlog-instrument (``env``: settings), shown by `evlog view`: its URL."""
    from test_cli import _start_view, _stop

    proc, url = _start_view(_run(tmp, app, **env), "--no-follow")
    try:
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def report_view(tmp_path_factory):
    from test_report import APP

    with viewed(tmp_path_factory.mktemp("gantt-report"), APP) as url:
        yield url


def open_page(browser, url: str) -> None:
    browser.goto(url)
    browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", what="the first refresh")
    browser.wait_js("+document.getElementById('gantt').getAttribute('data-bars') > 0", what="Gantt bars")


def click_bar(browser, where: str) -> None:
    """Click the middle of the first Gantt bar for which the JS expression ``where`` (of b) holds."""
    i = browser.js(f"EV.gantt.data.bars.findIndex(b => {where})")
    assert i >= 0, where
    # after the scroll, two frames drawn: a mouse event sent at once can be hit-tested at the old position
    c = browser.js(f"document.getElementById('gantt').scrollIntoView({{block: 'center'}}); new Promise(ok => "
                   f"requestAnimationFrame(() => requestAnimationFrame(() => ok(EV.gantt.barCenter({i})))))")
    browser.click(c["x"], c["y"])


def shoot(browser, selectors: list[str], path: str) -> None:
    """A screenshot of the page from the top of the first element to the bottom of the last."""
    import base64

    r = browser.js(f"""(() => {{ const a = document.querySelector({json.dumps(selectors[0])}).getBoundingClientRect(),
        b = document.querySelector({json.dumps(selectors[-1])}).getBoundingClientRect();
        return {{x: 0, y: a.top + scrollY - 6, width: document.documentElement.clientWidth,
                 height: b.bottom - a.top + 12, scale: 1}}; }})()""")
    data = browser.cmd("Page.captureScreenshot", format="png", clip=r, captureBeyondViewport=True)["data"]
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
    docs = os.environ.get("EVLOG_DOCS_SCREENSHOTS")  # docs/dashboard.md's pictures, taken again when set
    if docs and os.path.basename(path).startswith("dashboard-"):
        import shutil

        shutil.copy(path, os.path.join(docs, os.path.basename(path)))


def no_exceptions(browser) -> None:
    assert not [m for m in browser.console if m.startswith("EXCEPTION")], browser.console


def test_a_2_worker_2_thread_run_has_4_task_rows(tmp_path, browser):
    from test_cli import _start_view, _stop

    folder = _run(tmp_path, SKEW_APP)
    proc, url = _start_view(folder, "--no-follow")
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
        _stop(proc)
    no_exceptions(browser)


def test_lane_labels_show_worker_and_thread_in_full(report_view, browser):
    open_page(browser, report_view)
    lanes = browser.js("EV.gantt.data.lanes")
    labels = browser.js("EV.gantt.labels()")
    assert len(labels) == len(lanes) == 4
    for lane, label in zip(lanes, labels):
        assert label["lines"] == [lane["worker"], lane["thread"]], label  # two lines, nothing cut
    assert len({tuple(x["lines"]) for x in labels}) == 4
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
    c = test_dashboard_browser.element_center(browser, '#dag .node[data-key="final-0"] rect')
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
    import time
    import urllib.request

    from test_cli import _start_view, _stop

    folder = _run(tmp_path_factory.mktemp("many"), MANY_APP, timeout=480)
    proc, url = _start_view(folder, "--no-follow")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # `evlog view` reads the folder in the background
            with urllib.request.urlopen(url + "api/gantt", timeout=60) as r:
                if json.loads(r.read())["total"] == 23_008:
                    break
            time.sleep(0.5)
        else:
            raise AssertionError("the run folder was not read within 240 s")
        yield url
    finally:
        _stop(proc)


def test_the_aggregated_gantt_shows_where_tiny_tasks_ran(many_view, browser, tmp_path):
    """23,008 executions: the Gantt aggregates. Bins where µs tasks ran are drawn dark (by the tasks
    started in them), not as a pale wash beside the bins of the 0.2 s tasks."""
    browser.goto(many_view)
    browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", timeout=120, what="the first refresh")
    assert browser.js("document.getElementById('gantt').getAttribute('data-mode')") == "aggregated"
    lanes = browser.js("EV.gantt.data.lanes")
    assert len(lanes) == 4, lanes  # 2 workers x 2 threads (6 were seen once, under load: which, if again?)
    # the short tasks' bins hold almost no busy time, yet most drawn bins are dark
    busy = browser.js("(() => { const d = EV.gantt.data, m = d.prefixes.indexOf('inc'), v = [];"
                      "d.main.forEach((row, l) => row.forEach((p, j) => { if (p === m) v.push(d.busy[l][j]); }));"
                      "v.sort((a, b) => a - b); return v[v.length >> 1]; })()")
    assert busy < 0.25
    strong = float(browser.js("document.getElementById('gantt').getAttribute('data-strong-bins')"))
    assert strong >= 0.5, strong
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
    from test_cli import _start_view, _stop

    folder = _run(tmp_path, POOL_APP)
    proc, url = _start_view(folder, "--no-follow")
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
        _stop(proc)
    no_exceptions(browser)
