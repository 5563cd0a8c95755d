"""A fork while evlog builds a provider or an exporter in another thread (evlog/observed/forkguard.py).

Found by benchmarks/pools.py: a pool forked its workers while the gauges timer thread was building the
SDK; the fork took logging's (or concurrent.futures') at-fork lock, then waited 5 s for evlog's build
lock, while the build waited for that lock; the children started with the build lock held by a thread
they do not have and hung for ever in their own set-up.
"""
from __future__ import annotations

import json
import textwrap

from helpers import PYTHON, evlog_env, run_instrumented

FORK_WHILE_BUILDING = textwrap.dedent("""
    import concurrent.futures.thread, json, logging, os, sys, threading, time
    from evlog.observed import forkguard
    from evlog.observed import sdk

    forkguard.WAIT = float(sys.argv[1])
    holding = threading.Event()

    def build():  # as a provider build: under the build lock it needs logging's and the thread pools' locks
        forkguard.register_last()
        with sdk._lock:
            holding.set()
            time.sleep(float(sys.argv[2]))  # a slow build: the fork comes while it holds the lock
            logging.getLogger("evlog-test-build")  # logging's lock
            with concurrent.futures.thread._global_shutdown_lock:  # taken by ThreadPoolExecutor.submit
                pass

    threading.Thread(target=build, daemon=True).start()
    holding.wait()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        sdk.update_resource({"test.child": 1})  # takes the build lock, as the child's own set-up does
        os._exit(0)
    forked = time.monotonic() - t0
    deadline, status = time.monotonic() + 20, None
    while time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = code
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print(json.dumps({"fork_s": forked, "child_status": status}), flush=True)
""")


def _fork_while_building(wait_s: float, hold_s: float):
    proc = run_instrumented([PYTHON, "-c", FORK_WHILE_BUILDING, str(wait_s), str(hold_s)],
                            env=evlog_env(EVLOG_CONSUMERS="none", EVLOG_SUMMARY="false"), timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout.decode().splitlines()[-1]), proc.stderr.decode()


def test_fork_waits_for_a_build_that_needs_the_locks_of_other_fork_hooks():
    result, err = _fork_while_building(wait_s=5, hold_s=0.5)
    assert result["child_status"] == 0, (result, err)  # None: the child hung, killed after 20 s
    assert result["fork_s"] < 3, result  # the build finished and the fork went on, not the 5 s wait running out
    assert "forked while evlog" not in err, err


def test_child_forked_after_the_wait_ran_out_does_not_hang():
    result, err = _fork_while_building(wait_s=0.5, hold_s=3)
    assert result["child_status"] == 0, (result, err)
    assert 0.4 < result["fork_s"] < 2.5, result
    assert err.count("forked while evlog was setting up its telemetry") == 1, err
