"""dask_overhead with the scheduler in its own process: `dask scheduler` plus two `dask worker` processes.

The figure that matters on a real cluster is the scheduler process's CPU per task (it is the
bottleneck there): evlog's part of it is the SchedulerPlugin's appends and the shipping of the records.

    python benchmarks/dask_separate.py [--quick]
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dask_overhead  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:1] = ["--separate"]
    dask_overhead.main()
