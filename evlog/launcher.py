"""evlog-instrument COMMAND [ARGS...]: run COMMAND with evlog set up in it and in every Python child.

The launcher stays a small supervisor: it validates the settings once for the whole run (children stay
quiet), creates the run folder, puts evlog's sitecustomize first on PYTHONPATH, starts COMMAND,
forwards signals to it, passes its exit status through, and prints the one-paragraph summary.
It does not import the OTel SDK itself.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

USAGE = """usage: evlog-instrument COMMAND [ARGS...]

Runs COMMAND (e.g. `python app.py`) with OpenTelemetry set up by evlog in it and in every Python
process it starts. With no OTEL_EXPORTER_OTLP_ENDPOINT and no OTEL_TRACES_EXPORTER, telemetry goes to
a run folder under ./evlog-runs/ (see `evlog view`). Configuration: OTEL_* and EVLOG_* variables,
and ./evlog.yaml or the file named by EVLOG_CONFIG.
"""
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap", "site")
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def service_from_command(argv: list[str]) -> str:
    """The script's name: `python app.py` -> app, `python -m pkg.mod` -> pkg.mod, `dask worker` -> dask."""
    exe = os.path.basename(argv[0])
    if re.match(r"^python[0-9.]*$", exe) or exe == "pypy3":
        args = argv[1:]
        i = 0
        while i < len(args):
            a = args[i]
            if a == "-m" and i + 1 < len(args):
                return args[i + 1]
            if a.startswith("-m") and len(a) > 2:
                return a[2:]
            if a == "-c" or a.startswith("-c"):
                return "python"
            if a in ("-W", "-X", "-Q") and i + 1 < len(args):
                i += 2
                continue
            if a.startswith("-"):
                i += 1
                continue
            base = os.path.basename(a)
            return base[:-3] if base.endswith(".py") else base or "python"
        return "python"
    return exe


def default_run_dir(cwd: str, service: str | None = None) -> str:
    """./evlog-runs/<UTC time>-<service>/, made unique, created readable by the user alone."""
    from evlog.bootstrap.sdk import service_name

    service = re.sub(r"[^A-Za-z0-9_.-]+", "_", service or service_name()) or "run"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = os.path.join(cwd, "evlog-runs")
    os.makedirs(base, mode=0o700, exist_ok=True)
    for n in range(1000):
        path = os.path.join(base, f"{stamp}-{service}" + (f"-{n + 1}" if n else ""))
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    return tempfile.mkdtemp(prefix=f"{stamp}-{service}-", dir=base)


def prepare_env(argv: list[str], env: dict) -> tuple[dict, object, str | None]:
    """The child's environment; the validated settings; the stats file (None when nested)."""
    from evlog import config

    env = dict(env)
    if env.get("EVLOG_RUN_ID"):  # nested evlog-instrument: join the outer run, print nothing
        return env, config.load(env), None
    settings = config.load(env)
    for p in settings.problems:
        sys.stderr.write(f"evlog: {p}\n")
    env["EVLOG_CONFIG_REPORTED"] = "1"
    env["EVLOG_RUN_ID"] = uuid.uuid4().hex
    env.setdefault("EVLOG_SERVICE_NAME", service_from_command(argv))
    if settings.exporters.embedded and not settings.sdk_disabled:
        run_dir = settings.run_dir
        try:
            if run_dir:
                os.makedirs(run_dir, mode=0o700, exist_ok=True)
            else:
                run_dir = default_run_dir(os.getcwd(), env["EVLOG_SERVICE_NAME"])
        except OSError as exc:
            sys.stderr.write(f"evlog: cannot create the run folder {run_dir or './evlog-runs'}: {exc.strerror}; telemetry will be dropped\n")
            run_dir = run_dir or os.path.join(os.getcwd(), "evlog-runs")
        env["EVLOG_RUN_DIR"] = run_dir
        settings = settings.with_overrides(run_dir=run_dir)
    if settings.capture != "off":
        env["EVLOG_CAPTURE_PENDING"] = "1"
    try:
        from evlog.bootstrap import others

        found = others.scan()
        if found:
            env[others.ENV] = json.dumps(found)
    except Exception:
        pass
    fd, stats_file = tempfile.mkstemp(prefix="evlog-stats-", suffix=".jsonl")
    os.close(fd)
    env["EVLOG_STATS_FILE"] = stats_file
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([SITE_DIR] + path)
    return env, settings, stats_file


def summary(settings, stats_file: str) -> str:
    from evlog import stats
    from evlog.exporters import select

    rows = stats.read_all(stats_file)
    total: dict[str, int] = {}
    for r in rows:
        for k, v in r.items():
            if k not in ("pid", "time") and isinstance(v, int):
                total[k] = total.get(k, 0) + v
    spans = total.get("traces.exported", 0)
    events = total.get("logs.exported", 0)
    points = total.get("metrics.exported", 0)
    procs = len({r.get("pid") for r in rows})
    dropped = sum(v for k, v in total.items() if k.endswith(".failed") or k.startswith("dropped."))
    where = select.describe(settings)
    text = (
        f"evlog: {spans:,} spans, {events:,} events and logs, {points:,} metric points "
        f"from {procs} process{'es' if procs != 1 else ''} -> {where}"
    )
    if dropped:
        text += f"; {dropped:,} dropped (could not be exported)"
    if settings.exporters.embedded:
        text += f"\nevlog: see them with: evlog view {_shell_path(settings.run_dir)}"
    return text + "\n"


def _shell_path(path: str) -> str:
    rel = os.path.relpath(path)
    p = rel if not rel.startswith("..") else path
    return p if re.match(r"^[\w@%+=:,./-]+$", p) else "'" + p.replace("'", "'\\''") + "'"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        print("evlog-instrument 0.1.0")
        return 0
    env, settings, stats_file = prepare_env(argv, dict(os.environ))
    exe = shutil.which(argv[0], path=env.get("PATH")) if os.sep not in argv[0] else argv[0]
    try:
        proc = subprocess.Popen([exe or argv[0]] + argv[1:], env=env)
    except FileNotFoundError:
        sys.stderr.write(f"evlog-instrument: {argv[0]}: command not found\n")
        _cleanup(stats_file)
        return 127
    except PermissionError:
        sys.stderr.write(f"evlog-instrument: {argv[0]}: permission denied\n")
        _cleanup(stats_file)
        return 126
    except OSError as exc:
        sys.stderr.write(f"evlog-instrument: {argv[0]}: {exc.strerror}\n")
        _cleanup(stats_file)
        return 126

    def forward(signum, _frame):
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    for s in _FORWARDED:
        try:
            signal.signal(s, forward)
        except (OSError, ValueError):
            pass
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:
            continue
    if stats_file:
        if settings.summary and not settings.sdk_disabled:
            try:
                sys.stderr.write(summary(settings, stats_file))
            except Exception as exc:
                sys.stderr.write(f"evlog: no summary ({exc})\n")
        _cleanup(stats_file)
    return 128 - code if code < 0 else code


def _cleanup(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
