"""evlog.data.heap.give_back: what threads freed goes back to the system (glibc), in a process of its own."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent('''
    import ctypes, sys, threading
    try:
        ctypes.CDLL(None).malloc_trim
    except AttributeError:
        print("no malloc_trim"); sys.exit(0)
    from evlog.data import heap

    def rss_kb():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    kept = []
    def churn():  # a reader thread's buffers (its own malloc arena): all held at once, then one in 64 kept
        held = [bytearray(1024 + i % 512) for i in range(200_000)]
        kept.extend(held[::64])
    t = threading.Thread(target=churn)
    t.start(); t.join()
    before = rss_kb()
    heap.give_back()
    heap.give_back()  # again: looked up once, harmless twice
    after = rss_kb()
    print(before, after, len(kept))
''')


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_give_back_returns_what_a_thread_freed():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("no malloc_trim"):
        pytest.skip("this C library has no malloc_trim")
    before, after, kept = map(int, out.stdout.split())
    assert kept == 3125
    # the churn leaves about 300 MB of freed chunks between the kept ones; trimmed, most of it goes back
    assert before - after > 50_000, f"RSS {before} kB before give_back, {after} kB after"
