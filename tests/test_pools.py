"""concurrent.futures and multiprocessing under evlog-instrument, checked at a real OTLP receiver.

One program per start method (fork, spawn, forkserver) drives every pool API, each call under its own
"submit ..." span, and prints which process ran each call; the receiver must get exactly one task span
per call, in the submitter's trace, under the submitter's span, from the process that ran the call.
Export is delayed far beyond the run (OTEL_BSP_SCHEDULE_DELAY), so everything that arrives went out
through the exit paths: executor shutdown, Pool.__exit__'s SIGTERM, Process exit.
"""
from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented
from receiver import CollectingReceiver

# Nothing leaves a process before it exits, so the exit paths are what deliver the spans. (It also keeps
# the parent from building an exporter in a background thread while it forks workers: see the
# fork limit in docs/pools.md.)
NO_TIMER = {"OTEL_BSP_SCHEDULE_DELAY": "600000", "EVLOG_CONSUMERS": "none"}

POOLS_PROGRAM = r'''
import concurrent.futures as cf, json, multiprocessing as mp, os, sys
from opentelemetry import baggage, context, trace

tracer = trace.get_tracer("test.pools")

def pid(_=None):
    return os.getpid()

def pid2(a, b):
    return os.getpid()

def fail(x):
    raise ValueError(f"bad {x}")

def nested(_):
    task = trace.get_current_span()
    task.set_attribute("user.key", 7)
    task.add_event("user.event", {"n": 1})
    with tracer.start_as_current_span("user.inner") as s:
        return os.getpid(), format(s.get_span_context().span_id, "016x")

def tenant(_):
    return os.getpid(), baggage.get_baggage("tenant")

def to_queue(q):
    q.put(os.getpid())

class Worker(mp.Process):
    def __init__(self, q):
        super().__init__()
        self.q = q

    def run(self):
        self.q.put(os.getpid())

def main(method):
    ctx = mp.get_context(method)
    out = {"main_pid": os.getpid(), "calls": {}, "submitters": {}}
    with tracer.start_as_current_span("root") as root:
        out["trace_id"] = format(root.get_span_context().trace_id, "032x")

        def call(api, fn):
            with tracer.start_as_current_span("submit " + api) as s:
                out["submitters"][api] = format(s.get_span_context().span_id, "016x")
                out["calls"][api] = fn()

        with cf.ProcessPoolExecutor(2, mp_context=ctx) as ex:
            call("ppe.map", lambda: list(ex.map(pid, range(8))))
            call("ppe.map_chunks", lambda: list(ex.map(pid, range(8), chunksize=3)))
            call("ppe.submit", lambda: [ex.submit(pid, i).result() for i in range(4)])
            call("ppe.nested", lambda: [ex.submit(nested, 0).result()])
            token = context.attach(baggage.set_baggage("tenant", "blue"))
            call("ppe.baggage", lambda: [ex.submit(tenant, 0).result()])
            context.detach(token)
            try:
                call("ppe.fail", lambda: ex.submit(fail, 1).result())
            except ValueError as e:
                out["ppe.fail"] = [type(e).__name__, str(e)]
        with ctx.Pool(2) as p:  # __exit__ terminates the workers (SIGTERM)
            call("pool.map", lambda: p.map(pid, range(8)))
            call("pool.map_async", lambda: p.map_async(pid, range(5)).get(60))
            call("pool.starmap", lambda: p.starmap(pid2, [(i, i) for i in range(5)]))
            call("pool.imap", lambda: list(p.imap(pid, range(6))))
            call("pool.imap_chunks", lambda: list(p.imap(pid, range(7), chunksize=3)))
            call("pool.imap_unordered", lambda: list(p.imap_unordered(pid, range(6))))
            call("pool.apply_async", lambda: [p.apply_async(pid, (i,)).get(60) for i in range(4)])
            call("pool.apply", lambda: [p.apply(pid, (1,))])
            try:
                call("pool.fail", lambda: p.apply_async(fail, (2,)).get(60))
            except ValueError as e:
                out["pool.fail"] = [type(e).__name__, str(e)]
        q = ctx.Queue()

        def processes(make):
            ps = [make() for _ in range(2)]
            for x in ps:
                x.start()
            got = sorted(q.get(timeout=60) for _ in ps)
            for x in ps:
                x.join(60)
            return got

        call("process.target", lambda: processes(lambda: ctx.Process(target=to_queue, args=(q,))))
        call("process.subclass", lambda: processes(lambda: Worker(q)))
    print(json.dumps(out))

if __name__ == "__main__":
    main(sys.argv[1])
'''

# api -> (span name, evlog.pool.kind)
EXPECTED = {
    "ppe.map": ("futures.task pid", "process"),
    "ppe.map_chunks": ("futures.task pid", "process"),
    "ppe.submit": ("futures.task pid", "process"),
    "ppe.nested": ("futures.task nested", "process"),
    "ppe.baggage": ("futures.task tenant", "process"),
    "pool.map": ("multiprocessing.task pid", "mp.pool"),
    "pool.map_async": ("multiprocessing.task pid", "mp.pool"),
    "pool.starmap": ("multiprocessing.task pid2", "mp.pool"),
    "pool.imap": ("multiprocessing.task pid", "mp.pool"),
    "pool.imap_chunks": ("multiprocessing.task pid", "mp.pool"),
    "pool.imap_unordered": ("multiprocessing.task pid", "mp.pool"),
    "pool.apply_async": ("multiprocessing.task pid", "mp.pool"),
    "pool.apply": ("multiprocessing.task pid", "mp.pool"),
    "process.target": ("multiprocessing.task to_queue", "mp.process"),
    "process.subclass": ("multiprocessing.task Worker.run", "mp.process"),
}
FAILING = {"ppe.fail": "futures.task fail", "pool.fail": "multiprocessing.task fail"}


class Run:
    def __init__(self, out: dict, spans: list):
        self.out = out
        self.spans = spans
        self.by_id = {s["span_id"]: s for s in spans}

    def under(self, api: str) -> list:
        """Spans whose parent is the 'submit <api>' span."""
        return [s for s in self.spans if s["parent_span_id"] == self.out["submitters"][api]]

    def tasks(self) -> list:
        return [s for s in self.spans if s["name"].startswith(("futures.task ", "multiprocessing.task "))]


def _pid_of(value):
    return value[0] if isinstance(value, list) else value


def _program_runs(tmp_path_factory, program: str, method: str, extra_env: dict, spans):
    """Run ``program`` (its argument: the start method) under evlog-instrument at a receiver of its own;
    yield its Run once the receiver has all ``spans(out, received)`` says."""
    script = tmp_path_factory.mktemp(f"pools-{method}") / "pools_app.py"
    script.write_text(program)
    receiver = CollectingReceiver().start()
    try:
        env = evlog_env({**receiver.env("grpc"), **extra_env})
        proc = run_instrumented([PYTHON, str(script), method], env=env, timeout=240)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        out["script"], out["method"] = str(script), method
        receiver.wait_for(lambda: spans(out, receiver.spans()), timeout=60)
        yield Run(out, receiver.spans())
    finally:
        receiver.stop()


@pytest.fixture(scope="module", params=["fork", "spawn", "forkserver"])
def pools_run(request, tmp_path_factory):
    def arrived(out, spans):
        calls = sum(len(v) for k, v in out["calls"].items() if k in EXPECTED) + len(FAILING)
        return len(Run(out, spans).tasks()) >= calls

    # EVLOG_POOL_SPANS=call: a span per call of every API (chunked maps included; chunk spans are the default)
    yield from _program_runs(tmp_path_factory, POOLS_PROGRAM, request.param, {**NO_TIMER, "EVLOG_POOL_SPANS": "call"},
                             arrived)


def test_one_span_per_call_for_every_pool_api(pools_run):
    for api, (name, kind) in EXPECTED.items():
        spans = [s for s in pools_run.under(api) if s["name"].startswith(("futures.task", "multiprocessing.task"))]
        assert len(spans) == len(pools_run.out["calls"][api]), api
        assert {s["name"] for s in spans} == {name}, api
        assert {s["attributes"]["evlog.pool.kind"] for s in spans} == {kind}, api
        assert {s["kind"] for s in spans} == {"CONSUMER"}, api


def test_task_spans_are_children_of_the_submitters_span_in_its_trace(pools_run):
    tasks = pools_run.tasks()
    assert tasks and {s["trace_id"] for s in tasks} == {pools_run.out["trace_id"]}
    submitters = set(pools_run.out["submitters"].values())
    assert all(s["parent_span_id"] in submitters for s in tasks)


def test_each_call_is_recorded_by_the_process_that_ran_it(pools_run):
    main_pid = pools_run.out["main_pid"]
    for api in EXPECTED:
        ran = Counter(_pid_of(v) for v in pools_run.out["calls"][api])
        recorded = Counter(s["resource"]["process.pid"] for s in pools_run.under(api) if s["name"] != "user.inner")
        assert recorded == ran, api
        assert main_pid not in recorded, api


def test_pool_machinery_makes_no_spans_of_its_own(pools_run):
    names = {s["name"] for s in pools_run.spans}
    expected = {"root", "user.inner"} | {f"submit {api}" for api in pools_run.out["submitters"]}
    expected |= {name for name, _ in EXPECTED.values()} | set(FAILING.values())
    assert names == expected


def test_failed_call_is_an_error_span_and_the_exception_reaches_the_caller(pools_run):
    assert pools_run.out["ppe.fail"] == ["ValueError", "bad 1"]
    assert pools_run.out["pool.fail"] == ["ValueError", "bad 2"]
    for api, name in FAILING.items():
        (span,) = [s for s in pools_run.under(api) if s["name"] == name]
        assert span["status_code"] == "ERROR" and "ValueError" in span["status_message"]
        (event,) = [e for e in span["events"] if e["name"] == "exception"]
        assert event["attributes"]["exception.type"] == "ValueError"
        assert "observed/pools/context.py" not in event["attributes"]["exception.stacktrace"]  # evlog's frame is not shown


def test_user_spans_in_a_task_nest_under_the_task_span(pools_run):
    ((_pid, inner_id),) = pools_run.out["calls"]["ppe.nested"]
    inner = pools_run.by_id[inner_id]
    task = pools_run.by_id[inner["parent_span_id"]]
    assert task["name"] == "futures.task nested"
    assert task["parent_span_id"] == pools_run.out["submitters"]["ppe.nested"]


def test_the_task_span_is_the_current_span_the_function_can_annotate(pools_run):
    (task,) = [s for s in pools_run.under("ppe.nested") if s["name"] == "futures.task nested"]
    assert task["attributes"]["user.key"] == 7
    assert task["attributes"]["code.function.name"] == "__main__.nested"
    assert [(e["name"], e["attributes"]) for e in task["events"]] == [("user.event", {"n": 1})]


def test_baggage_travels_with_the_task(pools_run):
    ((_pid, value),) = pools_run.out["calls"]["ppe.baggage"]
    assert value == "blue"


THREADS_PROGRAM = r'''
import concurrent.futures as cf, json, os, threading
from multiprocessing.pool import ThreadPool
from opentelemetry import trace

tracer = trace.get_tracer("test.threads")

def where(_=None):
    return threading.current_thread().name

def user_span(name):
    with tracer.start_as_current_span(name):
        pass

class Sub(threading.Thread):
    def run(self):
        user_span("user.subclass")

out = {"pid": os.getpid(), "submitters": {}, "calls": {}}
with tracer.start_as_current_span("root") as root:
    out["trace_id"] = format(root.get_span_context().trace_id, "032x")
    def under(api):
        s = tracer.start_span("submit " + api)
        out["submitters"][api] = format(s.get_span_context().span_id, "016x")
        return s
    with cf.ThreadPoolExecutor(2) as ex:
        with trace.use_span(under("tpe.map"), end_on_exit=True):
            out["calls"]["tpe.map"] = list(ex.map(where, range(6)))
        with trace.use_span(under("tpe.submit"), end_on_exit=True):
            out["calls"]["tpe.submit"] = [ex.submit(where).result() for _ in range(3)]
    with ThreadPool(2) as tp:
        with trace.use_span(under("threadpool.map"), end_on_exit=True):
            out["calls"]["threadpool.map"] = tp.map(where, range(5))
    with trace.use_span(under("threads"), end_on_exit=True):
        ts = [threading.Thread(target=user_span, args=("user.thread",)),
              threading.Timer(0.01, user_span, args=("user.timer",)), Sub()]
        for t in ts:
            t.start()
    for t in ts:
        t.join(30)
print(json.dumps(out))
'''


def test_thread_pools_and_plain_threads_join_the_submitters_trace(otlp_receiver, tmp_path):
    proc = run_instrumented(THREADS_PROGRAM, env=evlog_env({**otlp_receiver.env("grpc"), **NO_TIMER}), timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    users = {"user.thread", "user.timer", "user.subclass"}
    otlp_receiver.wait_for(lambda: users <= {s["name"] for s in otlp_receiver.spans()})
    spans = otlp_receiver.spans()
    for api, name, kind in (("tpe.map", "futures.task where", "thread"), ("tpe.submit", "futures.task where", "thread"),
                            ("threadpool.map", "multiprocessing.task where", "mp.threadpool")):
        got = [s for s in spans if s["parent_span_id"] == out["submitters"][api]]
        assert {s["name"] for s in got} == {name}
        assert Counter(s["attributes"]["thread.name"] for s in got) == Counter(out["calls"][api]), api
        assert {s["attributes"]["evlog.pool.kind"] for s in got} == {kind}
        assert {s["resource"]["process.pid"] for s in got} == {out["pid"]}
    for name in ("user.thread", "user.timer", "user.subclass"):  # context only: no span for the thread itself
        (s,) = [s for s in spans if s["name"] == name]
        assert s["trace_id"] == out["trace_id"] and s["parent_span_id"] == out["submitters"]["threads"], name
    assert not [s for s in spans if s["name"].startswith("futures.task") and "Thread" in s["name"]]


ERRORS_PROGRAM = r'''
import concurrent.futures as cf, multiprocessing as mp, re, sys, traceback

def square(x):
    return x * x

def boom(x):
    raise KeyError(x)

def show(label, fn):
    try:
        r = fn()
        print(label, "ok", r)
    except BaseException as e:
        text = "".join(traceback.format_exception_only(type(e), e)).strip()
        cause = e.__cause__
        remote = str(cause) if cause is not None else ""
        print(label, type(e).__module__, type(e).__qualname__, re.sub(r"0x[0-9a-f]+", "0x", text))
        print(label, "remote", re.sub(r"0x[0-9a-f]+", "0x", remote).replace("\n", "|"))

def main():
    def local(x):
        return x
    ctx = mp.get_context(sys.argv[1])
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as ex:
        show("ppe.lambda", lambda: ex.submit(lambda: 1).result())
        show("ppe.local.map", lambda: list(ex.map(local, [1, 2])))
        show("ppe.raise", lambda: ex.submit(boom, "k").result())
        show("ppe.ok", lambda: ex.submit(square, 3).result())
    with ctx.Pool(2) as p:
        show("pool.lambda", lambda: p.map(lambda x: x, [1, 2]))
        show("pool.local", lambda: p.apply_async(local, (1,)).get(60))
        show("pool.raise", lambda: p.map(boom, ["a"]))
        show("pool.ok", lambda: p.map(square, [2]))
    with cf.ThreadPoolExecutor(1) as tx:
        show("tpe.raise", lambda: tx.submit(boom, "t").result())

if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pickling_errors_and_task_exceptions_are_exactly_as_without_evlog(otlp_receiver, tmp_path, method):
    script = tmp_path / "errors_app.py"
    script.write_text(ERRORS_PROGRAM)
    plain = subprocess.run([PYTHON, str(script), method], env=evlog_env(), capture_output=True, timeout=120)
    traced = run_instrumented([PYTHON, str(script), method], env=evlog_env({**otlp_receiver.env("grpc"), **NO_TIMER}),
                              timeout=120)
    assert plain.returncode == 0 and traced.returncode == 0, traced.stderr.decode(errors="replace")
    assert traced.stdout.decode() == plain.stdout.decode()
    assert "Can't pickle" in plain.stdout.decode()  # the program did meet the errors it is about
    # ...and evlog was on: the calls that ran are traced, the failing ones as errors
    def ran():
        got = [s for s in otlp_receiver.spans() if s["name"].endswith((" square", " boom"))]
        return got if len(got) >= 5 else None

    spans = otlp_receiver.wait_for(ran)
    assert Counter((s["name"], s["status_code"]) for s in spans) == Counter({
        ("futures.task square", "UNSET"): 1, ("futures.task boom", "ERROR"): 2,
        ("multiprocessing.task square", "UNSET"): 1, ("multiprocessing.task boom", "ERROR"): 1})


SUBCLASS_PROGRAM = r'''
import concurrent.futures as cf, json, multiprocessing as mp, multiprocessing.pool as mpp, os

def pid(_=None):
    return os.getpid()

class CountingExecutor(cf.ProcessPoolExecutor):
    submitted = 0
    def submit(self, fn, /, *args, **kwargs):
        type(self).submitted += 1
        return super().submit(fn, *args, **kwargs)

class CountingThreads(cf.ThreadPoolExecutor):
    def map(self, fn, *its, **kw):
        return [x for x in super().map(fn, *its, **kw)]

class LoggingPool(mpp.Pool):
    def apply_async(self, func, args=(), kwds={}, callback=None, error_callback=None):
        self.seen = getattr(self, "seen", 0) + 1
        return super().apply_async(func, args, kwds, callback, error_callback)

if __name__ == "__main__":
    out = {}
    with CountingExecutor(2, mp_context=mp.get_context("fork")) as ex:
        out["ppe"] = [ex.submit(pid, i).result() for i in range(3)] + list(ex.map(pid, range(3)))
    out["ppe_submitted"] = CountingExecutor.submitted
    with CountingThreads(2) as tx:
        out["tpe"] = tx.map(pid, range(3))
    with LoggingPool(2, context=mp.get_context("fork")) as p:
        out["pool"] = [p.apply_async(pid, (i,)).get(60) for i in range(3)] + p.map(pid, range(3))
        out["pool_seen"] = p.seen
    print(json.dumps(out))
'''


def test_subclassed_executors_and_pools_keep_working(otlp_receiver, tmp_path):
    script = tmp_path / "subclass_app.py"
    script.write_text(SUBCLASS_PROGRAM)
    env = evlog_env({**otlp_receiver.env("grpc"), **NO_TIMER})
    traced = run_instrumented([PYTHON, str(script)], env=env, timeout=120)
    assert traced.returncode == 0, traced.stderr.decode(errors="replace")
    out = json.loads(traced.stdout.decode().strip().splitlines()[-1])
    assert out["ppe_submitted"] == 6 and out["pool_seen"] == 3
    otlp_receiver.wait_for(lambda: len(otlp_receiver.spans()) >= 15)
    spans = otlp_receiver.spans()
    by = Counter((s["name"], s["attributes"]["evlog.pool.kind"]) for s in spans)
    assert by == Counter({("futures.task pid", "process"): 6, ("futures.task pid", "thread"): 3,
                          ("multiprocessing.task pid", "mp.pool"): 6})
    assert Counter(s["resource"]["process.pid"] for s in spans if s["attributes"]["evlog.pool.kind"] == "process") \
        == Counter(out["ppe"])


UNINSTRUMENT_PROGRAM = r'''
import concurrent.futures as cf, json, multiprocessing as mp, threading
import multiprocessing.pool, multiprocessing.process
import evlog
from evlog.observed import boot

def wrapped():
    """Which of the patched methods are evlog's wrappers now."""
    now = {
        "tpe": cf.ThreadPoolExecutor.__dict__["submit"], "ppe": cf.ProcessPoolExecutor.__dict__["submit"],
        "pool": mp.pool.Pool.__dict__["apply_async"], "start": mp.process.BaseProcess.__dict__["start"],
        "thread": threading.Thread.__dict__["start"],
    }
    return {name: hasattr(f, "__wrapped__") for name, f in now.items()}

evlog.configure()
found = {"wrapped before": wrapped()}
for name in ("futures", "multiprocessing"):
    boot.active_instrumentors()[name].uninstrument()
found["wrapped after"] = wrapped()
with cf.ThreadPoolExecutor(1) as ex:
    found["2 ** 3 while off"] = ex.submit(pow, 2, 3).result()
for name in ("futures", "multiprocessing"):
    boot.active_instrumentors()[name].instrument()
with cf.ThreadPoolExecutor(1) as ex:
    found["2 ** 4 on again"] = ex.submit(pow, 2, 4).result()
print(json.dumps(found))
'''


def test_uninstrument_restores_the_originals_and_instrument_puts_them_back(otlp_receiver):
    env = evlog_env(otlp_receiver.env("grpc"))
    proc = subprocess.run([PYTHON, "-c", UNINSTRUMENT_PROGRAM], env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    found = json.loads(proc.stdout)
    patched = ("tpe", "ppe", "pool", "start", "thread")
    assert found["wrapped before"] == dict.fromkeys(patched, True), found
    assert found["wrapped after"] == dict.fromkeys(patched, False), found
    assert found["2 ** 3 while off"] == 8 and found["2 ** 4 on again"] == 16, found
    otlp_receiver.wait_for(lambda: [s for s in otlp_receiver.spans() if s["name"] == "futures.task pow"])
    assert len([s for s in otlp_receiver.spans() if s["name"] == "futures.task pow"]) == 1  # only while instrumented


TERMINATE_PROGRAM = r'''
import json, multiprocessing as mp, os, sys, time
from opentelemetry import trace

def quick(_):
    return os.getpid()

def hang(path):
    open(path, "w").close()
    time.sleep(120)  # a task still running when the pool is terminated

if __name__ == "__main__":
    flag = sys.argv[1]
    with trace.get_tracer("t").start_as_current_span("root"):
        with mp.get_context("fork").Pool(2) as p:
            done = p.map(quick, range(6), chunksize=1)
            p.apply_async(hang, (flag,))
            deadline = time.monotonic() + 60
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert os.path.exists(flag)
    print(json.dumps(done))
'''


def test_pool_terminate_flushes_its_workers_and_ends_the_call_it_cut_short(otlp_receiver, tmp_path):
    script = tmp_path / "terminate_app.py"
    script.write_text(TERMINATE_PROGRAM)
    env = evlog_env({**otlp_receiver.env("grpc"), **NO_TIMER})
    proc = run_instrumented([PYTHON, str(script), str(tmp_path / "started")], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    ran = Counter(json.loads(proc.stdout.decode().strip().splitlines()[-1]))
    otlp_receiver.wait_for(lambda: [s for s in otlp_receiver.spans() if s["name"] == "multiprocessing.task hang"])
    spans = otlp_receiver.spans()
    assert Counter(s["resource"]["process.pid"] for s in spans if s["name"] == "multiprocessing.task quick") == ran
    (hang,) = [s for s in spans if s["name"] == "multiprocessing.task hang"]
    assert hang["status_code"] == "ERROR" and "exited while the task was running" in hang["status_message"]


FORK_TERM_PROGRAM = r'''
import multiprocessing, os, signal, time

try:  # one CPU, real-time: after fork() the parent runs on and the child waits, so the SIGTERM
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # reaches a child that has not run yet
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
except (PermissionError, OSError):
    print("skip")
    raise SystemExit(0)
lost = 0
for _ in range(30):
    pid = os.fork()
    if pid == 0:
        time.sleep(3)  # only a SIGTERM ends this early
        os._exit(3)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM):
        lost += 1
print(lost)
'''


def test_sigterm_right_after_fork_is_not_lost():
    """evlog's SIGTERM handler is inherited by forked workers, and CPython drops a signal its C handler
    caught before the child's interpreter was ready: without the fork guard every one of these children
    ignores its SIGTERM (a pool worker so terminated blocks Pool.__exit__ for ever)."""
    proc = run_instrumented(FORK_TERM_PROGRAM, env=evlog_env(NO_TIMER), timeout=240)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    result = proc.stdout.decode().strip().splitlines()[-1]
    if result == "skip":
        pytest.skip("needs SCHED_FIFO to order the fork deterministically")
    assert result == "0"


POOL_EXIT_PROGRAM = r'''
import multiprocessing as mp, os, sys

def pid(_):
    return os.getpid()

if __name__ == "__main__":
    ran = 0
    for _ in range(int(sys.argv[1])):
        with mp.get_context("fork").Pool(2) as p:  # workers are terminated as they go back to the queue
            ran += len(p.map(pid, range(4), chunksize=1))
    print(ran)
'''


def test_pool_context_exit_never_hangs_and_loses_nothing(otlp_receiver, tmp_path):
    script = tmp_path / "pool_exit_app.py"
    script.write_text(POOL_EXIT_PROGRAM)
    env = evlog_env({**otlp_receiver.env("grpc"), **NO_TIMER})
    proc = run_instrumented([PYTHON, str(script), "40"], env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stdout.decode().strip().splitlines()[-1] == "160"
    otlp_receiver.wait_for(lambda: len([s for s in otlp_receiver.spans() if s["name"] == "multiprocessing.task pid"]) >= 160)
    assert len({s["span_id"] for s in otlp_receiver.spans() if s["name"] == "multiprocessing.task pid"}) == 160


LIBRARY_POOLS_PROGRAM = r'''
import asyncio, json
from opentelemetry import trace

def user_work(x):
    return x + 1

async def main():
    loop = asyncio.get_running_loop()
    with trace.get_tracer("t").start_as_current_span("submit asyncio") as s:
        out = {"submitter": format(s.get_span_context().span_id, "016x")}
        out["asyncio"] = await loop.run_in_executor(None, user_work, 1)
    return out

if __name__ == "__main__":
    out = asyncio.run(main())
    from distributed import Client
    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0") as client:
        out["dask"] = client.gather(client.map(user_work, range(5)))
    print(json.dumps(out))
'''


def test_user_work_in_library_executors_is_traced_but_library_internals_are_not(otlp_receiver, tmp_path):
    pytest.importorskip("distributed")
    script = tmp_path / "library_app.py"
    script.write_text(LIBRARY_POOLS_PROGRAM)
    env = evlog_env({**otlp_receiver.env("grpc"), **NO_TIMER, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "dask"})
    proc = run_instrumented([PYTHON, str(script)], env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert out["asyncio"] == 2 and out["dask"] == [1, 2, 3, 4, 5]
    otlp_receiver.wait_for(lambda: [s for s in otlp_receiver.spans() if s["name"] == "futures.task user_work"])
    tasks = [s for s in otlp_receiver.spans() if s["name"].startswith(("futures.task", "multiprocessing.task"))]
    # asyncio's run_in_executor hands the user's function to a ThreadPoolExecutor: one span, in context;
    # Dask runs tasks (and its own offloading) on its executors: those are Dask's, not the user's submits
    assert [(s["name"], s["parent_span_id"]) for s in tasks] == [("futures.task user_work", out["submitter"])]


def _square(x):
    return x * x


def test_tasks_of_one_function_and_context_are_rebuilt_once_where_they_run():
    """imap pickles the Task with every item: the context is pickled once per submitting context, and
    the process that runs the items rebuilds one Task per (function, context), so it restores the
    context and names the span once. Other callables (partials, methods) are rebuilt item by item."""
    import functools
    import pickle

    from opentelemetry import baggage, context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    from evlog.observed.pools import context as _context

    sc = SpanContext(0x1234, 0x5678, False, TraceFlags(1))
    token = context.attach(baggage.set_baggage("tenant", "a", trace.set_span_in_context(NonRecordingSpan(sc))))
    try:
        task = _context.wrap(_square, "mp.pool")
        other = _context.wrap(functools.partial(_square), "mp.pool")
        assert _context.wrap(_square, "mp.pool").__reduce__()[1][1] is task.__reduce__()[1][1]  # one blob
    finally:
        context.detach(token)
    received = [pickle.loads(pickle.dumps(task)) for _ in range(3)]
    assert received[0] is received[1] is received[2] and received[0] is not task
    assert received[0](3) == 9
    restored = received[0].parent
    assert trace.get_current_span(restored).get_span_context()[:2] == (0x1234, 0x5678)
    assert baggage.get_baggage("tenant", restored) == "a"
    partials = [pickle.loads(pickle.dumps(other)) for _ in range(2)]
    assert partials[0] is not partials[1] and partials[0](4) == 16


# EVLOG_POOL_SPANS=chunk (the default): one span per chunk that the pool sends to a worker as one message.
CHUNKS_PROGRAM = r'''
import concurrent.futures as cf, json, multiprocessing as mp, os, sys, threading
from multiprocessing.pool import ThreadPool
from opentelemetry import trace

tracer = trace.get_tracer("test.chunks")

def pid(_=None):
    return os.getpid()

def pid2(a, b):
    return os.getpid()

def where(_):
    return threading.current_thread().name

def fail_at_4(x):
    if x == 4:
        raise ValueError(f"bad {x}")
    return os.getpid()

def main(method):
    ctx = mp.get_context(method)
    out = {"main_pid": os.getpid(), "calls": {}, "submitters": {}, "errors": {}}
    with tracer.start_as_current_span("root") as root:
        out["trace_id"] = format(root.get_span_context().trace_id, "032x")

        def call(api, fn):
            with tracer.start_as_current_span("submit " + api) as s:
                out["submitters"][api] = format(s.get_span_context().span_id, "016x")
                try:
                    out["calls"][api] = fn()
                except ValueError as e:
                    out["errors"][api] = [type(e).__name__, str(e), str(e.__cause__)]

        p = ctx.Pool(2)
        call("pool.map", lambda: p.map(pid, range(8), chunksize=3))
        call("pool.map_async", lambda: p.map_async(pid, range(5), chunksize=2).get(60))
        call("pool.map_auto", lambda: p.map(pid, range(20)))  # the pool's chunksize: 20 / (2 workers * 4), 3
        call("pool.starmap", lambda: p.starmap(pid2, [(i, i) for i in range(7)], chunksize=3))
        call("pool.starmap_async", lambda: p.starmap_async(pid2, [(i, i) for i in range(4)], chunksize=4).get(60))
        call("pool.imap", lambda: list(p.imap(pid, range(7), chunksize=3)))
        call("pool.imap_unordered", lambda: list(p.imap_unordered(pid, range(7), chunksize=3)))
        call("pool.map_one", lambda: p.map(pid, range(3), chunksize=1))
        call("pool.imap_one", lambda: list(p.imap(pid, range(3))))
        call("pool.apply", lambda: [p.apply(pid, (1,)), p.apply_async(pid, (2,)).get(60)])
        call("pool.fail", lambda: p.map(fail_at_4, range(6), chunksize=3))
        p.close()
        p.join()
        with cf.ProcessPoolExecutor(2, mp_context=ctx) as ex:
            call("ppe.map", lambda: list(ex.map(pid, range(8), chunksize=3)))
            call("ppe.map_one", lambda: list(ex.map(pid, range(3))))
            call("ppe.submit", lambda: [ex.submit(pid, i).result() for i in range(2)])
            call("ppe.fail", lambda: list(ex.map(fail_at_4, range(6), chunksize=3)))
        with ThreadPool(2) as tp:
            call("threadpool.map", lambda: tp.map(where, range(8), chunksize=3))
    print(json.dumps(out))

if __name__ == "__main__":
    main(sys.argv[1])
'''
CHUNK_ENV = NO_TIMER  # EVLOG_POOL_SPANS left unset: chunk spans are the default

# api -> (chunk span name, evlog.pool.kind, evlog.pool.calls of its chunks of 2 or more items, in the
# map's order); a chunk of one item is a call sent alone: it gets a task span (SINGLE)
CHUNKED = {
    "pool.map": ("multiprocessing.chunk pid", "mp.pool", [3, 3, 2]),
    "pool.map_async": ("multiprocessing.chunk pid", "mp.pool", [2, 2]),
    "pool.map_auto": ("multiprocessing.chunk pid", "mp.pool", [3, 3, 3, 3, 3, 3, 2]),
    "pool.starmap": ("multiprocessing.chunk pid2", "mp.pool", [3, 3]),
    "pool.starmap_async": ("multiprocessing.chunk pid2", "mp.pool", [4]),
    "pool.imap": ("multiprocessing.chunk pid", "mp.pool", [3, 3]),
    "pool.imap_unordered": ("multiprocessing.chunk pid", "mp.pool", [3, 3]),
    "ppe.map": ("futures.chunk pid", "process", [3, 3, 2]),
    "threadpool.map": ("multiprocessing.chunk where", "mp.threadpool", [3, 3, 2]),
}
SINGLE = {"pool.map_async": "multiprocessing.task pid", "pool.starmap": "multiprocessing.task pid2",
          "pool.imap": "multiprocessing.task pid", "pool.imap_unordered": "multiprocessing.task pid"}
# sent one call per message: a task span per call in either mode
PER_CALL = {
    "pool.map_one": "multiprocessing.task pid",
    "pool.imap_one": "multiprocessing.task pid",
    "pool.apply": "multiprocessing.task pid",
    "ppe.map_one": "futures.task pid",
    "ppe.submit": "futures.task pid",
}
CHUNK_FAILING = {"pool.fail": "multiprocessing.chunk fail_at_4", "ppe.fail": "futures.chunk fail_at_4"}


@pytest.fixture(scope="module", params=["fork", "spawn"])
def chunks_run(request, tmp_path_factory):
    def arrived(out, spans):
        n = len(CHUNK_FAILING) * 2 + sum(len(c) for _, _, c in CHUNKED.values()) + len(SINGLE)
        n += sum(len(out["calls"][api]) for api in PER_CALL)
        return len([s for s in spans if s["name"].endswith((" pid", " pid2", " where", " fail_at_4"))]) >= n

    yield from _program_runs(tmp_path_factory, CHUNKS_PROGRAM, request.param, CHUNK_ENV, arrived)


def test_chunked_maps_make_one_span_per_chunk_by_default(chunks_run):
    for api, (name, kind, calls) in CHUNKED.items():
        spans = [s for s in chunks_run.under(api) if s["name"] == name]
        singles = [s for s in chunks_run.under(api) if s["name"] != name]
        assert [s["name"] for s in singles] == [SINGLE.get(api)] * (api in SINGLE), api
        spans.sort(key=lambda s: s["attributes"]["evlog.pool.chunk.first"])
        assert [s["attributes"]["evlog.pool.calls"] for s in spans] == calls, api
        firsts = [sum(calls[:i]) for i in range(len(calls))]  # each chunk's first item in the map
        assert [s["attributes"]["evlog.pool.chunk.first"] for s in spans] == firsts, api
        assert sum(calls) + len(singles) == len(chunks_run.out["calls"][api]), api
        assert {s["attributes"]["evlog.pool.kind"] for s in spans} == {kind}, api
        assert {s["attributes"]["code.function.name"] for s in spans} == {"__main__." + name.split()[1]}, api
        assert {s["kind"] for s in spans} == {"CONSUMER"}, api


def test_a_chunk_span_carries_its_calls_timing_and_the_slowest_calls_index(chunks_run):
    chunks = [s for s in chunks_run.spans if ".chunk " in s["name"] and s["status_code"] != "ERROR"]
    assert chunks
    for s in chunks:
        a = s["attributes"]
        seconds = (s["end"] - s["start"]) / 1e9
        assert 0 < a["evlog.pool.call.min"] <= a["evlog.pool.call.mean"] <= a["evlog.pool.call.max"] <= seconds, a
        assert a["evlog.pool.call.mean"] * a["evlog.pool.calls"] <= seconds, a
        first, calls = a["evlog.pool.chunk.first"], a["evlog.pool.calls"]
        assert first <= a["evlog.pool.call.slowest_index"] < first + calls, a
        assert 1 <= a["evlog.pool.call.slowest_calls"] <= calls, a
    threads = Counter()  # ThreadPool: each chunk ran on one pool thread, named on its span
    for s in chunks_run.under("threadpool.map"):
        threads[s["attributes"]["thread.name"]] += s["attributes"]["evlog.pool.calls"]
    assert threads == Counter(chunks_run.out["calls"]["threadpool.map"])


def test_chunk_spans_are_in_the_submitters_trace_and_recorded_by_the_worker_that_ran_them(chunks_run):
    chunks = [s for s in chunks_run.spans if ".chunk " in s["name"]]
    assert chunks and {s["trace_id"] for s in chunks} == {chunks_run.out["trace_id"]}
    for api in CHUNKED:
        if api.startswith("threadpool."):
            continue
        ran = Counter(chunks_run.out["calls"][api])  # the worker pid of every item
        recorded = Counter()
        for s in chunks_run.under(api):
            recorded[s["resource"]["process.pid"]] += s["attributes"].get("evlog.pool.calls", 1)  # 1: a task span
        assert recorded == ran, api
        assert chunks_run.out["main_pid"] not in recorded, api


def test_chunk_mode_keeps_a_span_per_call_for_calls_sent_one_by_one(chunks_run):
    assert [s for s in chunks_run.spans if ".chunk " in s["name"]], "chunk mode is on in this run"
    for api, name in PER_CALL.items():
        spans = chunks_run.under(api)
        assert [s["name"] for s in spans] == [name] * len(chunks_run.out["calls"][api]), api
        assert not [s for s in spans if "evlog.pool.calls" in s["attributes"]], api
        assert Counter(s["resource"]["process.pid"] for s in spans) == Counter(chunks_run.out["calls"][api]), api
    names = {s["name"] for s in chunks_run.spans}
    expected = {"root"} | {f"submit {api}" for api in chunks_run.out["submitters"]}
    expected |= {name for name, _, _ in CHUNKED.values()} | set(PER_CALL.values()) | set(CHUNK_FAILING.values())
    expected |= set(SINGLE.values())
    assert names == expected  # and no task span for the items of a chunk


def test_a_failing_item_fails_its_chunk_span_and_raises_as_without_evlog(chunks_run):
    plain = subprocess.run([PYTHON, chunks_run.out["script"], chunks_run.out["method"]], env=evlog_env(),
                           capture_output=True, timeout=120)
    assert plain.returncode == 0, plain.stderr.decode(errors="replace")
    errors = json.loads(plain.stdout.decode().strip().splitlines()[-1])["errors"]
    assert set(errors) == set(CHUNK_FAILING) and "fail_at_4" in errors["pool.fail"][2]
    assert chunks_run.out["errors"] == errors  # type, message and the worker's traceback text, line by line
    for api, name in CHUNK_FAILING.items():
        spans = chunks_run.under(api)
        assert {s["name"] for s in spans} == {name}, api
        # items 0-2, then 3 and 4: the call of item 4 raised, and the chunk stopped there as without evlog
        assert sorted((s["attributes"]["evlog.pool.calls"], s["status_code"]) for s in spans) == [
            (2, "ERROR"), (3, "UNSET")], api
        (span,) = [s for s in spans if s["status_code"] == "ERROR"]
        assert span["status_message"] == "ValueError: bad 4", api
        assert span["attributes"]["evlog.pool.chunk.first"] == 3, api
        (event,) = [e for e in span["events"] if e["name"] == "exception"]
        assert event["attributes"]["exception.type"] == "ValueError"
        assert event["attributes"]["evlog.pool.call.index"] == 4, api
        assert "fail_at_4" in event["attributes"]["exception.stacktrace"]
        assert "observed/pools/context.py" not in event["attributes"]["exception.stacktrace"]  # evlog's frames are not shown


def test_a_chunks_timing_names_the_group_a_straggler_was_timed_in():
    """_chunks._settle on known groups (what _paced noted): a call of 30 us timed alone, 4 calls of 100 ns,
    then 16 calls timed together in 5 ms plus the time of 15 fast ones: the straggler is one of those 16,
    from index 100 + 5, and its time is the group's less 15 calls at the fastest rate, 5 ms."""
    from opentelemetry.trace import SpanContext, TraceFlags

    from evlog.observed.pools import chunks as _chunks
    from evlog.observed.pools import taskspan as _taskspan

    span = _taskspan.TaskSpan("multiprocessing.chunk f", SpanContext(1, 2, False, TraceFlags(1)), None, "s", {}, 0)
    marks = [0, 30_000, 30_400, 30_400 + 5_001_500]  # when each group started, then the end
    _chunks._settle(span, marks, [1, 4, 64], 21, 100)  # the last group was cut to the 16 calls left
    assert span.attributes == {
        "evlog.pool.calls": 21, "evlog.pool.chunk.first": 100, "evlog.pool.call.mean": marks[-1] / 21 / 1e9,
        "evlog.pool.call.min": 100e-9, "evlog.pool.call.max": 0.005, "evlog.pool.call.slowest_index": 105,
        "evlog.pool.call.slowest_calls": 16}


BIG_MAP_PROGRAM = r'''
import json, multiprocessing as mp, time

def f(x):
    return x

if __name__ == "__main__":
    seconds = []
    with mp.Pool(2) as p:
        for _ in range(2):  # in a fresh pool, then again
            t = time.perf_counter()
            got = p.map(f, range(200_000))
            seconds.append(time.perf_counter() - t)
            assert got == list(range(200_000))
    print(json.dumps(seconds))
'''


@pytest.mark.slow
def test_a_pool_map_of_200000_trivial_items_is_traced_whole_with_default_settings(tmp_path):
    """Issue 29: with a span per call this map ran at 0.03-0.05 of plain and could drop spans at exit.
    Default settings (run folder, consumers, capture): chunk spans, every call counted in exactly one,
    nothing dropped. The speed is printed, not judged (benchmarks/pools.py's mp_pool_map holds it)."""
    script = tmp_path / "big_map.py"
    script.write_text(BIG_MAP_PROGRAM)
    plain, traced = [], []
    for i in range(3):  # plain and evlog in turn
        proc = subprocess.run([PYTHON, str(script)], env=evlog_env(), capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        plain.append(json.loads(proc.stdout))
        folder = tmp_path / f"run{i}"
        proc = run_instrumented([PYTHON, str(script)], env=evlog_env(EVLOG_RUN_DIR=str(folder)), timeout=180)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode == 0, err
        traced.append(json.loads(proc.stdout.decode().strip().splitlines()[-1]))
        assert "dropped" not in err and err.startswith("evlog: "), err  # the summary line, and nothing lost
        chunks = sorted((s["attributes"]["evlog.pool.chunk.first"], s["attributes"]["evlog.pool.calls"])
                        for s in read_run_folder(str(folder))["spans"] if s["name"] == "multiprocessing.chunk f")
        one = sorted(set(chunks))  # each map's chunks: the same 8 (the pool's 4 per worker), twice
        assert chunks == sorted(one * 2) and len(one) == 8
        assert [first for first, _ in one] == [sum(n for _, n in one[:j]) for j in range(len(one))]  # contiguous
        assert sum(n for _, n in one) == 200_000
    for i, what in enumerate(("the first map, in a fresh pool", "the second map")):
        p, e = sorted(x[i] for x in plain)[1], sorted(x[i] for x in traced)[1]
        print(f"pool.map of 200,000 trivial items, {what}: evlog at {p / e:.2f} of plain throughput "
              f"(median seconds of 3: plain {p:.3f}, evlog {e:.3f}; a shared machine's figure)")


CHUNK_UNINSTRUMENT_PROGRAM = r'''
import concurrent.futures.process as cfp, json, multiprocessing.pool as mpp, pickle
import evlog
from evlog.observed import boot

originals = {(cfp, "_process_chunk"): cfp._process_chunk, (mpp, "mapstar"): mpp.mapstar,
             (mpp, "starmapstar"): mpp.starmapstar}
cutter = mpp.Pool.__dict__["_get_tasks"]
evlog.configure()

def seen():
    """What the chunk functions and the chunk cutter are now."""
    out = {}
    for (module, name), original in originals.items():
        now = getattr(module, name)
        out[name] = {
            "replaced": now is not original,
            "named as the original": (now.__module__, now.__qualname__) == (original.__module__, original.__qualname__),
            "pickled by reference": pickle.loads(pickle.dumps(now)) is now,  # as it is sent to the workers
        }
    out["_get_tasks"] = {"replaced": mpp.Pool.__dict__["_get_tasks"] is not cutter,  # numbers the chunks
                         "chunks": [[f.__name__, list(args)] for f, args in mpp.Pool._get_tasks(abs, range(5), 2)]}
    return out

found = {"instrumented": seen()}
for name in ("futures", "multiprocessing"):
    boot.active_instrumentors()[name].uninstrument()
found["uninstrumented"] = seen()
for name in ("futures", "multiprocessing"):
    boot.active_instrumentors()[name].instrument()
found["instrumented again"] = seen()
print(json.dumps(found))
'''


def test_chunk_mode_replaces_the_pools_chunk_functions_by_reference_and_uninstrument_restores_them():
    proc = subprocess.run([PYTHON, "-c", CHUNK_UNINSTRUMENT_PROGRAM], env=evlog_env(NO_TIMER), capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    found = json.loads(proc.stdout)
    for when, replaced in (("instrumented", True), ("uninstrumented", False), ("instrumented again", True)):
        for name in ("_process_chunk", "mapstar", "starmapstar"):
            assert found[when][name] == {"replaced": replaced, "named as the original": True,
                                         "pickled by reference": True}, (when, name, found[when][name])
        assert found[when]["_get_tasks"] == {"replaced": replaced, "chunks": [["abs", [0, 1]], ["abs", [2, 3]],
                                                                             ["abs", [4]]]}, (when, found[when])


def test_chunk_spans_are_task_executions_for_the_consumers_and_the_viewer():
    from evlog.data.store import ingest, schema
    from evlog.processors import spans

    for name in ("futures.chunk f", "multiprocessing.chunk Model.predict"):
        assert spans.category_of(name) == spans.COMPUTE, name  # worker saturation counts their time
        assert ingest.span_columns(name, {}, "")[2] == schema.CAT_POOL_TASK, name  # drawn with the pool tasks
