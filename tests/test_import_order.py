"""Every pool instrumentation activates whatever the program imports first.

Each program starts with one of the import orders users write (concurrent.futures, its process module,
multiprocessing, ``from multiprocessing import Pool``, dask.distributed, asyncio), then drives one kind
of pool under a root span, under evlog-instrument, exporting to the OTLP receiver. The receiver must get
one task span per call, under the root span, and evlog must have said nothing on stderr.
"""
from __future__ import annotations

import json

import pytest
from helpers import PYTHON, evlog_env, run_instrumented

# what the program imports first (its first line)
ORDERS = {
    "plain": "import json",
    "multiprocessing": "import multiprocessing",
    "concurrent.futures": "import concurrent.futures",
    "concurrent.futures.process": "import concurrent.futures.process",
    "from multiprocessing import Pool": "from multiprocessing import Pool",
    "dask.distributed": "import dask.distributed",
    "asyncio": "import asyncio",
}

# pool -> (the program's imports after the first line, how it maps work over range(N), span name, pool kind)
POOLS = {
    "thread": ("from concurrent.futures import ThreadPoolExecutor",
               "with ThreadPoolExecutor(2) as ex:\n            got = list(ex.map(work, range(N)))",
               "futures.task work", "thread"),
    "spawn-process": ("from concurrent.futures import ProcessPoolExecutor\nimport multiprocessing",
                      "with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context('spawn')) as ex:\n"
                      "            got = list(ex.map(work, range(N)))",
                      "futures.task work", "process"),
    "mp-pool": ("import multiprocessing",
                "with multiprocessing.Pool(2) as p:\n            got = p.map(work, range(N))",
                "multiprocessing.task work", "mp.pool"),
}

N = 4

PROGRAM = '''{first}
{imports}
import json, os
from opentelemetry import trace

N = {n}

def work(x):
    return os.getpid()

if __name__ == "__main__":
    with trace.get_tracer("test.import_order").start_as_current_span("root") as root:
        {run}
    print(json.dumps({{"root": format(root.get_span_context().span_id, "016x"), "pids": got}}))
'''


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("order", ORDERS)
def test_pool_tasks_are_traced_whatever_is_imported_first(otlp_receiver, tmp_path, order, pool):
    imports, run, name, kind = POOLS[pool]
    script = tmp_path / "app.py"
    script.write_text(PROGRAM.format(first=ORDERS[order], imports=imports, run=run, n=N))
    env = evlog_env({**otlp_receiver.env("grpc"), "EVLOG_CONSUMERS": "none", "EVLOG_SUMMARY": "false"})
    proc = run_instrumented([PYTHON, str(script)], env=env, timeout=120)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])

    def tasks():
        got = [s for s in otlp_receiver.spans() if s["name"].startswith(("futures.task", "multiprocessing.task"))]
        return got if len(got) >= N else None

    spans = otlp_receiver.wait_for(tasks, timeout=30)
    assert [(s["name"], s["attributes"]["evlog.pool.kind"]) for s in spans] == [(name, kind)] * N
    assert {s["parent_span_id"] for s in spans} == {out["root"]}
    assert sorted(s["resource"]["process.pid"] for s in spans) == sorted(out["pids"])
    assert "evlog" not in err, err


def test_a_module_that_uses_a_pool_while_it_is_imported_is_traced(otlp_receiver, tmp_path):
    """The hook that a module's own import of concurrent.futures sets off is not held back to the end
    of that module's import (nothing the hook needs is half made then)."""
    (tmp_path / "poolmod.py").write_text(
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from opentelemetry import trace\n"
        "def work(x):\n    return x\n"
        "with trace.get_tracer('test').start_as_current_span('root'):\n"
        "    with ThreadPoolExecutor(2) as ex:\n        got = list(ex.map(work, range(3)))\n")
    (tmp_path / "app.py").write_text("import poolmod\nprint(poolmod.got)\n")
    env = evlog_env({**otlp_receiver.env("grpc"), "EVLOG_CONSUMERS": "none", "EVLOG_SUMMARY": "false"})
    proc = run_instrumented([PYTHON, str(tmp_path / "app.py")], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    otlp_receiver.wait_for(lambda: len([s for s in otlp_receiver.spans() if s["name"] == "futures.task work"]) == 3)
    assert "evlog" not in proc.stderr.decode(errors="replace")
