"""The dashboard's plots and clock in headless chromium, on a real Dask run (2 worker processes x 2
threads, tasks of 0.3 s that overlap) shown by `evlog view`: worker and processor saturation are step
functions from the task spans (above 0 while tasks run, reaching the busy threads), the plots share the
Gantt's time range and zoom, bytes held is a step function of the results in memory, axis labels are
readable, and one clock (UTC or local) serves the page."""
from __future__ import annotations

import pytest

import test_dashboard_gantt

browser = test_dashboard_gantt.browser  # the fixture: a headless chromium page per test
pytestmark = test_dashboard_gantt.pytestmark  # browser, slow, skipped without chromium

APP = r'''
import time
from dask.distributed import Client, LocalCluster

def nap(x):
    time.sleep(0.3)
    return b"x" * (100_000 * (x + 1))

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2)
        print(sum(map(len, client.gather(client.map(nap, range(16))))))
'''


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    from test_dashboard_gantt import viewed

    with viewed(tmp_path_factory.mktemp("plots"), APP) as url:
        yield url


def _open(browser, url: str) -> None:
    from test_dashboard_gantt import open_page

    open_page(browser, url)
    browser.wait_js("Object.keys(EV.plotRanges()).length >= 2", what="the plots")


def test_saturation_is_exact_from_the_task_spans(view, browser):
    _open(browser, view)
    plots = {p["name"]: p for p in browser.js("EV.api('api/plots')")}
    bars = browser.js("EV.gantt.data.bars")  # [start, end, lane, prefix, error, row id]
    lanes = browser.js("EV.gantt.data.lanes")
    assert len(bars) == 16 and len(lanes) == 4
    ws = plots["evlog.worker.saturation"]
    assert ws["steps"] and len(ws["series"]) == 2
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
    t0, t1 = browser.js("[EV.gantt.data.t0, EV.gantt.data.t1]")
    for name in ("system.cpu.load_average.1m", "evlog.memory.free_fraction"):
        p = plots[name]
        [run] = [s for s in p["series"] if " exporter " in s["label"]]  # the exporter process's samples
        xs = [x for x, v in zip(p["x"], run["values"]) if v is not None]
        assert len(xs) == 2, xs
        assert xs[0] < min(b[0] for b in bars) and xs[1] > max(b[1] for b in bars)  # before and after the tasks
        assert (t0, t1) == pytest.approx((xs[0], xs[1]), abs=0.01)  # the Gantt covers the whole run
    mem = plots["evlog.memory.free_fraction"]
    assert all(0 < v <= 1 for s in mem["series"] for v in s["values"] if v is not None)


def test_plots_share_the_gantts_time_range_and_zoom(view, browser):
    _open(browser, view)
    t0, t1 = browser.js("[EV.gantt.data.t0, EV.gantt.data.t1]")
    ranges = browser.js("EV.plotRanges()")
    assert ranges["evlog.worker.saturation"] == pytest.approx([t0, t1])
    assert all(r == pytest.approx([t0, t1]) for r in ranges.values()), ranges
    # a drag across a plot zooms the Gantt and every plot to it
    box = browser.js("""(() => { const o = document.querySelector('[data-plot="evlog.worker.saturation"] .u-over')
        .getBoundingClientRect(); return {x: o.left, y: o.top, w: o.width, h: o.height}; })()""")
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
    assert not browser.js("document.getElementById('gantt-reset').hidden")


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
