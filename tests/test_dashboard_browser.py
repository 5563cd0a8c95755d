"""The dashboard in a real browser: Debian's headless chromium, driven over the Chrome DevTools
protocol (a websocket, through aiohttp, which the viewer already needs: no driver, no extra package).

A real Dask run under evlog-instrument exports to `evlog serve`; the page must show Gantt bars and
line plots, a click on a bar must show that task's story, new data must arrive live, and the page
must reconnect by itself when the server restarts. A 100,000-span run folder must render (aggregated,
saying so). Marked browser and slow: CI installs chromium (.ci/run); here it is skipped without it.
"""
from __future__ import annotations

import json
import time
import urllib.request

from helpers import NEEDS_CHROMIUM, Serve, click_element, start_view, stop_view, wait_until

pytestmark = NEEDS_CHROMIUM

DASK_APP = r'''
import json
from dask.distributed import Client, LocalCluster

def inc(x):
    return x + 1

def add(a, b):
    return a + b

def boom(x):
    return 1 / 0

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        xs = client.map(inc, range(40))
        ys = [client.submit(add, xs[i], xs[i + 1]) for i in range(0, 39, 2)]
        print(client.submit(sum, ys).result())
        try:
            client.submit(boom, 1).result()
        except ZeroDivisionError:
            pass
        client.log_event("runtimes", {"start": 1, "stop": 2})
        for epoch in range(5):
            print(json.dumps({"epoch": epoch, "loss": 1.0 / (epoch + 1), "acc": epoch / 10}), flush=True)
'''


def run_dask_app(tmp_path, serve) -> None:
    from helpers import PYTHON, evlog_env, run_instrumented

    app = tmp_path / "app.py"
    app.write_text(DASK_APP)
    env = evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{serve.grpc}", OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                    OTEL_SERVICE_NAME="app", OTEL_METRIC_EXPORT_INTERVAL="500")
    p = run_instrumented([PYTHON, str(app)], env=env, cwd=str(tmp_path), timeout=240)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]


def test_dashboard_shows_a_dask_run_and_follows_it_live(tmp_path, browser):
    db = str(tmp_path / "evlog.sqlite")
    serve = Serve(db)
    try:
        run_dask_app(tmp_path, serve)
        serve.wait(lambda: serve.get("api/gantt")["total"] >= 60, timeout=60, what="the task executions")
        # the run is over: its exporter process's end sample is in (a later one would move the page's layout)
        from evlog.data.store import Store

        store = Store(db, create=False)
        try:
            serve.wait(lambda: (lambda b: b[0] is not None and b[1] > b[0])(store.run_bounds()), timeout=30,
                       what="the run's end sample")
        finally:
            store.close()
        browser.goto(serve.url)
        browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", what="the first refresh")
        # the Gantt chart: one bar per task execution, lanes per worker and thread
        bars = browser.wait_js("+document.getElementById('gantt').getAttribute('data-bars')", what="Gantt bars")
        assert bars >= 60
        lanes = browser.js("EV.gantt.data.lanes.map(l => l.worker)")
        assert len(set(lanes)) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in lanes)
        assert browser.js("EV.gantt.data.bars.some(b => b[4] === 1)")  # the erred task is marked
        # the line plots
        plots = browser.js("Array.from(document.querySelectorAll('#plots .plot')).map(p => "
                           "[p.getAttribute('data-plot'), !!p.querySelector('.uplot')])")
        drawn = {name for name, has in plots if has}
        assert {"evlog.worker.saturation", "system.cpu.load_average.1m", "evlog.memory.free_fraction",
                "evlog.bytes.allocated"} <= drawn, plots
        # click a real bar of an `inc` task: its story appears
        i = browser.js("EV.gantt.data.bars.findIndex(b => EV.gantt.data.prefixes[b[3]] === 'inc' && !b[4])")
        assert i >= 0
        c = browser.js(f"document.getElementById('gantt').scrollIntoView({{block: 'center'}}); EV.gantt.barCenter({i})")
        browser.click(c["x"], c["y"])
        rows = browser.wait_js("Array.from(document.querySelectorAll('#story tbody tr')).map(r => "
                               "Array.from(r.cells).map(c => c.textContent))", what="the task's story")
        assert browser.js("document.getElementById('task-key').textContent").startswith("inc-")
        finishes = [r[2] for r in rows]
        assert "processing" in finishes and finishes[-1] in ("memory", "forgotten", "released"), rows
        # the DAG and the events by topic
        assert browser.js("document.querySelectorAll('#dag .node').length") >= 60
        assert browser.js("document.querySelectorAll('#dag .edge').length") >= 40  # add(x_i, x_i+1), sum(ys)
        assert browser.wait_js("Array.from(document.querySelectorAll('#topics button')).some(b => "
                               "b.textContent.startsWith('runtimes'))", what="the runtimes topic")
        assert browser.wait_js("!document.getElementById('metadata-section').hidden && "
                               "document.querySelector('#metadata .uplot') !== null", what="metadata graph")
        assert "x axis: epoch" in browser.js("document.querySelector('#metadata h3').textContent")
        # a click on a legend entry shows only that series; a second click shows all again
        legend = ("Array.from(document.querySelectorAll('#metadata .legend span'))"
                  ".map(s => [s.textContent, s.classList.contains('off')])")
        assert browser.js(legend) == [["acc", False], ["loss", False]]
        click_element(browser, "#metadata .legend span[data-series=loss]")
        assert browser.js(legend) == [["acc", True], ["loss", False]]
        click_element(browser, "#metadata .legend span[data-series=loss]")
        assert browser.js(legend) == [["acc", False], ["loss", False]]
        # live: new spans arrive without reloading the page
        before = browser.js("+document.querySelector('#count-spans b').textContent.replace(/,/g, '')")
        [run] = [r["run"] for r in serve.get("api/overview")["runs"]]
        send_spans(serve, 5, run)  # more of the same run (a span of another run would go to its own view)
        browser.wait_js(f"+document.querySelector('#count-spans b').textContent.replace(/,/g, '') >= {before + 5}",
                        what="the live update")
        # the server goes away and comes back: the page reconnects by itself
        serve.stop()
        browser.wait_js("document.getElementById('status').textContent.startsWith('disconnected')",
                        what="the disconnected status")
        serve = Serve(db, grpc=serve.grpc, http=serve.http)
        browser.wait_js("document.getElementById('status').textContent === 'live'", timeout=30,
                        what="reconnection within 5 s of the restart")
        send_spans(serve, 3, run)
        browser.wait_js(f"+document.querySelector('#count-spans b').textContent.replace(/,/g, '') >= {before + 8}",
                        what="live updates after the reconnection")
        browser.screenshot(str(tmp_path / "dashboard.png"))
    finally:
        serve.stop()
    assert not [m for m in browser.console if m.startswith("EXCEPTION")], browser.console


def test_the_page_asks_for_the_token(tmp_path, browser):
    from synthetic_run import make_run

    folder = str(tmp_path / "run")
    make_run(folder, n_tasks=20)
    proc, url = start_view(folder, "--token", "open-sesame")
    try:
        browser.goto(url)
        browser.wait_js("!document.getElementById('token-dialog').hidden", what="the token dialog")
        assert browser.js("document.body.getAttribute('data-refreshes')") is None
        browser.js("document.getElementById('token-input').value = 'wrong'; "
                   "document.getElementById('token-form').requestSubmit()")
        browser.wait_js("!document.getElementById('token-dialog').hidden && "
                        "!document.getElementById('token-error').hidden", what="the wrong-token message")
        browser.js("document.getElementById('token-input').value = 'open-sesame'; "
                   "document.getElementById('token-form').requestSubmit()")
        browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", what="the dashboard after the token")
        assert int(browser.js("document.getElementById('gantt').getAttribute('data-bars')")) == 20
        browser.wait_js("document.getElementById('status').textContent === 'live'", what="live updates with the token")
    finally:
        stop_view(proc)


def test_the_page_takes_the_token_once_from_its_url(tmp_path, browser):
    """``/?token=`` signs the browser in (an HttpOnly cookie) and leaves the address bar without the token."""
    from synthetic_run import make_run

    folder = str(tmp_path / "run")
    make_run(folder, n_tasks=20)
    proc, url = start_view(folder, "--token", "open-sesame")
    try:
        browser.goto(url + "?token=open-sesame")
        browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", what="the dashboard by the cookie")
        browser.wait_js("document.getElementById('status').textContent === 'live'", what="live updates by the cookie")
        assert browser.js("location.href") == url
        assert browser.js("document.getElementById('token-dialog').hidden")
        assert browser.js("document.cookie") == ""  # HttpOnly: the page's scripts never see it
        assert browser.js("sessionStorage.getItem('evlog-token')") is None
    finally:
        stop_view(proc)


def send_spans(serve, n: int, run: str = "") -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tp = TracerProvider(resource=Resource.create({"service.name": "later", **({"evlog.run.id": run} if run else {})}))
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{serve.grpc}", insecure=True)))
    for _i in range(n):
        with tp.get_tracer("t").start_as_current_span("futures.task later"):
            pass
    tp.shutdown()


def test_a_run_of_100000_task_spans_renders_aggregated(tmp_path, browser):
    from synthetic_run import make_run

    folder = str(tmp_path / "big")
    make_run(folder, n_tasks=100_000, n_workers=4, metadata=50, scheduler=False, gauge_ms=500)
    proc, url = start_view(folder)
    try:
        def spans_read():  # `evlog view` reads the folder in the background
            with urllib.request.urlopen(url + "api/overview", timeout=30) as r:
                return json.loads(r.read())["summary"]["spans"]

        wait_until(lambda: spans_read() == 100_000, 240, "the run folder read whole", interval=0.5)
        t0 = time.monotonic()
        browser.goto(url)
        browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", timeout=120, what="the first refresh")
        took = time.monotonic() - t0
        assert browser.js("document.getElementById('gantt').getAttribute('data-mode')") == "aggregated"
        note = browser.js("document.getElementById('gantt-note').textContent")
        assert "100,000 spans in view" in note and not browser.js("document.getElementById('gantt-note').hidden")
        assert browser.js("EV.gantt.data.lanes.length") == 8  # 4 workers x 2 threads
        print(f"\n100,000 task spans: page loaded and drawn in {took:.1f} s "
              f"(last refresh {browser.js('EV.lastRefreshMs') / 1000:.1f} s)")
        # zoom into a slice: single tasks are drawn again
        g = browser.js("[EV.gantt.data.t0, EV.gantt.data.t1]")
        mid = (g[0] + g[1]) / 2  # a slice in the middle of the tasks' range (its edges are a little room)
        browser.js(f"EV.state.range = [{mid}, {mid + (g[1] - g[0]) / 200}]; EV.refresh()")
        browser.wait_js("document.getElementById('gantt').getAttribute('data-mode') === 'bars'", timeout=60,
                        what="single bars after zooming in")
        assert int(browser.js("document.getElementById('gantt').getAttribute('data-bars')")) > 100
    finally:
        stop_view(proc)
