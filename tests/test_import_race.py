"""An instrumentor that starts while another thread imports the module it patches still patches it.

The race behind `evlog: ThreadPoolExecutor is not traced: AttributeError("partially initialized module
'concurrent.futures.thread' ...")` (issue 29): thread T imports asyncio, which imports
concurrent.futures, so the futures instrumentor starts at the end of T's import; meanwhile the main
thread imports concurrent.futures.thread. The instrumentor's hook on that module found it in
sys.modules half made and patched nothing, or, registered between the main thread's finder lookup and
its execution, was never run at all. The program below waits until the instrumentor's class exists
(its module's body has run, so instrument() is next) before it imports concurrent.futures.thread, and
switches threads every microsecond, so the two overlap in most runs (before the fix: 20 of 20 runs
untraced). Run 50 times, two busy loops beside it; every run must trace its thread pool's call and say
nothing on stderr.
"""
from __future__ import annotations

import subprocess

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented

from evlog.observed.targets import TARGETS

RUNS = 50

PROGRAM = '''
import sys, threading, time
sys.setswitchinterval(1e-6)
go = threading.Event()

def other():
    go.wait()
    import asyncio  # imports concurrent.futures: the futures instrumentor starts at the end, in this thread

t = threading.Thread(target=other)
t.start()
go.set()
deadline = time.monotonic() + 10
while getattr(sys.modules.get({module!r}), {cls!r}, None) is None and time.monotonic() < deadline:
    pass  # the instrumentor's module is made: instrument() comes next, in the other thread
import concurrent.futures.thread
t.join()
sys.setswitchinterval(0.005)
with concurrent.futures.thread.ThreadPoolExecutor(1) as ex:
    print(ex.submit(int, "7").result())
'''


@pytest.mark.slow
def test_the_futures_instrumentor_patches_a_module_another_thread_is_importing(tmp_path):
    module, cls = TARGETS["futures"][1].split(":")
    script = tmp_path / "app.py"
    script.write_text(PROGRAM.format(module=module, cls=cls))
    busy = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for i in range(RUNS):
            folder = tmp_path / f"run{i}"
            env = evlog_env(EVLOG_RUN_DIR=str(folder), EVLOG_CONSUMERS="none", EVLOG_SUMMARY="false")
            proc = run_instrumented([PYTHON, str(script)], env=env, timeout=120)
            err = proc.stderr.decode(errors="replace")
            assert (proc.returncode, proc.stdout.decode().split(), err) == (0, ["7"], ""), f"run {i}"
            names = [s["name"] for s in read_run_folder(str(folder))["spans"]]
            assert names == ["futures.task int"], f"run {i}: {names}"
    finally:
        for p in busy:
            p.kill()
            p.wait(10)
