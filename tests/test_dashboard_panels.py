"""The dashboard's console panel, progress per task prefix and run selector in headless chromium, on real
runs under evlog-instrument: a Dask program with EVLOG_CAPTURE=enabled shown by `evlog view`; two
programs exporting over OTLP to one `evlog serve` (switching runs switches every panel, title and the URL
at once; side by side, one clock for both frames); a Dask program stopped mid-run whose progress is Dask's
own counts per prefix against each prefix's total."""
from __future__ import annotations

import json

import pytest
from helpers import NEEDS_CHROMIUM, Serve, no_exceptions, open_page, viewed

pytestmark = NEEDS_CHROMIUM

APP = r'''
import json, sys
from dask.distributed import Client, LocalCluster

def inc(x):
    return x + 1

def bad(x):
    raise ValueError(f"nope {x}")

if __name__ == "__main__":
    print("starting the job", flush=True)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for epoch in range(3):
            print(json.dumps({"epoch": epoch, "loss": 1.0 / (epoch + 1)}), flush=True)
            print(f"epoch {epoch} done", flush=True)
        client.gather(client.map(inc, range(20)))
        client.gather(client.map(bad, range(3)), errors="skip")
    print("warning: almost out of cake", file=sys.stderr, flush=True)
    print("finished", flush=True)
'''


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    with viewed(tmp_path_factory.mktemp("panels"), APP, EVLOG_CAPTURE="enabled") as url:
        yield url


def _lines(browser) -> list[str]:
    return browser.js("Array.from(document.querySelectorAll('#console-lines .line .b')).map(e => e.textContent)")


def _search(browser, text: str) -> None:
    browser.js("(() => { const q = document.getElementById('console-q'); q.value = %s; "
               "q.dispatchEvent(new Event('input')); })()" % json.dumps(text))


def test_console_text_appears_searchable_and_logs_are_counted(view, browser):
    open_page(browser, view)
    browser.wait_js("!document.getElementById('console-section').hidden", what="the console panel")
    lines = _lines(browser)
    for text in ("starting the job", "epoch 0 done", "epoch 2 done", "finished", "warning: almost out of cake"):
        assert text in lines, lines
    assert lines.index("starting the job") < lines.index("epoch 0 done") < lines.index("finished")  # oldest first
    assert any("Compute Failed" in x for x in lines)  # Dask's own log lines on stderr
    stderr = browser.js("Array.from(document.querySelectorAll('#console-lines .line.stderr .b')).map(e => e.textContent)")
    assert "warning: almost out of cake" in stderr and "finished" not in stderr
    logs = browser.js("+document.querySelector('#count-logs b').textContent.replace(/,/g, '')")
    assert logs == len(lines)
    # the search narrows on the server
    _search(browser, "epoch")
    browser.wait_js("document.querySelectorAll('#console-lines .line').length === 3", what="the filtered lines")
    assert _lines(browser) == ["epoch 0 done", "epoch 1 done", "epoch 2 done"]
    assert browser.js("document.getElementById('console-count').textContent") == "3 lines matching"
    # one stream
    _search(browser, "")
    browser.wait_js("document.querySelectorAll('#console-lines .line').length > 3", what="every line again")
    browser.js("""(() => { const s = document.getElementById('console-stream');
        s.value = Array.from(s.options).find(o => o.textContent.includes('· stderr')).value;
        s.dispatchEvent(new Event('change')); })()""")
    browser.wait_js("document.querySelectorAll('#console-lines .line.stdout').length === 0", what="stderr only")
    no_exceptions(browser)


PROGRESS = """document.querySelectorAll('#progress .progress-row').length > 0 &&
    Object.fromEntries(Array.from(document.querySelectorAll('#progress .progress-row')).map(r =>
      [r.getAttribute('data-prefix'), Object.fromEntries(Array.from(r.querySelectorAll('.bar i')).map(i =>
        [i.getAttribute('data-state'), [+i.title.split(': ')[1].split(' of ')[0], +i.title.split(' of ')[1],
         i.getBoundingClientRect().width / r.querySelector('.track').getBoundingClientRect().width]]))]))"""


def _progress(browser, what: str) -> dict:
    """{prefix: {state: (tasks, the prefix's total, share of the track's width)}} as drawn."""
    return browser.wait_js(PROGRESS, what=what)


def test_progress_per_prefix_matches_the_run(view, browser):
    open_page(browser, view)
    rows = _progress(browser, "the progress bars")
    assert {p: {k: v[:2] for k, v in st.items()} for p, st in rows.items()} == \
        {"inc": {"memory": [20, 20]}, "bad": {"erred": [3, 3]}}, rows
    assert all(v[2] == pytest.approx(1, abs=0.01) for st in rows.values() for v in st.values())  # each its own total


def _run_to(serve, tmp, name: str, app: str) -> None:
    from helpers import PYTHON, evlog_env, run_instrumented

    (tmp / f"{name}.py").write_text(app)
    env = evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{serve.grpc}", OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                    OTEL_SERVICE_NAME=name)
    p = run_instrumented([PYTHON, str(tmp / f"{name}.py")], env=env, cwd=str(tmp), timeout=240)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]


POOL = r'''
from concurrent.futures import ProcessPoolExecutor

def f(x):
    return x * 2

if __name__ == "__main__":
    with ProcessPoolExecutor(2) as ex:
        print(sum(ex.map(f, range(12))))
'''


def test_two_runs_on_one_serve_are_shown_one_at_a_time_or_side_by_side(tmp_path, browser):
    serve = Serve(str(tmp_path / "evlog.sqlite"))
    try:
        _run_to(serve, tmp_path, "first", APP)
        _run_to(serve, tmp_path, "second", POOL)
        serve.wait(lambda: len(serve.get("api/overview")["runs"]) == 2, timeout=60, what="two runs")
        browser.goto(serve.url)
        browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", what="the first refresh")
        assert not browser.js("document.getElementById('run-label').hidden")
        options = browser.js("Array.from(document.getElementById('run').options).map(o => o.textContent)")
        assert len(options) == 2 and options[0].startswith("second") and options[1].startswith("first"), options
        # the newest first: the pool's tasks only, its process's lanes only
        browser.wait_js("EV.gantt.data && EV.gantt.data.total === 12", what="the second run's 12 pool tasks")
        assert browser.js("EV.gantt.data.what").startswith("pool tasks")
        browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded')", what="its report")
        assert "__main__.f" in browser.js("document.getElementById('report').textContent")
        assert browser.js("document.querySelector('[data-plot=\"evlog.bytes.allocated\"] h3').textContent").startswith("Bytes allocated")
        # the other run: every panel, title and the URL switch at once
        first = browser.js("document.getElementById('run').options[1].value")
        browser.js("""(() => { const s = document.getElementById('run'); s.value = s.options[1].value;
            s.dispatchEvent(new Event('change')); })()""")
        assert browser.js("new URLSearchParams(location.search).get('run')") == first
        assert "__main__.f" not in browser.js("document.getElementById('report').textContent")  # not the pool's
        # its 23 Dask executions, 2 workers, nothing of the pool; its report, its bytes held
        browser.wait_js("EV.gantt.data.total === 23", what="the first run's 23 Dask executions")
        browser.wait_js("document.getElementById('report-section').getAttribute('data-loaded') && "
                        "document.getElementById('report').textContent.includes('map inc (20 tasks)')", what="its report")
        assert "__main__.f" not in browser.js("document.getElementById('report').textContent")
        browser.wait_js("document.querySelector('[data-plot=\"evlog.bytes.allocated\"] h3').textContent.startsWith('Bytes held')",
                        what="the bytes plot's title of a Dask run")
        assert browser.js("Array.from(document.getElementById('worker').options).map(o => o.value).slice(1)") == \
            sorted({x["worker"] for x in browser.js("EV.gantt.data.lanes")})
        lanes = browser.js("EV.gantt.data.lanes")
        assert len({x["worker"] for x in lanes}) == 2 and all(x["worker"].startswith("tcp://") for x in lanes), lanes
        assert browser.js("EV.api('api/overview').then(o => o.summary.processes)") < \
            sum(r["processes"] for r in serve.get("api/overview")["runs"])
        browser.wait_js("document.querySelectorAll('#progress .progress-row').length === 2", what="its progress")
        # progress knows each task's state in `evlog serve` too (spans kept as protobuf)
        rows = _progress(browser, "the first run's progress")
        assert {p: {k: v[0] for k, v in st.items()} for p, st in rows.items()} == {"inc": {"memory": 20}, "bad": {"erred": 3}}
        # side by side, when asked: the header's button shows the chosen run and the other one, a frame each
        browser.js("document.getElementById('compare').click()")
        browser.wait_js("document.querySelectorAll('.compare iframe').length === 2", what="two frames")
        frame = "document.querySelectorAll('.compare iframe')[%d].contentWindow"
        browser.wait_js(" && ".join(f"{frame % i}.EV && {frame % i}.EV.gantt && {frame % i}.EV.gantt.data" for i in (0, 1)),
                        what="both runs drawn")
        totals = browser.js(f"[{frame % 0}.EV.gantt.data.total, {frame % 1}.EV.gantt.data.total]")
        assert totals == [23, 12], totals  # the run chosen first, then the other
        assert browser.js(f"{frame % 1}.document.getElementById('compare').hidden")
        assert browser.js(f"{frame % 0}.document.getElementById('run').selectedIndex") == 1
        # one clock for the page and both frames: the header's clock switches them all
        assert browser.js(f"[{frame % 0}.EV.tz, {frame % 1}.EV.tz, EV.tz]") == ["utc"] * 3
        browser.js("document.getElementById('clock').click()")
        browser.wait_js(f"{frame % 0}.document.body.dataset.clock === 'local' && "
                        f"{frame % 1}.document.body.dataset.clock === 'local'", what="both frames on local time")
        # and a frame's own clock button switches the other frame and the page
        browser.js(f"{frame % 1}.document.getElementById('clock').click()")
        browser.wait_js(f"{frame % 0}.EV.tz === 'utc' && document.body.dataset.clock === 'utc'", what="all back to UTC")
    finally:
        serve.stop()
    no_exceptions(browser)


MIDRUN_APP = r'''
import os, sys, time
from dask.distributed import Client, LocalCluster

def quick(i):
    return i

def slow(i, flag):
    deadline = time.monotonic() + 120
    while not os.path.exists(flag) and time.monotonic() < deadline:  # held until the test has looked
        time.sleep(0.02)
    return i

if __name__ == "__main__":
    flag = sys.argv[1]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        done = client.map(quick, range(37), key=[f"work-{i}" for i in range(37)])
        client.gather(done)
        rest = client.map(slow, range(37, 100), flag=flag, key=[f"work-{i}" for i in range(37, 100)])
        print(sum(client.gather(done + rest)))
'''


def test_progress_mid_run_is_each_prefixs_tasks_by_state_against_its_total(tmp_path, browser):
    import os
    import signal
    import subprocess

    from helpers import PYTHON, evlog_env

    serve = Serve(str(tmp_path / "evlog.sqlite"))
    (tmp_path / "app.py").write_text(MIDRUN_APP)
    flag = tmp_path / "go"
    env = evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{serve.grpc}", OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                    OTEL_SERVICE_NAME="midrun", OTEL_METRIC_EXPORT_INTERVAL="500")
    app = subprocess.Popen([PYTHON, "-m", "evlog.launcher", PYTHON, str(tmp_path / "app.py"), str(flag)], env=env,
                           cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        # 37 of work's 100 tasks done; the others sent to a worker (processing: Dask sends a worker a
        # little more than its threads, worker-saturation) or queued on the scheduler
        serve.wait(lambda: [p for p in serve.get("api/progress")["prefixes"]
                            if p["prefix"] == "work" and p["states"].get("memory") == 37 and p["total"] == 100
                            and p["states"].get("processing", 0) >= 2], timeout=120, what="work mid-run")
        browser.goto(serve.url)
        rows = _progress(browser, "the progress bars")
        work = {k: v[0] for k, v in rows["work"].items()}
        assert work["memory"] == 37 and work["processing"] >= 2 and sum(work.values()) == 100, rows
        assert set(work) <= {"memory", "processing", "queued", "waiting"}
        work = rows["work"]
        assert all(v[1] == 100 for v in work.values())
        assert work["memory"][2] == pytest.approx(0.37, abs=0.01)  # 37 of its own 100, not full
        count = browser.js("document.querySelector('#progress .progress-row[data-prefix=work] .count').textContent")
        assert count.startswith("37 / 100 done")
        flag.write_text("go")
        out, err = app.communicate(timeout=120)
        assert app.returncode == 0, err.decode(errors="replace")[-3000:]
        assert out.decode().strip() == str(sum(range(100)))
    finally:
        flag.write_text("go")
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
            app.communicate()
        serve.stop()
    no_exceptions(browser)
