"""EVLOG_SPAN_PROCESSORS: ordinary span processors (and MultiEventLogs) in the run's exporter process see
every task span the run exports, from every process; a bad entry is named and the run goes on."""
from __future__ import annotations

import json
import os
from collections import Counter

from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented

PROBE = r'''
import json, os
from opentelemetry.sdk.trace import SpanProcessor


class Probe(SpanProcessor):
    """Writes one line per span it is given, at shutdown."""
    def __init__(self):
        self.seen = []

    def on_end(self, span):
        self.seen.append({"name": span.name, "span_id": f"{span.context.span_id:016x}",
                          "pid": span.resource.attributes.get("process.pid"), "exporter": os.getpid()})

    def shutdown(self):
        with open(os.environ["PROBE_OUT"], "w") as fh:
            json.dump(self.seen, fh)


def make_log():
    import evlog

    ml = evlog.MultiEventLog()
    out = open(os.environ["PROBE_OUT"] + ".log", "a")

    def consumer(ev):
        out.write(json.dumps([ev.kind, ev.category, ev.name, ev.timeline[0]]) + "\n")
        out.flush()
    ml["probe"] = consumer
    return ml


class NotAProcessor:
    pass
'''

PROGRAM = r"""
import concurrent.futures as cf, os
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert sum(client.gather(client.map(inc, range(20)))) == 210
        workers = client.run(os.getpid)
    with cf.ProcessPoolExecutor(2) as ex:
        assert sum(ex.map(inc, range(10))) == 55
    print(sorted(workers.values()))
"""


def _run(tmp_path, processors: str):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    (tmp_path / "prog.py").write_text(PROGRAM)
    run_dir = tmp_path / "run"
    env = evlog_env({"EVLOG_RUN_DIR": str(run_dir), "EVLOG_SPAN_PROCESSORS": processors,
                     "PROBE_OUT": str(tmp_path / "probe.json"),
                     "PYTHONPATH": os.pathsep.join([str(tmp_path)] + [p for p in [os.environ.get("PYTHONPATH")] if p])})
    proc = run_instrumented([PYTHON, str(tmp_path / "prog.py")], env=env, cwd=str(tmp_path),
                            timeout=180)
    return proc, run_dir


def test_span_processors_in_the_exporter_process_see_every_task_span_of_the_run(tmp_path):
    proc, run_dir = _run(tmp_path, "probe_mod:Probe, probe_mod:make_log")
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    workers = set(json.loads(proc.stdout.decode().strip().splitlines()[-1]))
    seen = json.loads((tmp_path / "probe.json").read_text())
    names = Counter(s["name"].split(" ")[0] for s in seen)
    assert names["dask.execute"] == 20 and names["dask.task"] == 20 and names["futures.task"] == 10, names
    # the same spans the run folder got, from the processes where the tasks ran, not the exporter process
    exported = {s["span_id"] for s in read_run_folder(str(run_dir))["spans"]}
    assert {s["span_id"] for s in seen} <= exported
    execute_pids = {s["pid"] for s in seen if s["name"].startswith("dask.execute")}
    assert execute_pids == workers and not execute_pids & {s["exporter"] for s in seen}
    # a MultiEventLog there gets a start and a finish per span, on the timeline of the task's process
    events = [json.loads(line) for line in (tmp_path / "probe.json.log").read_text().splitlines()]
    execute = [e for e in events if e[2].startswith("dask.execute")]
    assert Counter(e[0] for e in execute) == {"start": 20, "finish": 20}
    assert {e[3] for e in execute} == workers
    assert "EVLOG_SPAN_PROCESSORS" not in proc.stderr.decode()


def test_a_bad_span_processor_is_named_and_the_run_exports_everything_without_it(tmp_path):
    proc, run_dir = _run(tmp_path, "nosuch_module:Thing, probe_mod:NotAProcessor, not a name, probe_mod:Probe")
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    assert "EVLOG_SPAN_PROCESSORS: cannot make nosuch_module:Thing: ModuleNotFoundError" in err, err
    assert "EVLOG_SPAN_PROCESSORS: probe_mod:NotAProcessor made NotAProcessor, neither a span processor" in err
    assert "EVLOG_SPAN_PROCESSORS: expected module:attribute" in err and "'not a name'" in err
    seen = json.loads((tmp_path / "probe.json").read_text())  # the good one still runs
    assert Counter(s["name"].split(" ")[0] for s in seen)["dask.execute"] == 20
    spans = read_run_folder(str(run_dir))["spans"]
    assert sum(1 for s in spans if s["name"].startswith("dask.execute")) == 20
