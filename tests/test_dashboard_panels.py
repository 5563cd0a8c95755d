"""The dashboard's console panel, progress per task prefix and run selector in headless chromium, on real
runs under evlog-instrument: a Dask program with EVLOG_CAPTURE=enabled shown by `evlog view`, and two
programs exporting over OTLP to one `evlog serve`."""
from __future__ import annotations

import json

import pytest

import test_dashboard_gantt

browser = test_dashboard_gantt.browser  # the fixture: a headless chromium page per test
pytestmark = test_dashboard_gantt.pytestmark  # browser, slow, skipped without chromium

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
    from test_dashboard_gantt import viewed

    with viewed(tmp_path_factory.mktemp("panels"), APP, EVLOG_CAPTURE="enabled") as url:
        yield url


def _lines(browser) -> list[str]:
    return browser.js("Array.from(document.querySelectorAll('#console-lines .line .b')).map(e => e.textContent)")


def _search(browser, text: str) -> None:
    browser.js("(() => { const q = document.getElementById('console-q'); q.value = %s; "
               "q.dispatchEvent(new Event('input')); })()" % json.dumps(text))


def test_console_text_appears_searchable_and_logs_are_counted(view, browser):
    test_dashboard_gantt.open_page(browser, view)
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
    test_dashboard_gantt.no_exceptions(browser)


def test_progress_per_prefix_matches_the_run(view, browser):
    test_dashboard_gantt.open_page(browser, view)
    rows = browser.wait_js("""document.querySelectorAll('#progress .progress-row').length === 2 &&
        Object.fromEntries(Array.from(document.querySelectorAll('#progress .progress-row')).map(r =>
          [r.getAttribute('data-prefix'), Object.fromEntries(Array.from(r.querySelectorAll('.bar i')).map(i =>
            [i.getAttribute('data-state'), +i.title.split(': ')[1]]))]))""", what="the progress bars")
    assert rows == {"inc": {"memory": 20}, "bad": {"erred": 3}}, rows


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
    from test_serve import Serve

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
        # the other run: its 23 Dask executions, 2 workers, nothing of the pool
        browser.js("""(() => { const s = document.getElementById('run'); s.value = s.options[1].value;
            s.dispatchEvent(new Event('change')); })()""")
        browser.wait_js("EV.gantt.data.total === 23", what="the first run's 23 Dask executions")
        lanes = browser.js("EV.gantt.data.lanes")
        assert len({x["worker"] for x in lanes}) == 2 and all(x["worker"].startswith("tcp://") for x in lanes), lanes
        assert browser.js("EV.api('api/overview').then(o => o.summary.processes)") < \
            sum(r["processes"] for r in serve.get("api/overview")["runs"])
        browser.wait_js("document.querySelectorAll('#progress .progress-row').length === 2", what="its progress")
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
    finally:
        serve.stop()
    test_dashboard_gantt.no_exceptions(browser)
