"""`evlog report --what-if` against real runs: each workload of examples/what_if.py is recorded once
under evlog-instrument on one shape, the report predicts other shapes from that record, and plain runs
(no evlog) on those shapes give the real times, interleaved shape by shape (A B A B ...), medians.

- sleeps: the Dask graph of sleeping tasks, recorded on 2 workers x 1 thread; predicted and real on 1
  and 4 workers (the issue's goal: within 10%);
- array: dask.array with transfers and a CPU-bound step, recorded on 2 workers x 1 thread; predicted
  and real on 1 worker x 1 thread and on 2 workers x 2 threads (threads that share one GIL);
- pool: a multiprocessing Pool.map of sleeping calls, recorded on 2 processes; predicted and real on
  1 and 4 processes.

One line per figure, `what_if.WORKLOAD.SHAPE: ratio R (predicted X, real Y, s)`, R = predicted / real;
`.recorded` is the replay on the recorded shape against the recorded run itself (the model's own error).

    python benchmarks/what_if.py            # 3 real runs per shape
    python benchmarks/what_if.py --quick    # 1 real run per shape
    python benchmarks/what_if.py sleeps     # only these workloads
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "examples", "what_if.py")

#: workload -> (the recorded run's arguments, [(shape name, --what-if value, the real run's arguments)])
CASES = {
    "sleeps": (["sleeps", "2"], [("workers1", "workers=1", ["sleeps", "1"]),
                                 ("workers4", "workers=4", ["sleeps", "4"])]),
    "array": (["array", "2", "1"], [("workers1", "workers=1,threads=1", ["array", "1", "1"]),
                                    ("threads2", "workers=2,threads=2", ["array", "2", "2"])]),
    "pool": (["pool", "2"], [("processes1", "processes=1", ["pool", "1"]),
                             ("processes4", "processes=4", ["pool", "4"])]),
}


def env(**extra) -> dict:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    out.update(extra)
    return out


def timed(args: list[str], instrumented: dict | None = None) -> float:
    """The workload's own figure (seconds of its client call or map), run plain or under evlog."""
    cmd = ([PY, "-m", "evlog.launcher"] if instrumented else []) + [PY, APP] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env(**(instrumented or {})))
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {p.returncode}\n{p.stderr[-2000:]}")
    line = [x for x in p.stdout.splitlines() if x.startswith("{")][-1]
    return json.loads(line)["seconds"]


def predict(run_dir: str, shapes: list[str]) -> tuple[list[float], float, float]:
    """(predicted seconds per shape, the replay on the recorded shape, the recorded seconds)."""
    cmd = [PY, "-m", "evlog.cli", "report", run_dir, "--format", "json"]
    for s in shapes:
        cmd += ["--what-if", s]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env())
    if p.returncode != 0:
        raise SystemExit(f"evlog report: exit {p.returncode}\n{p.stderr[-2000:]}")
    rep = json.loads(p.stdout)
    model = rep["what_if_model"]
    rec = (model.get("dask") or model.get("pools"))["recorded"]
    return [e["predicted_s"] for e in rep["what_if"]], rec["replayed_s"], rec["recorded_s"]


def line(name: str, predicted: float, real: float) -> str:
    return f"what_if.{name}: ratio {predicted / real:.3f} (predicted {predicted:.3f}, real {real:.3f}, s)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD", help=f"some of {', '.join(CASES)} (default: all)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    for w in args.workloads:
        if w not in CASES:
            ap.error(f"unknown workload {w!r} (one of {', '.join(CASES)})")
    rounds = 1 if args.quick else 3
    for name in args.workloads or list(CASES):
        recorded_args, shapes = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = os.path.join(tmp, "run")
            timed(recorded_args, {"EVLOG_RUN_DIR": run_dir})
            predicted, replayed, recorded = predict(run_dir, [s[1] for s in shapes])
        real: dict[str, list[float]] = {s[0]: [] for s in shapes}
        for _ in range(rounds):
            for shape, _, run_args in shapes:
                real[shape].append(timed(run_args))
        print(line(f"{name}.recorded", replayed, recorded), flush=True)
        for (shape, _, _), p in zip(shapes, predicted):
            print(line(f"{name}.{shape}", p, statistics.median(real[shape])), flush=True)


if __name__ == "__main__":
    main()
