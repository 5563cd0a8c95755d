"""`evlog report` reads the chunk spans of pool maps (issue 29): a chunk's calls count toward their
function, and a straggler or a failure inside a chunk is named by the call's index in the map's input.

A real run under evlog-instrument with the default settings: a Pool.map of 40 calls of 10 ms in
chunks of 10, item 17 taking 0.5 s (the straggler); a Pool.map whose item 23 raises (the failure;
the chunk stops there, the other chunks run whole).
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import CHROMIUM, PYTHON, evlog_env, no_exceptions, open_page, run_app, start_view, stop_view

APP = r'''
import multiprocessing as mp, time

def f(x):
    time.sleep(0.5 if x == 17 else 0.01)
    return x

def g(x):
    if x == 23:
        raise ValueError(f"bad item {x}")
    return x

if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(sum(p.map(f, range(40), chunksize=10)))
        try:
            p.map(g, range(40), chunksize=10)
        except ValueError as e:
            print("failed:", e)
'''

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    p, folder = run_app(tmp_path_factory.mktemp("report-pools"), APP)
    assert p.stdout.decode().split("\n")[:2] == ["780", "failed: bad item 23"]
    return folder


def report(run_dir: str, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([PYTHON, "-m", "evlog.cli", "report", run_dir, *args], capture_output=True, timeout=120,
                       env=evlog_env())
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p


def test_a_chunks_calls_count_toward_their_function(run_dir):
    pools = json.loads(report(run_dir, "--format", "json").stdout)["pools"]
    f, g = pools["functions"]["__main__.f"], pools["functions"]["__main__.g"]
    assert (f["count"], f["erred"], f["kind"]) == (40, 0, "mp.pool")
    assert (g["count"], g["erred"]) == (34, 1)  # chunk 20-29 stopped at item 23: 10 + 10 + 4 + 10 calls
    assert 0.009 < f["median_s"] < 0.1 and f["max_s"] >= 0.5  # a call of 10 ms; the straggler's 0.5 s
    assert sum(w["calls"] for w in pools["workers"]) == 40 + 34


def test_the_straggler_and_the_failure_are_named_by_the_calls_index(run_dir):
    pools = json.loads(report(run_dir, "--format", "json").stdout)["pools"]
    (s,) = pools["stragglers"]
    assert (s["function"], s["index"], s["timed_with"]) == ("__main__.f", 17, 1)  # 0.5 s calls are timed alone
    assert 0.5 <= s["seconds"] < 1.0
    (x,) = pools["failures"]
    assert (x["function"], x["index"], x["exception"], x["message"]) == ("__main__.g", 23, "ValueError", "bad item 23")
    assert "in g" in x["stacktrace"]
    text = report(run_dir).stdout.decode()
    assert "  straggler: call 17 of __main__.f " in text, text
    assert "  failed: call 23 of __main__.g ValueError: bad item 23 in " in text, text
    assert "pool: call 17 of __main__.f took " in text and "first call 23 of __main__.g: ValueError" in text, text



@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)")
def test_the_dashboards_report_panel_names_the_calls_of_a_chunk(run_dir, browser):
    proc, url = start_view(run_dir, "--no-follow")
    try:
        open_page(browser, url)
        browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", timeout=60,
                        what="the report panel")
        rows = browser.js("Array.from(document.querySelectorAll('#report table')).filter(t => "
                          "['straggler', 'failed call'].includes(t.querySelector('th').textContent)).map(t => "
                          "Array.from(t.querySelectorAll('tr')).map(r => Array.from(r.children).map(c => c.textContent)))")
        no_exceptions(browser)
    finally:
        stop_view(proc)
    (straggler, failure) = rows
    assert straggler[0][:3] == ["straggler", "call", "took"] and straggler[1][:2] == ["__main__.f", "17"], straggler
    assert failure[0][:3] == ["failed call", "call", "exception"], failure
    assert failure[1][:3] == ["__main__.g", "23", "ValueError: bad item 23"], failure
