"""Run every benchmark of the project and rewrite BENCHMARKS.md with what they print.

Each benchmark measures plain and instrumented side by side in one run and prints one line per figure
(`name: ratio R (plain X, evlog Y, unit)`); this collects those lines, with the machine, the date and
the command, so every figure in BENCHMARKS.md comes from here.

    python benchmarks/run_all.py            # full runs (tens of minutes)
    python benchmarks/run_all.py --quick    # short runs, for a smoke check
    python benchmarks/run_all.py startup pools   # only these
    python benchmarks/run_all.py scale           # by hand only: never part of the full run
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIGURE = re.compile(r"^\w[\w.\-+ ]*: .+$")  # scale names its figures in words ("evlog report wall: ...")

GOALS = {  # what each benchmark is held to (from the issues)
    "startup": "evlog adds at most half of what opentelemetry-instrument adds",
    "dask_overhead": ("at least 0.98 of plain Dask throughput; all processes at most +8% CPU per task; the exporter "
                      "process at most 60 us CPU per task"),
    "dask_separate": "the scheduler process's CPU per task at most 3% over plain",
    "pools": ("at least 0.85 of plain pool throughput for trivial calls sent one at a time, 0.8 for Pool.map "
              "(default chunk spans)"),
    "bridge": "record_event adds at most 30% to a raw Logger.emit",
    "consumers": "the default consumer set adds at most 2 us per span",
    "console": "at least 0.8 of plain throughput printing 200,000 lines, every line exported",
    "serve": "at least 20,000 spans/s stored by evlog serve",
    "profiler_cost": "with the task profiler at 10 ms, at least 0.98 of the Dask throughput without it",
    "trace_shape": "no trace over 5,000,000 bytes of protobuf or 10,000 spans, every execute span delivered",
    "what_if": ("`evlog report --what-if` predicts the sleeping graph on 1 and 4 workers within 10% of real runs "
                "(the median of 3); the array and pool figures are for reading, with no goal"),
    "user_spans": "a loop of the program's own spans at least 0.9 of the plain SDK's, every span delivered",
    "task_encoding": ("evlog's span encoder against the stock one, per Dask task: part of the exporter process's "
                      "CPU per task, whose goal is at most 60 us in all"),
    "exit": "a 2-worker spawn pool exits within 1.5 s of its last line with a collector refusing connections",
    "worker_objects": "a Dask worker holds at most 2,000 more GC-tracked objects than plain after 10,000 tasks",
    "scale": ("on a 157k-task dask.array graph: throughput at least 0.95 of plain, the process tree's peak RSS at most "
              "1.20x plain, at most 150 bytes per graph task on disk, `evlog report` in at most 4 s and 400 MB, "
              "`evlog view` fully loaded in at most 8 s with a server of at most 400 MB"),
}
BY_HAND = {"scale"}  # run only when named (minutes per round, 15-20 per round at a million tasks)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 0
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def run(name: str, quick: bool, timeout: float) -> tuple[list[str], str]:
    cmd = [sys.executable, os.path.join(HERE, f"{name}.py")] + (["--quick"] if quick else [])
    t = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout:.0f} s"
    lines = [l.strip() for l in proc.stdout.splitlines() if FIGURE.match(l.strip())]
    failed = "" if proc.returncode == 0 else f", exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    status = f"{time.monotonic() - t:.0f} s" + failed
    return lines, status


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"))
    args = ap.parse_args()
    names = args.names or sorted(
        f[:-3] for f in os.listdir(HERE)
        if f.endswith(".py") and f != "run_all.py" and not f.startswith("_") and f[:-3] not in BY_HAND
    )
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    flag = " --quick" if args.quick else ""
    sections = {}
    before = _existing_sections(args.output)
    for name in names:
        print(f"== {name}", flush=True)
        lines, status = run(name, args.quick, args.timeout)
        for l in lines:
            print("  " + l, flush=True)
        goal = GOALS.get(name, "see the benchmark docstring")
        body = "\n".join(lines) if lines else "(no figures)"
        sections[name] = (
            f"## {name}\n\nGoal: {goal}.\nMeasured {now} by `python benchmarks/run_all.py{flag} {name}` "
            f"(took {status}) on {machine()}.\n\n```\n{body}\n```\n" + _notes(before.get(name, ""))
        )
    # Re-read just before writing: sections of benchmarks not run now (or written meanwhile by another
    # run_all) are kept as they are.
    sections = {**_existing_sections(args.output), **sections}
    text = (
        "# Benchmarks\n\n"
        "Every figure below is printed by the benchmark named in its section, measuring the plain and the\n"
        "instrumented variant side by side in one run (interleaved, medians): ratios hold from machine to\n"
        "machine where absolute times drift. `python benchmarks/run_all.py` reruns them all and rewrites this\n"
        "file; `python benchmarks/run_all.py NAME` reruns one section.\n\n"
        + "\n".join(sections[k] for k in sorted(sections))
    )
    with open(args.output, "w") as fh:
        fh.write(text)
    print(f"wrote {args.output}")


def _notes(section: str) -> str:
    """The prose written under a section's figures (what they mean, the goals met or not): kept when its
    figures are measured again, for whoever reruns it to bring up to date."""
    parts = section.split("```\n", 2)
    rest = parts[2].strip() if len(parts) == 3 else ""
    return "\n" + rest + "\n" if rest else ""


def _existing_sections(path: str) -> dict:
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return {}
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.split("\n", 1)[0].strip(): "## " + p.rstrip() + "\n" for p in parts}


if __name__ == "__main__":
    main()
