"""Console capture: real programs under evlog-instrument, checked through the OTLP receiver fixture
and run folders, and on the terminal side byte for byte (pipes and a real pseudo-terminal)."""
from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import termios
import textwrap
import time
import tty

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented
from receiver import CollectingReceiver

from evlog.wire.console import ATTR_DROPPED, ATTR_IOSTREAM, ATTR_REPEATED

LAUNCHER = [PYTHON, "-m", "evlog.launcher"]


def console_rows(rows):
    return [r for r in rows if ATTR_IOSTREAM in (r["attributes"] or {})]


def lines(rows, stream=None):
    """Bodies of the plain console lines (not events, not notices), in arrival order."""
    return [r["body"] for r in console_rows(rows)
            if not r["event_name"] and (stream is None or r["attributes"][ATTR_IOSTREAM] == stream)
            and ATTR_REPEATED not in r["attributes"] and ATTR_DROPPED not in r["attributes"]]


def receiver_env(receiver, **extra):
    return evlog_env({**receiver.env("grpc"), "EVLOG_CAPTURE": "enabled", "EVLOG_SUMMARY": "false",
                      **{k: str(v) for k, v in extra.items()}})


def ok(proc):
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


# -- what is captured -----------------------------------------------------------------------------

FAMILY = r"""
import os, subprocess, sys
print("from print")
os.write(1, b"from os.write\n")
print("to stderr", file=sys.stderr)
subprocess.run([sys.executable, "-c", "print('from a python subprocess')"], check=True)
subprocess.run(["sh", "-c", "echo from a shell subprocess; echo shell stderr >&2"], check=True)
pid = os.fork()
if pid == 0:
    print("from a forked child", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("last")
"""


def test_print_os_write_children_and_subprocesses_arrive_with_their_stream(otlp_receiver):
    ok(run_instrumented(FAMILY, env=receiver_env(otlp_receiver)))
    otlp_receiver.wait_for(lambda: "last" in lines(otlp_receiver.logs()), 30)
    rows = otlp_receiver.logs()
    assert lines(rows, "stdout") == ["from print", "from os.write", "from a python subprocess",
                                     "from a shell subprocess", "from a forked child", "last"]
    assert lines(rows, "stderr") == ["to stderr", "shell stderr"]
    pids = {r["resource"]["process.pid"] for r in console_rows(rows)}
    assert len(pids) == 1, "lines are reported in the name of the launched program"


# -- the terminal side ------------------------------------------------------------------------------

WEIRD = r"""
import os, sys
out, err = sys.stdout.buffer, sys.stderr.buffer
for i in range(50):
    (out if i % 2 else err).write(b"interleaved %d\n" % i)
    (out if i % 2 else err).flush()
out.write(b"bad utf8 \xff\xfe, NUL \x00, bell \x07, tab\t, colour \x1b[31mred\x1b[0m\n")
out.write(b"progress 10%\rprogress 50%\rprogress 100%\r\n")
out.write(b"\x1b_evlog:0123456789abcdef:c" + b"0" * 50 + b"\x1b\\ not our marker\n")
out.write(b"L" * 100_000 + b"\n")
out.write(b"no trailing newline")
out.flush()
os.write(2, b"raw stderr without newline")
"""


@pytest.fixture(scope="module")
def weird_run():
    """WEIRD run once under evlog-instrument, its console to a receiver: (the process, the log records)."""
    r = CollectingReceiver().start()
    try:
        captured = ok(run_instrumented(WEIRD, env=receiver_env(r)))
        r.wait_for(lambda: "no trailing newline" in lines(r.logs()), 30)
        yield captured, r.logs()
    finally:
        r.stop()


def test_terminal_output_is_byte_for_byte_what_the_program_wrote(weird_run):
    plain = subprocess.run([PYTHON, "-c", WEIRD], env=evlog_env(), capture_output=True, timeout=60)
    captured, _rows = weird_run
    assert captured.stdout == plain.stdout
    assert captured.stderr == plain.stderr


def test_binary_long_and_unterminated_lines_become_records(weird_run):
    _captured, rows = weird_run
    out = lines(rows, "stdout")
    assert "bad utf8 \ufffd\ufffd, NUL \x00, bell \x07, tab\t, colour red" in out
    assert "progress 100%" in out and not any(x.startswith("progress 10%") for x in out)
    assert " not our marker" in out  # a foreign marker is passed on; rendered, the APC sequence is invisible
    long = [x for x in out if x.startswith("LLLL")]
    assert len(long) == 1 and long[0].endswith(" [evlog: line truncated, 91808 more bytes]")
    assert lines(rows, "stderr")[-1] == "raw stderr without newline"
    assert [int(x.split()[1]) for x in out if x.startswith("interleaved")] == list(range(1, 50, 2))
    assert [int(x.split()[1]) for x in lines(rows, "stderr") if x.startswith("interleaved")] == list(range(0, 50, 2))


PROMPT = r"""
import os, sys
cols, rows = os.get_terminal_size()
print("tty", sys.stdout.isatty(), sys.stderr.isatty(), f"{cols}x{rows}")
sys.stdout.write("Name? ")
sys.stdout.flush()
name = sys.stdin.readline().strip()
print("hi", name)
"""


def _read_until(fd, pred, timeout):
    data = b""
    deadline = time.monotonic() + timeout
    while not pred(data):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out; got {data!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: every writer is gone
                break
            if not chunk:
                break
            data += chunk
    return data


def test_a_terminal_stays_a_terminal_and_a_prompt_shows_before_input(otlp_receiver):
    master, slave = os.openpty()
    tty.setraw(slave)  # no output processing: what arrives is exactly what was written
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    proc = subprocess.Popen(LAUNCHER + [PYTHON, "-c", PROMPT], stdin=slave, stdout=slave, stderr=slave,
                            env=receiver_env(otlp_receiver), start_new_session=True)
    os.close(slave)
    try:
        shown = _read_until(master, lambda d: b"Name? " in d, 60)
        assert shown == b"tty True True 101x33\nName? "  # the prompt is there while the program waits
        os.write(master, b"bob\n")
        shown += _read_until(master, lambda d: False, 60)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert shown == b"tty True True 101x33\nName? hi bob\n"
    otlp_receiver.wait_for(lambda: "Name? hi bob" in lines(otlp_receiver.logs()), 30)
    assert lines(otlp_receiver.logs(), "stdout")[0] == "tty True True 101x33"


# -- modes, metadata, commands ----------------------------------------------------------------------

METADATA = r"""
import json
print("plain text stays private")
for epoch in range(3):
    print(json.dumps({"epoch": epoch, "loss": 1.0 / (epoch + 1), "phase": "train", "val": {"acc": epoch / 10}}))
print({"epoch": 9, "loss": 9.0})
print(' {"epoch": 9}')
"""


def test_default_mode_exports_only_metadata_as_events_and_gauges(tmp_path):
    run_dir = tmp_path / "run"
    ok(run_instrumented(METADATA, env=evlog_env({"EVLOG_RUN_DIR": str(run_dir)})))
    got = read_run_folder(str(run_dir))
    rows = console_rows(got["logs"])
    assert [r["event_name"] for r in rows] == ["evlog.metadata"] * 3
    assert [r["body"] for r in rows] == [
        {"epoch": e, "loss": 1.0 / (e + 1), "phase": "train", "val": {"acc": e / 10}} for e in range(3)]
    last = {}
    for m in got["metrics"]:
        if m["name"].startswith("evlog.metadata."):
            last[m["name"]] = m["value"]
    assert last == {"evlog.metadata.epoch": 2, "evlog.metadata.loss": pytest.approx(1 / 3),
                    "evlog.metadata.val.acc": pytest.approx(0.2)}


UNFINISHED = r"""
import fcntl, sys, termios, time

def write(stream, text):  # and wait (bounded) until evlog has read it: one read per write
    stream.write(text)
    stream.flush()
    deadline = time.monotonic() + 30
    while int.from_bytes(fcntl.ioctl(stream.fileno(), termios.FIONREAD, b"\0\0\0\0"), "little") and time.monotonic() < deadline:
        time.sleep(0.01)

write(sys.stderr, "x")
write(sys.stdout, "plain text\nabc")
write(sys.stdout, '{"a": 1}\n')  # the line is 'abc{"a": 1}': not metadata
write(sys.stderr, '{"b": 2}\n')  # 'x{"b": 2}': not metadata either
write(sys.stdout, '{"c": 3}\n')
"""


def test_metadata_after_unfinished_lines_is_what_the_line_renders_to(tmp_path):
    # Lines of plain text are not forwarded until metadata may come (no exporter process for them):
    # the unfinished line still goes first, so what a line is does not depend on how it was written.
    run_dir = tmp_path / "run"
    proc = ok(run_instrumented(UNFINISHED, env=evlog_env({"EVLOG_RUN_DIR": str(run_dir), "EVLOG_SUMMARY": "false"})))
    assert proc.stdout == b'plain text\nabc{"a": 1}\n{"c": 3}\n' and proc.stderr == b'x{"b": 2}\n'
    rows = console_rows(read_run_folder(str(run_dir))["logs"])
    assert [(r["event_name"], r["body"]) for r in rows] == [("evlog.metadata", {"c": 3})]


COMMANDS = r"""
import fcntl, sys, termios, time

def read_by_evlog(fd):
    # Streams are not ordered against each other (as cluster-job-logging.txt says): before relying
    # on a command sent on the other stream, wait (bounded) until it has been read from its pipe.
    deadline = time.monotonic() + 30
    while int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little") and time.monotonic() < deadline:
        time.sleep(0.01)

print("one", flush=True)
print('/LOGCOMMAND {"mode":"disabled"}', file=sys.stderr, flush=True)
read_by_evlog(2)
print("password is swordfish")
print('{"hidden": 1}')
print('/LOGCOMMAND {"mode": "metadata"}', flush=True)
print("still private")
print('{"shown": 2}', flush=True)
print('/LOGCOMMAND {"mode":"enabled"}', file=sys.stderr, flush=True)
read_by_evlog(2)
print("two")
"""


def test_a_logcommand_changes_the_mode_for_both_streams_from_that_line_on(otlp_receiver):
    ok(run_instrumented(COMMANDS, env=receiver_env(otlp_receiver)))
    otlp_receiver.wait_for(lambda: "two" in lines(otlp_receiver.logs()), 30)
    rows = console_rows(otlp_receiver.logs())
    assert [(r["event_name"] or "", r["body"]) for r in rows] == [
        ("", "one"),
        ("evlog.console.command", {"mode": "disabled"}),
        ("evlog.console.command", {"mode": "metadata"}),
        ("evlog.metadata", {"shown": 2}),
        ("evlog.console.command", {"mode": "enabled"}),
        ("", "two"),
    ]


def test_a_malformed_command_warns_once_and_stays_an_ordinary_line(otlp_receiver):
    code = "for _ in range(3): print('/LOGCOMMAND {mode: enabled}', flush=True)\nprint('after')"
    proc = ok(run_instrumented(code, env=receiver_env(otlp_receiver)))
    warnings = [x for x in proc.stderr.decode().splitlines() if "malformed console command" in x]
    assert len(warnings) == 1 and warnings[0].startswith("evlog: ") and "not valid JSON" in warnings[0]
    otlp_receiver.wait_for(lambda: "after" in lines(otlp_receiver.logs()), 30)
    assert lines(otlp_receiver.logs()) == ["/LOGCOMMAND {mode: enabled}", "after"]
    assert proc.stdout.decode().count("/LOGCOMMAND") == 3  # the terminal still shows them all


RENDER = r"""
import sys
for i in range(0, 101, 10):
    sys.stdout.write(f"\rtraining {i:3d}%")
    sys.stdout.flush()
print()
for _ in range(500):
    print("retrying...")
print("\n\n\n\n")
print("done")
"""


def test_progress_bars_repeats_and_empty_lines_are_condensed(otlp_receiver):
    ok(run_instrumented(RENDER, env=receiver_env(otlp_receiver)))
    otlp_receiver.wait_for(lambda: "done" in lines(otlp_receiver.logs()), 30)
    rows = console_rows(otlp_receiver.logs())
    assert [r["body"] for r in rows] == [
        "training 100%", "retrying...", "[evlog: previous line repeated 499 more times]", "", "done"]
    assert rows[2]["attributes"][ATTR_REPEATED] == 499


HUGE_LINE = """
import sys
print("before", flush=True)
sys.stdout.write("x" * int(sys.argv[1]) + "\\n")
sys.stdout.flush()
for i in range(6):
    print(f"after-{i}", flush=True)
"""


@pytest.mark.parametrize("size", [1_000_000, 10_000_000])
def test_a_huge_line_is_cut_and_the_lines_after_it_are_kept(tmp_path, size):
    script = tmp_path / "huge.py"
    script.write_text(HUGE_LINE)
    env = evlog_env(EVLOG_CAPTURE="enabled", EVLOG_RUN_DIR=tmp_path / "run", EVLOG_CONSUMERS="none")
    proc = ok(run_instrumented([PYTHON, str(script), str(size)], env=env))
    assert len(proc.stdout) == len("before\n") + size + 1 + 6 * len("after-0\n")  # the terminal gets every byte
    got = lines(read_run_folder(str(tmp_path / "run"))["logs"])
    cut = "x" * 8192 + f" [evlog: line truncated, {size - 8192} more bytes]"
    assert got == ["before", cut] + [f"after-{i}" for i in range(6)], [g[:80] for g in got]
    assert "dropped" not in proc.stderr.decode(), proc.stderr


SECRETS = r"""
import json
print("login password=swordfish user=bob")
print("Authorization: Bearer abcdef0123456789abcdef")
print("token ghp_" + "A" * 36 + " in a url https://bob:hunter2@example.com/x")
print("employee number EMP-31337 was paid")
print(json.dumps({"api_key": "swordfish2", "note": "sk-" + "B" * 40, "loss": 0.5}))
"""


def test_secrets_are_redacted_before_anything_leaves_the_process(otlp_receiver):
    proc = ok(run_instrumented(SECRETS, env=receiver_env(otlp_receiver, EVLOG_REDACT=r"EMP-\d+")))
    assert b"swordfish" in proc.stdout  # the terminal is the program's own: unchanged
    otlp_receiver.wait_for(lambda: any(r["event_name"] == "evlog.metadata" for r in otlp_receiver.logs()), 30)
    rows = console_rows(otlp_receiver.logs())
    dumped = json.dumps([(r["body"], r["attributes"]) for r in rows])
    for secret in ("swordfish", "abcdef0123456789", "A" * 36, "hunter2", "31337", "B" * 40):
        assert secret not in dumped, secret
    assert "login password=[REDACTED] user=bob" in lines(rows)
    assert rows[-1]["body"] == {"api_key": "[REDACTED]", "note": "[REDACTED]", "loss": 0.5}


SPANS = r"""
from opentelemetry import trace
tracer = trace.get_tracer("app")
print("before")
with tracer.start_as_current_span("outer") as outer:
    print("in outer")
    with tracer.start_as_current_span("inner"):
        print("in inner")
    print("in outer again")
print("after")
"""


def test_lines_carry_the_trace_context_of_the_current_span(otlp_receiver):
    ok(run_instrumented(SPANS, env=receiver_env(otlp_receiver)))
    otlp_receiver.wait_for(lambda: "after" in lines(otlp_receiver.logs()) and len(otlp_receiver.spans()) >= 2, 30)
    spans = {s["name"]: s for s in otlp_receiver.spans()}
    ctx = {r["body"]: (r["trace_id"], r["span_id"]) for r in console_rows(otlp_receiver.logs())}
    outer, inner = spans["outer"], spans["inner"]
    assert ctx["in outer"] == ctx["in outer again"] == (outer["trace_id"], outer["span_id"])
    assert ctx["in inner"] == (inner["trace_id"], inner["span_id"])
    assert ctx["before"] == ctx["after"] == ("", "")


# -- exit paths, back-pressure, broken pipes ----------------------------------------------------

EXITS = {
    "nonzero": ("import sys\nsys.exit(3)", 3),
    # its own SIGTERM ends it in the sleep
    "sigterm": ("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(30)", 128 + signal.SIGTERM),
    "os._exit": ("import os\nos._exit(0)", 0),
    "sigkill": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", 128 + signal.SIGKILL),
}


@pytest.mark.parametrize("how", sorted(EXITS))
def test_the_last_lines_arrive_however_the_program_ends(tmp_path, how):
    code, status = EXITS[how]
    head = "import sys\nprint('last words', flush=True)\nprint('last error', file=sys.stderr, flush=True)\n"
    run_dir = tmp_path / "run"
    proc = run_instrumented(head + code, env=evlog_env({"EVLOG_RUN_DIR": str(run_dir), "EVLOG_CAPTURE": "enabled"}))
    assert proc.returncode == status, proc.stderr[-2000:]
    assert proc.stdout == b"last words\n"
    rows = read_run_folder(str(run_dir))["logs"]  # the relay has finished: it held our pipes until then
    assert lines(rows, "stdout") == ["last words"] and lines(rows, "stderr") == ["last error"]


FLOOD = r"""
import sys
for i in range(100_000):
    print("line", i, "of the flood")
sys.stdout.flush()
print("flood over", file=sys.stderr)
"""

BURST = r"""
import sys
for i in range(200_000):
    print(i, "the quick brown fox jumps over the lazy dog", i * 7)
sys.stdout.flush()
print("burst over", file=sys.stderr)
"""


def test_a_200000_line_burst_arrives_whole_and_in_order_and_the_output_is_unchanged(tmp_path):
    plain = subprocess.run([PYTHON, "-c", BURST], env=evlog_env(), capture_output=True, timeout=120)
    run_dir = tmp_path / "run"
    proc = ok(run_instrumented(BURST, env=evlog_env({"EVLOG_RUN_DIR": str(run_dir), "EVLOG_CAPTURE": "enabled",
                                                     "EVLOG_SUMMARY": "false"}), timeout=180))
    assert proc.stdout == plain.stdout and proc.stderr == plain.stderr
    rows = read_run_folder(str(run_dir))["logs"]  # the launcher waited for the exporter process
    assert not [r for r in console_rows(rows) if ATTR_DROPPED in r["attributes"]]
    assert lines(rows, "stdout") == [f"{i} the quick brown fox jumps over the lazy dog {i * 7}" for i in range(200_000)]
    assert lines(rows, "stderr") == ["burst over"]


SIDECARS = r"""
import json, os, sys, time
import psutil
print(json.dumps({"something": "to export"}), flush=True)
launcher = psutil.Process(os.getppid())
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    others = [p for p in launcher.children(recursive=True) if p.pid != os.getpid()]
    if any("evlog.exporter.process" in " ".join(p.cmdline()) for p in others):
        break
    time.sleep(0.05)
me = psutil.Process()
roles = sorted("exporter" if "evlog.exporter.process" in " ".join(p.cmdline())
               else "reader" if p.ppid() == me.pid and "-S" in p.cmdline() else " ".join(p.cmdline()[:3]) for p in others)
json.dump(roles, open(sys.argv[1], "w"))
"""


def test_one_sidecar_process_the_exporter_besides_the_reader(tmp_path):
    out = tmp_path / "roles.json"
    ok(run_instrumented([PYTHON, "-c", SIDECARS, str(out)], env=evlog_env({"EVLOG_RUN_DIR": str(tmp_path / "run")})))
    assert json.loads(out.read_text()) == ["exporter", "reader"]


def test_output_lost_on_the_way_is_reported_line_for_line_by_the_builder():
    from opentelemetry.sdk.resources import Resource

    from evlog.builders.console import ConsoleLogs

    class Logs:
        def __init__(self):
            self.records = []

        def add(self, records):
            self.records += records

    logs = Logs()
    b = ConsoleLogs({"streams": ["stdout", "stderr"], "mode": "enabled"}, lambda: Resource({}), logs)
    first = b"one\ntwo\nthr"
    lost = b"ee\nfour\nfi"  # two newlines, and a line cut: "three" and "four" are lost, "five" too
    b.feed([("d", 0, None, 1, first, 0, 0, True)], 0.0)
    b.feed([("d", 0, None, 2, b"ve\nsix\n", len(first) + len(lost), 2 + 2, False)], 0.0)
    b.feed([], 5.0, True)
    got = [(r.log_record.body, dict(r.log_record.attributes)) for r in logs.records]
    assert got == [("one", {ATTR_IOSTREAM: "stdout"}), ("two", {ATTR_IOSTREAM: "stdout"}),
                   ("[evlog: 3 lines dropped: output came faster than it could be exported]",
                    {ATTR_IOSTREAM: "stdout", ATTR_DROPPED: 3}),
                   ("six", {ATTR_IOSTREAM: "stdout"})]


def test_a_collector_that_never_answers_does_not_hold_the_program(tmp_path):
    hole = socket.socket()  # accepts connections (the kernel does), never reads or answers
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    try:
        env = evlog_env({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{hole.getsockname()[1]}",
                         "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
                         "EVLOG_EXIT_TIMEOUT": "2", "EVLOG_CAPTURE": "enabled", "EVLOG_SUMMARY": "false"})
        proc = ok(run_instrumented(FLOOD, env=env, timeout=120))
    finally:
        hole.close()
    assert proc.stdout.count(b"\n") == 100_000 and b"flood over" in proc.stderr


def test_a_reader_that_goes_away_gives_the_program_a_broken_pipe_as_without_evlog():
    code = "import itertools\nfor i in itertools.count(): print(i, flush=True)"
    results = []
    for argv, env in (([PYTHON, "-c", code], evlog_env()),
                      (LAUNCHER + [PYTHON, "-c", code], evlog_env({"EVLOG_CAPTURE": "enabled", "EVLOG_SUMMARY": "false"}))):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout.readline() == b"0\n"
        proc.stdout.close()
        err = proc.stderr.read()
        results.append((proc.wait(60), b"BrokenPipeError" in err))
    assert results[1] == results[0]


def test_capture_off_leaves_the_descriptors_alone(otlp_receiver):
    code = ("import os\nfrom opentelemetry import trace\n"
            "with trace.get_tracer('t').start_as_current_span('ran'):\n"
            "    print(os.readlink('/proc/self/fd/1'), os.isatty(1))")
    seen = {}
    for mode in ("off", "enabled"):
        proc = subprocess.Popen(LAUNCHER + [PYTHON, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**receiver_env(otlp_receiver), "EVLOG_CAPTURE": mode})
        ours = f"pipe:[{os.fstat(proc.stdout.fileno()).st_ino}] False"
        out, _ = proc.communicate(timeout=120)
        seen[mode] = out.decode().strip() == ours
    assert seen == {"off": True, "enabled": False}
    otlp_receiver.wait_for(lambda: len([s for s in otlp_receiver.spans() if s["name"] == "ran"]) == 2, 30)
    assert len(console_rows(otlp_receiver.logs())) == 1  # the enabled run's line only


def test_configure_in_code_captures_until_uninstall(tmp_path):
    run_dir = tmp_path / "run"
    code = textwrap.dedent(f"""
        import os, sys, evlog
        from evlog.observed import console
        before = os.readlink("/proc/self/fd/1")
        evlog.configure(capture="enabled", run_dir={str(run_dir)!r}, consumers="none")
        during = os.readlink("/proc/self/fd/1")
        print("captured", flush=True)
        console.uninstall()
        print("not captured", flush=True)
        print(before == os.readlink("/proc/self/fd/1"), before != during, file=sys.stderr)
    """)
    proc = subprocess.run([PYTHON, "-c", code], env=evlog_env(), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == b"captured\nnot captured\n"
    assert proc.stderr.decode().splitlines()[-1] == "True True"
    assert lines(read_run_folder(str(run_dir))["logs"]) == ["captured"]
