"""Helpers for tests: run programs under evlog-instrument, read a run folder back as flat rows, parse a
run folder's line with the stock protobuf JSON parser."""
from __future__ import annotations

import base64
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

PYTHON = sys.executable


def evlog_env(extra: dict | None = None, **kw) -> dict:
    """A clean environment for a child run: no stray OTEL_*/EVLOG_* from the developer's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    env.update({k: str(v) for k, v in kw.items()})
    return env


def run_instrumented(code: str | list[str], env: dict | None = None, timeout: float = 120, cwd: str | None = None,
                     check: bool = False, stdin=None) -> subprocess.CompletedProcess:
    """Run ``python -c code`` (or a full argv list) under evlog-instrument; capture its output."""
    if isinstance(code, str):
        argv = [PYTHON, "-c", textwrap.dedent(code)]
    else:
        argv = list(code)
    cmd = [PYTHON, "-m", "evlog.launcher"] + argv
    with subprocess.Popen(cmd, env=env if env is not None else evlog_env(), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                          start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the program and all its children, not only the launcher
            p.communicate()
            raise
    proc = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout.decode(errors='replace')}\n"
                             f"stderr:\n{proc.stderr.decode(errors='replace')}")
    return proc


def start_instrumented(cmd: list[str], env: dict, log) -> subprocess.Popen:
    """Start ``cmd`` (e.g. a `dask scheduler`) under evlog-instrument in a session of its own, its output to ``log``."""
    return subprocess.Popen([PYTHON, "-m", "evlog.launcher"] + cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_processes(procs: list, timeout: float = 30) -> None:
    """SIGTERM each (a launcher passes it on), then wait; a session still there after ``timeout`` is killed."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def without_run_folder_notice(err: str) -> str:
    """stderr without the line evlog.configure() prints to say where its run folder is."""
    return "".join(line for line in err.splitlines(True)
                   if not line.startswith("evlog: writing telemetry to the run folder "))


def run_app(tmp, app: str, timeout: float = 240, **env) -> tuple[subprocess.CompletedProcess, str]:
    """Write ``app`` as ``tmp/app.py`` and run it under evlog-instrument (in ``tmp``, its run folder
    ``tmp/run``, ``env`` added); it must succeed. Returns the process and the run folder."""
    (tmp / "app.py").write_text(app)
    folder = tmp / "run"
    proc = run_instrumented([PYTHON, str(tmp / "app.py")], env=evlog_env(EVLOG_RUN_DIR=str(folder), **env),
                            cwd=str(tmp), timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return proc, str(folder)


def wait_until(fn, timeout: float = 30.0):
    """Poll ``fn()`` every 0.1 s until it returns something truthy (returned), for ``timeout`` s at most."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s; last {last!r}")


def run_files(path, signal: str = "") -> list[str]:
    """A run folder's files of ``signal`` (traces, logs, metrics; all when empty): ``*.jsonl.gz`` as the
    exporter process writes them, and ``*.jsonl`` as other writers (and older runs) do; sorted."""
    names = glob.glob(os.path.join(str(path), f"{signal}*.jsonl")) + glob.glob(os.path.join(str(path), f"{signal}*.jsonl.gz"))
    return sorted(names)


def run_file_lines(path) -> list[bytes]:
    """The lines of one run-folder file (gzip'd or not), each with its newline; a gzip file must be whole."""
    import gzip

    with open(path, "rb") as f:
        data = f.read()
    if str(path).endswith(".gz"):
        data = gzip.decompress(data)
    return data.splitlines(keepends=True)


def read_run_folder(path: str) -> dict:
    """{"spans": [...], "logs": [...], "metrics": [...]} decoded from every line of a run folder's files."""
    from evlog.data import otlp_decode

    out = {"spans": [], "logs": [], "metrics": []}
    for sig, key, fn in (("traces", "spans", otlp_decode.decode_spans), ("logs", "logs", otlp_decode.decode_logs),
                            ("metrics", "metrics", otlp_decode.decode_metrics)):
        for f in run_files(path, sig):
            for line in run_file_lines(f):
                out[key].extend(fn(json.loads(line)))
    return out


ID_BYTES = {"trace_id": 16, "span_id": 8, "parent_span_id": 8}  # OTLP's id fields and their lengths


def is_repeated(field) -> bool:
    """A protobuf field descriptor's repeatedness, on every protobuf version pyproject allows."""
    is_rep = getattr(field, "is_repeated", None)  # protobuf >= 5; `label` is gone in 7
    return is_rep if is_rep is not None else field.label == field.LABEL_REPEATED


def hex_ids_to_base64(obj, descriptor):
    """What the otlpjsonfile receiver's unmarshaler accepts and the plain protobuf JSON mapping does not:
    hex trace/span ids. Turn them into the mapping's base64 so json_format.Parse can read the line."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    fields = {f.json_name: f for f in descriptor.fields}
    out = {}
    for key, value in obj.items():
        field = fields[key]
        if field.type == FD.TYPE_MESSAGE:
            if is_repeated(field):
                value = [hex_ids_to_base64(v, field.message_type) for v in value]
            else:
                value = hex_ids_to_base64(value, field.message_type)
        elif field.type == FD.TYPE_BYTES and field.name in ID_BYTES:
            value = base64.b64encode(bytes.fromhex(value)).decode()
        out[key] = value
    return out


def gzip_members(lines: list[bytes], per: int = 3, cut: bool = True) -> list[bytes]:
    """gzip members of ``per`` lines each, as a run folder's writer makes one per flush; with ``cut``, the
    second member ends in the middle of a line, whose rest opens the third."""
    import gzip

    data = [b"".join(lines[i:i + per]) for i in range(0, len(lines), per)]
    if cut and len(data) >= 3:
        half = len(data[1]) - 10
        data[1], data[2] = data[1][:half], data[1][half:] + data[2]
    return [gzip.compress(d, compresslevel=1, mtime=0) for d in data]


def gzip_run_folder(src: str, dst: str, per: int = 3, cut: bool = True) -> dict[str, list[bytes]]:
    """Each ``*.jsonl`` of ``src`` as ``dst/<name>.gz`` in members (gzip_members); returns {gz path: members}."""
    os.makedirs(dst, exist_ok=True)
    out = {}
    for path in sorted(glob.glob(os.path.join(src, "*.jsonl"))):
        with open(path, "rb") as f:
            members = gzip_members(f.readlines(), per, cut)
        target = os.path.join(dst, os.path.basename(path) + ".gz")
        with open(target, "wb") as f:
            f.write(b"".join(members))
        out[target] = members
    return out
