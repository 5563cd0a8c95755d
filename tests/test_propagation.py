"""One trace-context mechanism (evlog/propagation.py): the propagators OTEL_PROPAGATORS names carry the
context to Dask tasks (client -> scheduler -> worker process, and the scheduler's records -> the run's
exporter process), to pool tasks and from the environment; tracestate and baggage travel with it.

Real LocalClusters with worker processes under evlog-instrument; spans judged by a plain OTLP receiver.
The client span's context has a tracestate (``vendor=x``): the default propagators (tracecontext,baggage)
carry it to the task, b3 cannot, so a task that sees it under b3 would mean evlog ignored OTEL_PROPAGATORS.
"""
from __future__ import annotations

import json

from helpers import PYTHON, evlog_env, run_instrumented
from plain_receiver import PlainReceiver, attrs

APP = r'''
import concurrent.futures as cf, json, os, subprocess, sys
from distributed import Client, LocalCluster, get_worker
from opentelemetry import baggage, context, propagate, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

def probe(x):
    """What the task sees of its context: its own inject output, span, tracestate, baggage."""
    carrier = {}
    propagate.inject(carrier)
    sc = trace.get_current_span().get_span_context()
    try:
        where = get_worker().address
    except ValueError:
        where = None
    return {"x": x, "pid": os.getpid(), "worker": where, "carrier": carrier, "trace_id": format(sc.trace_id, "032x"),
            "span_id": format(sc.span_id, "016x"), "tracestate": sc.trace_state.to_header(),
            "baggage": dict(baggage.get_all())}

def annotations():
    """The task's annotations as its worker got them (a worker without evlog leaves evlog's carrier there)."""
    from distributed.worker import thread_state
    return dict(get_worker().state.tasks[thread_state.key].annotations or {})

def plain_worker(cluster, client):
    """One more worker, a process without evlog (OTEL_SDK_DISABLED), and its address."""
    known = set(client.scheduler_info()["workers"])
    proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
                             "--nthreads", "1", "--no-nanny", "--no-dashboard"],
                            env={**os.environ, "OTEL_SDK_DISABLED": "true"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client.wait_for_workers(len(known) + 1, timeout=60)
    return proc, (set(client.scheduler_info()["workers"]) - known).pop()

if __name__ == "__main__":
    # the program continues a caller's trace that has a tracestate, and sets baggage
    remote = SpanContext(0x1234567890abcdef1234567890abcdef, 0x1122334455667788, True, TraceFlags(1),
                         TraceState([("vendor", "x")]))
    ctx = baggage.set_baggage("tenant", "blue", trace.set_span_in_context(NonRecordingSpan(remote)))
    token = context.attach(ctx)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        with trace.get_tracer("app").start_as_current_span("app.client") as span:
            one = client.submit(probe, -1, key="probe-one").result()
            many = client.gather(client.map(probe, range(12), key=[f"probe-{i}" for i in range(12)]))
            with cf.ProcessPoolExecutor(1) as ex:
                pooled = ex.submit(probe, 99).result()
            wire = None
            if os.environ.get("APP_PLAIN_WORKER"):  # what evlog puts on the wire, seen by a peer without evlog
                proc, plain = plain_worker(cluster, client)
                try:
                    wire = client.submit(annotations, key="wire", workers=[plain]).result()
                finally:  # the peer's own close can wait out Dask's connect timeout (30 s) on a loaded host
                    proc.terminate()
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
        sc = span.get_span_context()
        print(json.dumps({"pid": os.getpid(), "trace_id": format(sc.trace_id, "032x"),
                          "span_id": format(sc.span_id, "016x"), "one": one, "many": many, "pooled": pooled, "wire": wire}))
'''


def _run(tmp_path, receiver, **env):
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = run_instrumented([PYTHON, str(app)], timeout=240, env=evlog_env(
        {**receiver.env(), "EVLOG_SUMMARY": "false", "EVLOG_RUN_DIR": str(tmp_path / "run"), **env}))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]), proc.stderr.decode(errors="replace")


def _dask_spans(receiver, out, keys):
    """{key: (dask.task span, dask.execute span)} once both arrived for every key, and the dask.compute spans."""
    def ready():
        spans = [s for _res, s in receiver.spans()]
        got: dict = {}
        for s in spans:
            k = attrs(s.attributes).get("dask.task.key")
            if k in keys and s.name.startswith(("dask.task ", "dask.execute ")):
                got.setdefault(k, {})[s.name.split()[0]] = s
        if all(len(got.get(k, {})) == 2 for k in keys):
            return got, [s for s in spans if s.name == "dask.compute"]
        return None

    return receiver.wait_for(ready, timeout=60)


def _check_parents(receiver, out, keys, batched: bool = False):
    """Each task's dask.task and dask.execute spans: in the client span's trace, children of the dask.compute
    span that is the client span's child (or of their batch span, itself linked from a group span there)."""
    got, computes = _dask_spans(receiver, out, keys)
    trace_id = bytes.fromhex(out["trace_id"])
    ours = {s.span_id: s for s in computes if s.trace_id == trace_id and s.parent_span_id.hex() == out["span_id"]}
    # submit, map (and the submit to a worker without evlog): one dask.compute span each, children of app.client
    assert len(ours) == (3 if out["wire"] else 2), computes
    for k in keys:
        for s in got[k].values():
            if batched:
                batch = receiver.wait_for(lambda s=s: [b for _r, b in receiver.spans() if b.span_id == s.parent_span_id])[0]
                assert batch.name == "dask.batch probe" and batch.trace_id == s.trace_id != trace_id
                group = [g for _r, g in receiver.spans() if g.span_id == batch.links[0].span_id][0]
                assert group.name == "dask.group probe" and group.trace_id == trace_id and group.parent_span_id in ours
            else:
                assert s.trace_id == trace_id and s.parent_span_id in ours, (k, s.name)
    return got


def test_b3_carries_dask_tasks_to_the_client_calls_trace_and_its_exporter_reads_it(tmp_path):
    """OTEL_PROPAGATORS=b3: the task and execute spans (built from the scheduler's carriers in the exporter
    process, from the worker's in the worker process) are children of the client call's span; inside the
    task, the context is b3's: its own inject writes a b3 header with the task's span, and it has no
    tracestate (b3 cannot carry one: tracecontext on the wire would have brought ``vendor=x``). A worker
    without evlog shows the carrier on the wire: b3's header, not a traceparent."""
    with PlainReceiver() as r:
        out, err = _run(tmp_path, r, OTEL_PROPAGATORS="b3", APP_PLAIN_WORKER="1")
        assert "trace context" not in err and "OTEL_PROPAGATORS" not in err, err
        # the carrier on the wire, as a worker without evlog gets it (an ordinary annotation): b3's
        carrier = out["wire"]["evlog.context"]
        assert set(carrier) == {"b3"}, out["wire"]
        assert carrier["b3"].split("-")[0] == out["trace_id"]
        got = _check_parents(r, out, ["probe-one"] + [f"probe-{i}" for i in range(12)])
        for res in [out["one"]] + out["many"]:
            assert res["worker"] and res["pid"] != out["pid"]  # a worker process
            assert set(res["carrier"]) == {"b3"}, res["carrier"]
            b3_trace, b3_span = res["carrier"]["b3"].split("-")[:2]
            assert b3_trace == res["trace_id"] == out["trace_id"]
            key = "probe-one" if res["x"] == -1 else f"probe-{res['x']}"
            assert b3_span == res["span_id"] == got[key]["dask.execute"].span_id.hex()  # the execute span is current
            assert res["tracestate"] == "" and res["baggage"] == {}  # b3 alone carries neither


def test_b3_batch_carriers_of_a_split_computation_give_the_right_parents(tmp_path):
    """A computation over EVLOG_DASK_TRACE_TASKS is split into batches (dask_shape): their carriers are b3
    too, written on the scheduler and read by the workers and by the exporter process."""
    with PlainReceiver() as r:
        out, _err = _run(tmp_path, r, OTEL_PROPAGATORS="b3", EVLOG_DASK_TRACE_TASKS="5")
        _check_parents(r, out, [f"probe-{i}" for i in range(12)], batched=True)
        for res in out["many"]:
            assert set(res["carrier"]) == {"b3"} and res["trace_id"] != out["trace_id"]  # its batch's trace


def test_baggage_and_tracestate_travel_with_dask_and_pool_tasks(tmp_path):
    """The default propagators (tracecontext,baggage): the baggage set around client.submit and the trace's
    tracestate are what the task sees in its worker process (and the exported task spans carry the tracestate), for one task and for every task of a map (one
    extract per carrier serves them all), and in a ProcessPoolExecutor task."""
    with PlainReceiver() as r:
        out, _err = _run(tmp_path, r)
        _check_parents(r, out, ["probe-one"] + [f"probe-{i}" for i in range(12)])
        exported = [s for _r, s in r.spans() if s.name.startswith(("dask.task probe", "dask.execute probe"))]
        assert len(exported) == 26 and {s.trace_state for s in exported} == {"vendor=x"}  # as the SDK gives a child
        tasks = [out["one"]] + out["many"]
        assert len({res["worker"] for res in tasks}) == 2  # both worker processes
        for res in tasks + [out["pooled"]]:
            assert res["pid"] != out["pid"] and res["trace_id"] == out["trace_id"]
            assert res["baggage"] == {"tenant": "blue"}, res
            assert res["tracestate"] == "vendor=x", res
            assert res["carrier"]["traceparent"].split("-")[1:3] == [res["trace_id"], res["span_id"]]
            assert res["carrier"]["tracestate"] == "vendor=x" and res["carrier"]["baggage"] == "tenant=blue"
        assert out["pooled"]["worker"] is None
        pool = r.wait_for(lambda: [s for _r, s in r.spans() if s.name == "futures.task probe"])
        assert pool[0].span_id.hex() == out["pooled"]["span_id"] and pool[0].parent_span_id.hex() == out["span_id"]


def test_the_environment_is_a_carrier_read_with_the_configured_propagators(tmp_path):
    """A parent's context in the environment: B3 under OTEL_PROPAGATORS=b3, BAGGAGE with TRACEPARENT by
    default; a bad value gets one message naming it and the program runs on, in a trace of its own."""
    code = ("from opentelemetry import baggage, trace; sc = trace.get_current_span().get_span_context(); "
            "print(format(sc.trace_id, '032x'), format(sc.span_id, '016x'), dict(baggage.get_all()))")
    tid, sid = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    cases = [({"OTEL_PROPAGATORS": "b3", "B3": f"{tid}-{sid}-1", "TRACEPARENT": f"00-{'1' * 32}-{'2' * 16}-01"},
              f"{tid} {sid} {{}}"),
             ({"TRACEPARENT": f"00-{tid}-{sid}-01", "BAGGAGE": "tenant=blue"}, f"{tid} {sid} {{'tenant': 'blue'}}"),
             ({"OTEL_PROPAGATORS": "b3", "B3": "nonsense"}, f"{0:032x} {0:016x} {{}}")]
    for env, expected in cases:
        proc = run_instrumented(code, env=evlog_env({"EVLOG_SUMMARY": "false", "EVLOG_RUN_DIR": str(tmp_path / "r"),
                                                     **env}))
        assert proc.returncode == 0 and proc.stdout.decode().strip() == expected, (env, proc.stderr.decode())
    assert "evlog: B3='nonsense': not a valid trace context for OTEL_PROPAGATORS='b3'; ignoring it" in \
        proc.stderr.decode()
