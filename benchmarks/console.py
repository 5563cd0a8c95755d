"""Console capture throughput: a program printing 200,000 lines as fast as it can, plain against
under evlog-instrument in capture mode enabled, alternately in one run.

The program times its own print loop (including the final flush) and writes the figure to a file,
so the ratio is the program's printing throughput, not start-up. Its output goes to /dev/null in
both variants: block-buffered as Python buffers a pipe or file (the goal figure), and line-buffered
(one write per line, as on a terminal). The instrumented run must prove it was instrumented: its run
folder is read back and the console records counted. Goal: every line arrives (a burst waits in the
exporter process's backlog, never dropped short of the spool limit); DROPPED notices and lines missing
without one are both reported.

    python benchmarks/console.py [--quick] [--pairs N] [--lines N]

Prints `name: ratio R (plain X, evlog Y, lines/s)` per figure (medians), and the accounting.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile

from evlog.wire.console import ATTR_DROPPED, ATTR_IOSTREAM

PROGRAM = r"""
import sys, time
n = int(sys.argv[2])
if sys.argv[3] == "line":
    sys.stdout.reconfigure(line_buffering=True)  # one write per line, as on a terminal
t = time.perf_counter()
for i in range(n):
    print(i, "the quick brown fox jumps over the lazy dog", i * 7)
sys.stdout.flush()
elapsed = time.perf_counter() - t
with open(sys.argv[1], "w") as fh:
    fh.write(str(elapsed))
"""


def run(instrumented: bool, lines: int, workdir: str, tag: str, buffering: str) -> tuple[float, str | None]:
    result = os.path.join(workdir, f"result-{tag}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.pop("PYTHONUNBUFFERED", None)
    argv = [sys.executable, "-c", PROGRAM, result, str(lines), buffering]
    run_dir = None
    if instrumented:
        run_dir = os.path.join(workdir, f"run-{tag}")
        env.update(EVLOG_CAPTURE="enabled", EVLOG_RUN_DIR=run_dir, EVLOG_SUMMARY="false")
        argv = [sys.executable, "-m", "evlog.launcher"] + argv
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=True)
    with open(result) as fh:
        return float(fh.read()), run_dir


def count(run_dir: str) -> tuple[int, int]:
    """(console text records, lines the DROPPED notices account for) in a run folder."""
    records = dropped = 0
    for path in glob.glob(os.path.join(run_dir, "logs*.jsonl*")):
        with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                for rl in json.loads(line).get("resourceLogs", []):
                    for sl in rl.get("scopeLogs", []):
                        for rec in sl.get("logRecords", []):
                            attrs = {a["key"]: a["value"] for a in rec.get("attributes", [])}
                            if ATTR_DROPPED in attrs:
                                dropped += int(attrs[ATTR_DROPPED].get("intValue", 0))
                            elif ATTR_IOSTREAM in attrs and not rec.get("eventName"):
                                records += 1
    return records, dropped


def figure(name: str, pairs: int, lines: int, workdir: str, buffering: str) -> None:
    plain, evlog, accounted = [], [], []
    for i in range(pairs):
        seconds, _ = run(False, lines, workdir, f"{name}-plain-{i}", buffering)
        plain.append(lines / seconds)
        seconds, run_dir = run(True, lines, workdir, f"{name}-evlog-{i}", buffering)
        evlog.append(lines / seconds)
        accounted.append(count(run_dir))
    p, e = statistics.median(plain), statistics.median(evlog)
    print(f"{name}: ratio {e / p:.2f} (plain {p:,.0f}, evlog {e:,.0f}, lines/s)")
    for records, _dropped in accounted:
        if records == 0:
            raise SystemExit(f"{name}: no console records arrived: the instrumented run was not instrumented")
    exported = statistics.median(r for r, _ in accounted)
    dropped = statistics.median(d for _, d in accounted)
    missing = max(lines - r - d for r, d in accounted)
    print(f"{name}: exported {exported:,.0f} of {lines:,} lines as log records, {dropped:,.0f} dropped and "
          f"counted, {missing:,} missing at most (median of {pairs} runs; every run: "
          f"{', '.join(f'{r}+{d}' for r, d in accounted)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 pairs, buffered output only")
    ap.add_argument("--pairs", type=int, default=None)
    ap.add_argument("--lines", type=int, default=200_000)
    args = ap.parse_args()
    pairs = args.pairs or (3 if args.quick else 5)
    with tempfile.TemporaryDirectory(prefix="evlog-bench-console-") as workdir:
        figure("console.print_200k_lines", pairs, args.lines, workdir, "block")
        if not args.quick:
            figure("console.print_200k_lines_line_buffered", pairs, args.lines, workdir, "line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
