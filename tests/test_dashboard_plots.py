"""The dashboard's plots and clock in headless chromium, on a real Dask run (2 worker processes x 2
threads, tasks of 0.3 s that overlap, their results held until the scheduler has sampled its workers'
memory) shown by `evlog view`: worker and processor saturation are step functions from the task spans
(above 0 while tasks run, reaching the busy threads, never more), one small chart per worker; the plots
share the Gantt's time range and zoom, which opens on the tasks' range with a control for the whole run;
bytes held is a step function of the results in memory; memory per worker is Dask's own managed,
unmanaged and spilled figures; axis labels are readable wall-clock times at any zoom, and one clock (UTC
or local) serves the page, the report included."""
from __future__ import annotations

import re

import pytest
from helpers import NEEDS_CHROMIUM, click_element, no_exceptions, open_page, viewed

pytestmark = NEEDS_CHROMIUM

APP = r'''
import time
from dask.distributed import Client, LocalCluster
from opentelemetry import metrics

def nap(x):
    time.sleep(0.3)
    return b"x" * (100_000 * (x + 1))

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2)
        futures = client.map(nap, range(16))
        print(sum(map(len, client.gather(futures))))
        metrics.get_meter_provider().force_flush()  # a sample of the workers' memory while the results are held
'''


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    with viewed(tmp_path_factory.mktemp("plots"), APP) as url:
        yield url


def _open(browser, url: str) -> None:
    open_page(browser, url)
    browser.wait_js("Object.keys(EV.plotRanges()).length >= 2", what="the plots")


def test_saturation_is_exact_from_the_task_spans(view, browser):
    _open(browser, view)
    plots = {p["name"]: p for p in browser.js("EV.api('api/plots')")}
    bars = browser.js("EV.gantt.data.bars")  # [start, end, lane, prefix, error, row id]
    lanes = browser.js("EV.gantt.data.lanes")
    assert len(bars) == 16 and len(lanes) == 4
    ws = plots["evlog.worker.saturation"]
    assert ws["steps"] and len(ws["series"]) == 2 and all(s["threads"] == 2 for s in ws["series"])
    assert max(max(v or 0 for v in s["values"]) for s in ws["series"]) == 2  # both threads of a worker busy
    # at the middle of every task, its worker's saturation is above 0
    for b in bars:
        mid = (b[0] + b[1]) / 2
        worker = lanes[b[2]]["worker"]
        [series] = [s for s in ws["series"] if s["label"] == worker]
        i = max(i for i, x in enumerate(ws["x"]) if x <= mid)
        assert series["values"][i] >= 1, (worker, mid)
    ps = plots["evlog.processor.saturation"]
    assert max(max(v or 0 for v in s["values"]) for s in ps["series"]) == 100.0
    assert ps["x"] == ws["x"] and len(ws["x"]) <= 2 * 16  # a point per start and end, no sampling
    # one small chart per worker, each on the y scale of its threads: no worker's line hides another's
    workers = sorted({x["worker"] for x in lanes})
    assert browser.js("EV.plotWorkers()") == {"evlog.worker.saturation": workers, "evlog.processor.saturation": workers,
                                              "dask.worker.memory": workers}
    assert browser.js("document.querySelectorAll('[data-plot=\"evlog.worker.saturation\"] .worker-plot .uplot').length") == 2


def test_bytes_held_steps_with_every_result_stored_and_released(view, browser):
    from dask.sizeof import sizeof

    _open(browser, view)
    plots = {p["name"]: p for p in browser.js("EV.api('api/plots')")}
    held = plots["evlog.bytes.allocated"]
    assert held["title"] == "Bytes held" and held["steps"] and len(held["series"]) == 2
    every = sum(sizeof(b"x" * (100_000 * (x + 1))) for x in range(16))
    totals = [sum(s["values"][i] or 0 for s in held["series"]) for i in range(len(held["x"]))]
    assert max(totals) == every  # all 16 results held at once, before the client let go of them
    assert all(s["values"][-1] == 0 for s in held["series"])  # then every one released
    # it rises with the task ends: at the end of each task, its worker holds at least its result
    bars = browser.js("EV.gantt.data.bars")
    first = min(b[1] for b in bars)
    before = [t for x, t in zip(held["x"], totals) if x < first - 0.02]
    after = max(i for i, x in enumerate(held["x"]) if x <= first + 0.05)
    assert not any(before) and 0 < totals[after] < every
    assert "Bytes held" in browser.js("document.querySelector('[data-plot=\"evlog.bytes.allocated\"]').textContent")


def test_machine_plots_have_a_sample_at_the_runs_start_and_end(view, browser):
    _open(browser, view)
    plots = {p["name"]: p for p in browser.js("EV.api('api/plots')")}
    bars = browser.js("EV.gantt.data.bars")
    # the Gantt opens on the tasks' range (cluster start-up left out), a little room either side ...
    t0, t1 = browser.js("[EV.gantt.data.t0, EV.gantt.data.t1]")
    first, last = min(b[0] for b in bars), max(b[1] for b in bars)
    assert t0 < first and t1 > last and (first - t0) + (t1 - last) < 0.1 * (last - first)
    assert browser.js("document.getElementById('range-tasks').classList.contains('on')")
    # ... and "whole run" shows the run from its start sample to its end sample
    click_element(browser, "#range-run")
    r0, r1 = browser.wait_js("EV.gantt.data.whole && [EV.gantt.data.t0, EV.gantt.data.t1]", what="the whole run")
    assert r0 < t0 and r1 > t1 and browser.js("document.getElementById('range-run').classList.contains('on')")
    for name in ("system.cpu.load_average.1m", "evlog.memory.free_fraction"):
        p = plots[name]
        [host] = p["series"]  # the machine's figure, once: the exporter's start and end samples among its own
        xs = [x for x, v in zip(p["x"], host["values"]) if v is not None]
        assert len(xs) >= 3, xs
        assert xs[0] < min(b[0] for b in bars) and xs[-1] > max(b[1] for b in bars)  # before and after the tasks
        assert (r0, r1) == pytest.approx((xs[0], xs[-1]), abs=0.01)  # "whole run" covers the run
    mem = plots["evlog.memory.free_fraction"]
    assert all(0 < v <= 1 for s in mem["series"] for v in s["values"] if v is not None)
    click_element(browser, "#range-tasks")
    assert browser.wait_js("!EV.gantt.data.whole && [EV.gantt.data.t0, EV.gantt.data.t1]") == pytest.approx([t0, t1])


def test_plots_share_the_gantts_time_range_and_zoom(view, browser):
    _open(browser, view)
    t0, t1 = browser.js("[EV.gantt.data.t0, EV.gantt.data.t1]")
    ranges = browser.js("EV.plotRanges()")
    assert ranges["evlog.worker.saturation"] == pytest.approx([t0, t1])
    assert all(r == pytest.approx([t0, t1]) for r in ranges.values()), ranges
    # a drag across a plot zooms the Gantt and every plot to it
    box = browser.js("""(() => { const e = document.querySelector('[data-plot="evlog.worker.saturation"] .u-over');
        e.scrollIntoView({block: 'center'});  // mouse events go to the viewport: the plot must be in it
        return new Promise(ok => requestAnimationFrame(() => requestAnimationFrame(() => { const o = e.getBoundingClientRect();
          ok({x: o.left, y: o.top, w: o.width, h: o.height}); }))); })()""")
    y = box["y"] + box["h"] / 2
    browser.cmd("Input.dispatchMouseEvent", type="mouseMoved", x=box["x"] + box["w"] * 0.25, y=y)
    browser.cmd("Input.dispatchMouseEvent", type="mousePressed", x=box["x"] + box["w"] * 0.25, y=y, button="left", clickCount=1)
    browser.cmd("Input.dispatchMouseEvent", type="mouseMoved", x=box["x"] + box["w"] * 0.5, y=y, button="left")
    browser.cmd("Input.dispatchMouseEvent", type="mouseReleased", x=box["x"] + box["w"] * 0.5, y=y, button="left", clickCount=1)
    z0, z1 = browser.wait_js("EV.gantt.data.t1 - EV.gantt.data.t0 < 0.6 * (%r) && [EV.gantt.data.t0, EV.gantt.data.t1]"
                             % (t1 - t0), what="the Gantt zoomed by the drag")
    assert t0 < z0 < z1 < t1
    assert z0 == pytest.approx(t0 + 0.25 * (t1 - t0), abs=0.05 * (t1 - t0))
    browser.wait_js("Object.values(EV.plotRanges()).every(r => Math.abs(r[0] - %r) < 1e-6 && Math.abs(r[1] - %r) < 1e-6)"
                    % (z0, z1), what="the plots zoomed with the Gantt")
    assert not browser.js("document.querySelector('.range-control .on')")  # a zoom: neither range
    # a zoom under 2 s (here 50 ms) keeps wall-clock labels, at round instants
    browser.js(f"EV.zoomTo({z0}, {z0 + 0.05})")
    ticks = browser.wait_js("EV.gantt.data.t1 - EV.gantt.data.t0 < 0.06 && EV.gantt.ticks()", what="the 50 ms zoom")
    assert len(ticks) >= 2 and all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{2,3}", label) for _, label in ticks), ticks
    step = min((0.005, 0.01, 0.02), key=lambda x: abs(x - (ticks[1][0] - ticks[0][0])))
    assert ticks[1][0] - ticks[0][0] == pytest.approx(step, abs=1e-6)
    assert all(abs(t / step - round(t / step)) < 1e-3 for t, _ in ticks)  # round instants of the clock


@pytest.fixture
def kolkata(monkeypatch):
    """The browser started next runs in UTC+05:30, so its local time differs from UTC."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")


def test_one_clock_labelled_and_switchable_and_readable_axis_labels(view, kolkata, browser):
    _open(browser, view)
    assert browser.js("document.getElementById('clock').textContent") == "UTC"
    assert browser.js("EV.clock(0, true)") == "1970-01-01 00:00:00.000"
    # values on the y axes in units, never cut digits
    assert browser.js("EV.short(12345678, 'bytes')") == "12.3 MB"
    assert browser.js("EV.short(2, 'running tasks')") == "2"
    labels = browser.js("""Array.from(document.querySelectorAll('[data-plot] .u-axis')).map(a => a.textContent)""")
    assert labels and not any("000,000" in t for t in labels)
    assert browser.js("new Date(0).getTimezoneOffset()") == -330
    story_time = browser.js("EV.clock(EV.gantt.data.t0, true)")
    browser.js("document.getElementById('clock').click()")
    assert browser.js("document.body.getAttribute('data-clock')") == "local"
    assert browser.js("document.getElementById('clock').textContent") == "local"
    assert "local time" in browser.js("document.getElementById('clock').title")
    assert "local time (Asia/" in browser.js("document.getElementById('clock').title")
    assert browser.js("EV.clock(0, true)") == "1970-01-01 05:30:00.000"
    assert browser.js("EV.clock(EV.gantt.data.t0, true)") != story_time
    browser.js("document.getElementById('clock').click()")  # back, and remembered
    assert browser.js("localStorage.getItem('evlog-clock')") == "utc"


def test_memory_per_worker_is_dasks_managed_unmanaged_and_spilled(view, browser):
    from dask.sizeof import sizeof

    _open(browser, view)
    plots = {p["name"]: p for p in browser.js("EV.api('api/plots')")}
    mem = plots["dask.worker.memory"]
    workers = sorted({x["worker"] for x in browser.js("EV.gantt.data.lanes")})
    assert mem["stacked"] and mem["unit"] == "bytes"
    assert sorted({s["worker"] for s in mem["series"]}) == workers  # each worker once, by its address
    assert [s["label"] for s in mem["series"]] == ["managed", "unmanaged", "spilled"] * 2
    # managed: the results in the workers' memory, as Dask counts them (sizeof); all 16 held a while
    every = sum(sizeof(b"x" * (100_000 * (x + 1))) for x in range(16))
    managed = [sum(s["values"][i] or 0 for s in mem["series"] if s["label"] == "managed") for i in range(len(mem["x"]))]
    assert max(managed) == every
    unmanaged = [v for s in mem["series"] if s["label"] == "unmanaged" for v in s["values"] if v is not None]
    assert min(unmanaged) > 10_000_000  # a Python process with Dask imported
    assert all(v == 0 for s in mem["series"] if s["label"] == "spilled" for v in s["values"] if v is not None)
    # drawn: per worker, the three stacked, one small chart each; one legend for them all
    charts = browser.js("Array.from(document.querySelectorAll('[data-plot=\"dask.worker.memory\"] .worker-plot'))"
                        ".map(w => [w.dataset.worker, w.querySelectorAll('.uplot').length, w.querySelectorAll('.u-legend').length])")
    assert charts == [[w, 1, 0] for w in workers]
    legend = browser.js("Array.from(document.querySelectorAll('[data-plot=\"dask.worker.memory\"] .legend span'))"
                        ".map(s => s.textContent)")
    assert legend == ["managed", "unmanaged", "spilled"]
    no_exceptions(browser)


def test_the_worker_selector_and_legends_list_each_worker_once(view, browser):
    _open(browser, view)
    workers = sorted({x["worker"] for x in browser.js("EV.gantt.data.lanes")})
    options = browser.js("Array.from(document.getElementById('worker').options).map(o => o.value)")
    assert options == [""] + workers
    hosts = sorted({p["host"] for p in browser.js("EV.api('api/overview')")["processes"]})
    assert len(hosts) == 1
    for name in ("system.cpu.load_average.1m", "evlog.memory.free_fraction"):  # the machine's figures: once per host
        labels = browser.js(f"Array.from(document.querySelectorAll('[data-plot=\"{name}\"] .u-legend .u-series'))"
                            ".slice(1).map(s => s.querySelector('.u-label').textContent)")
        assert labels == hosts, labels
    labels = browser.js("Array.from(document.querySelectorAll('[data-plot=\"evlog.bytes.allocated\"] .u-legend .u-series'))"
                        ".slice(1).map(s => s.querySelector('.u-label').textContent)")
    assert labels == workers  # a figure per worker: each worker once
    # picking a worker narrows the Gantt to its lanes
    browser.js(f"(() => {{ const s = document.getElementById('worker'); s.value = {workers[1]!r}; "
               "s.dispatchEvent(new Event('change')); })()")
    lanes = browser.wait_js(f"EV.gantt.data.lanes.every(l => l.worker === {workers[1]!r}) && EV.gantt.data.lanes",
                            what="the Gantt of one worker")
    assert len(lanes) == 2 and browser.js("EV.gantt.data.bars.length") > 0
    no_exceptions(browser)


def test_the_gantts_hover_names_the_task_key(view, browser):
    _open(browser, view)
    i = browser.js("EV.gantt.data.bars.findIndex(b => !b[4])")
    key = browser.js(f"EV.gantt.data.bars[{i}][6]")
    assert key.startswith("nap-")
    c = browser.js(f"document.getElementById('gantt').scrollIntoView({{block: 'center'}}); new Promise(ok => "
                   f"requestAnimationFrame(() => requestAnimationFrame(() => ok(EV.gantt.barCenter({i})))))")
    browser.cmd("Input.dispatchMouseEvent", type="mouseMoved", x=c["x"], y=c["y"])
    tip = browser.wait_js("!document.getElementById('gantt-tip').hidden && document.getElementById('gantt-tip').textContent",
                          what="the bar's hover")
    assert tip.startswith(key + " · nap · "), tip


def test_axis_labels_are_distinct_and_the_report_follows_the_clock_at_once(view, kolkata, browser):
    _open(browser, view)
    # y labels tell neighbouring ticks apart (the free-memory axis once read "94.9" three times)
    assert browser.js("EV.axisNumbers([94.85, 94.9, 94.95], '% free')") == ["94.85", "94.90", "94.95"]
    assert browser.js("EV.axisNumbers([0, 5e6, 1e7], 'bytes')") == ["0 MB", "5 MB", "10 MB"]
    ticks = browser.js("EV.gantt.ticks()")
    assert len({label for _, label in ticks}) == len(ticks) >= 2
    # the report's times switch with the clock, without a new analysis
    browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=60,
                    what="the report panel")
    before = browser.js("document.querySelector('#report p').textContent")
    browser.js("window.reportObject = EV.report; document.getElementById('clock').click()")
    after = browser.js("document.querySelector('#report p').textContent")
    assert "local time (Asia/" in after and "UTC" in before and after != before
    assert browser.js("window.reportObject === EV.report")  # drawn again from the same analysis
    assert browser.js("EV.clock(EV.report.start)") in after
    browser.js("document.getElementById('clock').click()")
    no_exceptions(browser)
