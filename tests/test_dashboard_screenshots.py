"""The dashboard of three kinds of real runs, as docs/dashboard.md shows them: a Dask graph with a
failure and console metadata, a process pool, and a torchrun job. Each page must render its tasks
without a script error; the screenshots go to the test's folder, and to EVLOG_DOCS_SCREENSHOTS when set
(`EVLOG_DOCS_SCREENSHOTS=docs python -m pytest tests/test_dashboard_screenshots.py` refreshes the docs)."""
from __future__ import annotations

import os
import shutil
import sys

import pytest
from helpers import NEEDS_CHROMIUM, no_exceptions, open_page, shoot, start_view, stop_view, viewed

pytestmark = NEEDS_CHROMIUM

DASK = r'''
import json, time
import dask
from dask.distributed import Client, LocalCluster

def load(i):
    time.sleep(0.05 + 0.01 * (i % 5))
    return list(range(1000 * (i + 1)))

def clean(xs):
    time.sleep(0.03)
    if len(xs) == 7000:
        raise ValueError("bad partition 6")
    return [x * 2 for x in xs]

def total(*parts):
    time.sleep(0.1)
    return sum(sum(p) for p in parts)

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for epoch in range(4):
            parts = [dask.delayed(clean)(dask.delayed(load)(i)) for i in range(12) if i != 6]
            result = dask.delayed(total)(*parts).compute()
            print(json.dumps({"epoch": epoch, "loss": 1 / (epoch + 1), "total": result}), flush=True)
        try:
            client.submit(clean, list(range(7000))).result()
        except ValueError:
            print("partition 6 failed, as planned", flush=True)
'''

POOL = r'''
import time
from concurrent.futures import ProcessPoolExecutor

def work(x):
    time.sleep(0.02 + (0.3 if x == 17 else 0))
    if x == 23:
        raise KeyError(x)
    return x

if __name__ == "__main__":
    with ProcessPoolExecutor(2) as ex:
        for f in [ex.submit(work, i) for i in range(40)]:
            try:
                f.result()
            except KeyError:
                pass
'''


def _shoot(browser, url: str, name: str, tmp_path) -> None:
    open_page(browser, url)
    browser.wait_js("Object.keys(EV.plotRanges()).length >= 2", what="the plots")
    path = str(tmp_path / name)
    shoot(browser, ["header", "#plots-section"], path)
    assert os.path.getsize(path) > 20_000
    docs = os.environ.get("EVLOG_DOCS_SCREENSHOTS")
    if docs:
        shutil.copy(path, os.path.join(docs, name))
    no_exceptions(browser)


def test_a_dask_run(tmp_path, browser):
    with viewed(tmp_path, DASK, EVLOG_CAPTURE="enabled") as url:
        _shoot(browser, url, "dashboard-dask.png", tmp_path)
        assert browser.js("EV.gantt.data.lanes.filter(lane => !lane.transfers).length") == 4  # and transfer lanes
        assert browser.js("EV.gantt.data.bars.some(b => b[4] === 1)")  # the failed partition


def test_a_pool_run(tmp_path, browser):
    with viewed(tmp_path, POOL) as url:
        _shoot(browser, url, "dashboard-pool.png", tmp_path)
        assert browser.js("EV.gantt.data.total") == 40 and browser.js("EV.gantt.data.what").startswith("pool tasks")


@pytest.mark.torch
def test_a_torchrun_run(tmp_path, browser):
    from helpers import evlog_env, run_instrumented

    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "torch_gloo.py")
    run_dir = tmp_path / "run"
    p = run_instrumented([torchrun, "--standalone", "--nproc_per_node=2", example, "--steps", "5"],
                         env=evlog_env(EVLOG_RUN_DIR=str(run_dir)), timeout=240)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    proc, url = start_view(str(run_dir), "--no-follow")
    try:
        _shoot(browser, url, "dashboard-torchrun.png", tmp_path)
        names = browser.js("EV.api('api/gantt').then(g => g.total)")
        assert names > 0
    finally:
        stop_view(proc)
