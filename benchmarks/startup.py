"""What evlog adds to a Python process's start-up, against what opentelemetry-instrument adds.

Runs `python -c pass` plain, under `evlog-instrument` (run folder, and OTLP), as a bare child of an
evlog run (what every worker/child process pays: sitecustomize only), and under opentelemetry-instrument
(opentelemetry-distro, OTLP exporters for traces, metrics and logs), interleaved round by round.
Goal: evlog adds at most half of what opentelemetry-instrument adds. Also a program that makes one span,
plain and under `evlog-instrument`, its export at the exit included (no goal: read).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PY = sys.executable
BIN = os.path.dirname(PY)


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.update(kw)
    return env


def _time(cmd, env) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0)
    args = ap.parse_args()
    rounds = args.rounds or (4 if args.quick else 12)
    tmp = tempfile.mkdtemp(prefix="evlog-bench-startup-")
    # Byte-compile evlog as an installed wheel would be: with PYTHONDONTWRITEBYTECODE set (as on this
    # machine) an editable checkout would otherwise be recompiled by every process.
    import compileall

    import evlog

    compileall.compile_dir(os.path.dirname(evlog.__file__), quiet=1)
    from evlog.data.receiver import OTLPReceiver
    from evlog.launcher import SITE_DIR

    received = {"rows": 0}

    def sink(signal, rows):
        received["rows"] += len(rows)

    receiver = OTLPReceiver(sink, http_port=None).start()  # a live collector for both OTLP variants
    live = receiver.grpc_endpoint
    otel = shutil.which("opentelemetry-instrument", path=BIN) or "opentelemetry-instrument"
    span = "from opentelemetry import trace; trace.get_tracer('bench').start_span('proof').end()"
    variants = {
        "plain": ([PY, "-c", "pass"], _env()),
        # a program whose one span goes out at its exit: the run's exporter process, started with it, has
        # its start-up done by then (evlog.launcher._Exporter)
        "plain-span": ([PY, "-c", span], _env()),
        "evlog-span": ([PY, "-m", "evlog.launcher", PY, "-c", span], _env(EVLOG_RUN_DIR=f"{tmp}/s", EVLOG_SUMMARY="false")),
        "evlog": ([PY, "-m", "evlog.launcher", PY, "-c", "pass"], _env(EVLOG_RUN_DIR=f"{tmp}/r", EVLOG_SUMMARY="false")),
        "evlog-otlp": ([PY, "-m", "evlog.launcher", PY, "-c", "pass"],
                       _env(OTEL_EXPORTER_OTLP_ENDPOINT=live, OTEL_EXPORTER_OTLP_PROTOCOL="grpc", EVLOG_SUMMARY="false")),
        "evlog-child": ([PY, "-c", "pass"],
                        _env(PYTHONPATH=os.pathsep.join(filter(None, [SITE_DIR, os.environ.get("PYTHONPATH")])),
                             EVLOG_RUN_ID="bench", EVLOG_CONFIG_REPORTED="1", EVLOG_RUN_DIR=f"{tmp}/c")),
        "otel": ([otel, PY, "-c", "pass"],
                 _env(OTEL_PYTHON_DISTRO="distro", OTEL_PYTHON_CONFIGURATOR="configurator",
                      OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="otlp", OTEL_LOGS_EXPORTER="otlp",
                      OTEL_EXPORTER_OTLP_ENDPOINT=live, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for cmd, env in variants.values():  # warm the page cache and .pyc files
        _time(cmd, env)
    for _ in range(rounds):
        for name, (cmd, env) in variants.items():
            times[name].append(_time(cmd, env))
    med = {k: statistics.median(v) for k, v in times.items()}
    # Proof that the evlog variants set evlog up: the same commands with a program that makes one span
    # (`python -c pass` makes none, so it exports nothing and imports none of the SDK).
    for name in ("evlog", "evlog-otlp", "evlog-child"):
        cmd, env = variants[name]
        subprocess.run(cmd[:-1] + [span], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proof = sum(1 for d in ("r", "c") if os.path.isdir(f"{tmp}/{d}") for e in os.scandir(f"{tmp}/{d}")
                if e.name.startswith("traces"))
    receiver.stop()
    plain = med["plain"]
    for k in ("evlog", "evlog-otlp", "evlog-child", "otel"):
        label = "otel" if k == "otel" else "evlog"
        print(f"startup.{k}: ratio {med[k] / plain:.2f} (plain {plain:.3f}, {label} {med[k]:.3f}, s per process)")
    otel_added = med["otel"] - plain
    for k in ("evlog", "evlog-otlp", "evlog-child"):
        added = med[k] - plain
        print(f"startup.added.{k}: ratio {added / otel_added:.2f} (otel +{otel_added:.3f}, evlog +{added:.3f}, "
              "s added; goal <= 0.5)")
    print(f"startup.one-span: ratio {med['evlog-span'] / med['plain-span']:.2f} (plain {med['plain-span']:.3f}, "
          f"evlog {med['evlog-span']:.3f}, s per run of a program making one span, its export included)")
    print(f"startup.proof: a one-span program under the evlog variants wrote {proof} traces file(s) to run folders "
          f"(expected 2); the receiver got {received['rows']} rows (expected 1 or more)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
