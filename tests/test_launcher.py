"""evlog-instrument: set-up in every process, export to run folder / OTLP gRPC / OTLP HTTP, exit paths."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_files, run_instrumented

FAMILY = """
import json, multiprocessing as mp, os, subprocess, sys
from opentelemetry import trace
tracer = trace.get_tracer("test")

def child(tag):
    with tracer.start_as_current_span("child " + tag):
        pass

if __name__ == "__main__":
    exits = {}
    with tracer.start_as_current_span("parent"):
        for method in ("spawn", "fork", "forkserver"):
            p = mp.get_context(method).Process(target=child, args=(method,))
            p.start(); p.join()
            exits[method] = p.exitcode
        subprocess.run([sys.executable, "-c",
            "from opentelemetry import trace\\nwith trace.get_tracer('t').start_as_current_span('child subprocess'): pass"],
            check=True)
    print(json.dumps(exits))
"""

EXPECTED = {"parent", "child spawn", "child fork", "child forkserver", "child subprocess"}
EXITED = {"spawn": 0, "fork": 0, "forkserver": 0}  # FAMILY's exit codes of its children


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _check_family(spans):
    by_name = {s["name"]: s for s in spans}
    assert EXPECTED <= set(by_name), sorted(by_name)
    pids = {by_name[n]["resource"]["process.pid"] for n in EXPECTED}
    assert len(pids) == len(EXPECTED), "each process reports its own process.pid"
    run_ids = {by_name[n]["resource"].get("evlog.run.id") for n in EXPECTED}
    assert len(run_ids) == 1 and None not in run_ids, run_ids
    parent = by_name["parent"]
    for n in ("child spawn", "child fork"):  # a forkserver child's parent is the fork server
        assert by_name[n]["resource"]["process.parent_pid"] == parent["resource"]["process.pid"]
    assert {by_name[n]["resource"]["service.name"] for n in EXPECTED} == {"family"}


def test_every_child_process_writes_to_the_shared_run_folder(tmp_path):
    script = _write(tmp_path, "family.py", FAMILY)
    run_dir = tmp_path / "run"
    proc = run_instrumented([PYTHON, script], env=evlog_env(EVLOG_RUN_DIR=run_dir), check=True)
    assert json.loads(proc.stdout) == EXITED
    data = read_run_folder(str(run_dir))
    _check_family(data["spans"])
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith("traces-")), "per-process files"
    assert (os.stat(run_dir).st_mode & 0o777) == 0o700, "run folders are readable by the user alone"


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf", "http/json"])  # http/json: spans (evlog's own)
def test_every_child_process_exports_over_otlp(tmp_path, otlp_receiver, protocol):
    script = _write(tmp_path, "family.py", FAMILY)
    proc = run_instrumented([PYTHON, script], env=evlog_env(otlp_receiver.env(protocol)), check=True)
    assert json.loads(proc.stdout) == EXITED
    otlp_receiver.wait_for(lambda: EXPECTED <= {s["name"] for s in otlp_receiver.spans()}, timeout=60)
    _check_family(otlp_receiver.spans())


def test_default_run_folder_is_under_evlog_runs_and_summary_points_to_it(tmp_path):
    proc = run_instrumented(
        "from opentelemetry import trace\nwith trace.get_tracer('t').start_as_current_span('one'): pass",
        cwd=tmp_path, check=True,
    )
    runs = list((tmp_path / "evlog-runs").iterdir())
    assert len(runs) == 1 and runs[0].name.endswith("-python"), runs
    err = proc.stderr.decode()
    assert "1 spans" in err and f"evlog view evlog-runs/{runs[0].name}" in err, err
    assert [s["name"] for s in read_run_folder(str(runs[0]))["spans"]] == ["one"]


def test_summary_says_how_to_get_the_viewer_when_it_is_not_installed(tmp_path):
    launcher = "import sys; sys.modules['aiohttp'] = None; from evlog.launcher import main; sys.exit(main())"
    code = "from opentelemetry import trace\nwith trace.get_tracer('t').start_as_current_span('one'): pass"
    proc = subprocess.run([PYTHON, "-c", launcher, PYTHON, "-c", code], env=evlog_env(), cwd=tmp_path,
                          capture_output=True, timeout=120)
    [run] = (tmp_path / "evlog-runs").iterdir()
    assert proc.returncode == 0
    assert f"see them with: python -m pip install 'evlog-otel[view]' && evlog view evlog-runs/{run.name}" \
        in proc.stderr.decode(), proc.stderr


def test_summary_can_be_silenced(tmp_path):
    proc = run_instrumented("pass", env=evlog_env(EVLOG_RUN_DIR=tmp_path / "r", EVLOG_SUMMARY="false"), check=True)
    assert b"evlog" not in proc.stderr


def test_sigterm_flushes_spans_and_passes_the_signal_through(tmp_path):
    code = """
    import sys, time
    from opentelemetry import trace
    tracer = trace.get_tracer("t")
    for i in range(50):
        with tracer.start_as_current_span(f"before-term"):
            pass
    print("ready", flush=True)
    time.sleep(60)  # still running when the SIGTERM comes
    """
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([PYTHON, "-m", "evlog.launcher", PYTHON, "-c", textwrap.dedent(code)],
                            env=evlog_env(EVLOG_RUN_DIR=run_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    spans = read_run_folder(str(run_dir))["spans"]
    assert len([s for s in spans if s["name"] == "before-term"]) == 50


def test_pool_workers_flush_when_the_pool_terminates_them(tmp_path):
    code = """
    import multiprocessing as mp
    from opentelemetry import trace

    def task(i):
        with trace.get_tracer("t").start_as_current_span("in-worker"):
            return i * 2

    if __name__ == "__main__":
        with mp.get_context("fork").Pool(2) as pool:   # __exit__ terminates the workers (SIGTERM)
            assert sum(pool.map(task, range(20))) == 380
    """
    script = _write(tmp_path, "pool.py", code)
    run_dir = tmp_path / "run"
    run_instrumented([PYTHON, script], env=evlog_env(EVLOG_RUN_DIR=run_dir), check=True)
    spans = [s for s in read_run_folder(str(run_dir))["spans"] if s["name"] == "in-worker"]
    assert len(spans) == 20


def test_dead_endpoint_neither_blocks_nor_prints_a_traceback(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = """
    from opentelemetry import trace
    tracer = trace.get_tracer("t")
    for i in range(2000):
        with tracer.start_as_current_span("lost"):
            pass
    print("finished")
    """
    for protocol in ("grpc", "http/protobuf"):
        env = evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
        proc = run_instrumented(code, env=env, timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == 0 and b"finished" in proc.stdout
        assert "Traceback" not in err, err
        assert len([l for l in err.splitlines() if l.startswith("evlog:")]) <= 3, err
        assert "dropped" in err, err


def test_bad_settings_get_one_clear_message_and_the_program_runs_on_defaults(tmp_path):
    (tmp_path / "evlog.yaml").write_text("capture: metadata\nconsumers: [wsat\n")
    env = evlog_env(EVLOG_CAPTURE="loud", OTEL_EXPORTER_OTLP_ENDPOINT="localhost:4317", EVLOG_RUN_DIR=tmp_path / "r")
    proc = run_instrumented(
        "from opentelemetry import trace\nwith trace.get_tracer('t').start_as_current_span('still'): print('ran')",
        env=env, cwd=tmp_path,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 0 and b"ran" in proc.stdout
    assert "EVLOG_CAPTURE" in err and "'loud'" in err
    assert "evlog.yaml, line" in err and "malformed YAML" in err
    assert "OTEL_EXPORTER_OTLP_ENDPOINT='localhost:4317'" in err
    assert err.count("EVLOG_CAPTURE") == 1, "reported once for the whole run"
    # the endpoint was ignored, so the embedded default (run folder) took over
    assert [s["name"] for s in read_run_folder(str(tmp_path / "r"))["spans"]] == ["still"]


def test_usage_missing_command_and_exit_codes(tmp_path):
    proc = subprocess.run([PYTHON, "-m", "evlog.launcher"], capture_output=True, timeout=60)
    assert proc.returncode == 2 and b"usage: evlog-instrument" in proc.stderr
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "r")
    proc = subprocess.run([PYTHON, "-m", "evlog.launcher", "no-such-command-xyz"], capture_output=True, env=env, timeout=60)
    assert proc.returncode == 127 and b"no-such-command-xyz: command not found" in proc.stderr
    assert run_instrumented("import sys; sys.exit(3)", env=env).returncode == 3
    assert run_instrumented("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", env=env).returncode == 128 + 9


def test_resource_service_name_defaults_to_the_script_and_user_values_win(tmp_path):
    script = _write(tmp_path, "trainer.py", "from opentelemetry import trace\nwith trace.get_tracer('t').start_as_current_span('s'): pass\n")
    run_instrumented([PYTHON, script], env=evlog_env(EVLOG_RUN_DIR=tmp_path / "a"), check=True)
    res = read_run_folder(str(tmp_path / "a"))["spans"][0]["resource"]
    assert res["service.name"] == "trainer"
    assert res["host.name"] and res["process.pid"] and res["service.instance.id"]
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "b", OTEL_RESOURCE_ATTRIBUTES="service.name=fromattrs,team=ml",
                    OTEL_SERVICE_NAME="mine")
    run_instrumented([PYTHON, script], env=env, check=True)
    res = read_run_folder(str(tmp_path / "b"))["spans"][0]["resource"]
    assert res["service.name"] == "mine" and res["team"] == "ml"


def test_user_sitecustomize_still_runs_and_setup_happens_once(tmp_path):
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    code = """
    import builtins, evlog
    assert builtins.USER_SITE_RAN
    assert evlog.configure() is False, "already set up by the launcher"
    from opentelemetry import trace
    with trace.get_tracer('t').start_as_current_span('once'): pass
    """
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "r", PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    run_instrumented(code, env=env, check=True)
    assert [s["name"] for s in read_run_folder(str(tmp_path / "r"))["spans"]] == ["once"]


def _slow_exporter_start(tmp_path) -> str:
    """A PYTHONPATH whose sitecustomize holds the run's exporter process 1.5 s before it listens, then
    writes the file ``woke`` (the observed program runs the same file, and goes on at once)."""
    site = tmp_path / "slowsite"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys, time\nif 'evlog.exporter.process' in sys.orig_argv:\n    time.sleep(1.5)\n"
        f"    open({str(tmp_path / 'woke')!r}, 'w').close()\n")
    return os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))


def test_what_a_short_program_sent_before_its_exporter_process_listened_is_exported(tmp_path):
    """The launcher starts the exporter process with the program; a program done before it listens has
    connected and written into the socket: the launcher sees the connection waiting and waits for it."""
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "r", PYTHONPATH=_slow_exporter_start(tmp_path))
    proc = run_instrumented("from opentelemetry import trace\nwith trace.get_tracer('t').start_as_current_span('one'): pass",
                            env=env, check=True)
    assert [s["name"] for s in read_run_folder(str(tmp_path / "r"))["spans"]] == ["one"]
    assert "1 spans" in proc.stderr.decode() and (tmp_path / "woke").exists(), proc.stderr.decode()


def test_a_program_that_sends_nothing_ends_its_exporter_process_unheard(tmp_path):
    """Nothing connected: the exporter process, still starting, is ended at once (it never woke), and the
    summary counts no process."""
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "r", PYTHONPATH=_slow_exporter_start(tmp_path))
    proc = run_instrumented("print('quiet')", env=env, check=True)
    err = proc.stderr.decode()
    assert proc.stdout == b"quiet\n" and "from 0 processes ->" in err, err
    assert not (tmp_path / "woke").exists()


def test_nested_launcher_joins_the_outer_run(tmp_path):
    inner = f"{PYTHON} -m evlog.launcher {PYTHON} -c \"from opentelemetry import trace; trace.get_tracer('t').start_span('inner').end()\""
    code = f"import subprocess; subprocess.run({inner!r}, shell=True, check=True)"
    proc = run_instrumented(code, env=evlog_env(EVLOG_RUN_DIR=tmp_path / "r"), check=True)
    spans = read_run_folder(str(tmp_path / "r"))["spans"]
    assert [s["name"] for s in spans] == ["inner"]
    assert proc.stderr.decode().count("spans,") == 1, "one summary, from the outer launcher"


def test_traceparent_in_the_environment_is_continued(tmp_path):
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    run_instrumented("from opentelemetry import trace; trace.get_tracer('t').start_span('joined').end()",
                     env=evlog_env(EVLOG_RUN_DIR=tmp_path / "r", TRACEPARENT=tp), check=True)
    (span,) = read_run_folder(str(tmp_path / "r"))["spans"]
    assert span["trace_id"] == "0af7651916cd43dd8448eb211c80319c" and span["parent_span_id"] == "b7ad6b7169203331"


def test_sdk_disabled_runs_the_program_without_telemetry(tmp_path):
    proc = run_instrumented("print('plain')", env=evlog_env(EVLOG_RUN_DIR=tmp_path / "r", OTEL_SDK_DISABLED="true"),
                            check=True)
    assert proc.stdout == b"plain\n" and not run_files(tmp_path / "r")


def test_opentelemetry_instrument_finds_the_evlog_distro(tmp_path):
    bindir = os.path.dirname(sys.executable)
    otel = os.path.join(bindir, "opentelemetry-instrument")
    if not os.path.exists(otel):
        pytest.fail("opentelemetry-instrument is not installed (pip install -e .[test])")
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "r", OTEL_PYTHON_DISTRO="evlog", OTEL_PYTHON_CONFIGURATOR="evlog")
    subprocess.run([otel, PYTHON, "-c", "from opentelemetry import trace; trace.get_tracer('t').start_span('via-otel').end()"],
                   env=env, check=True, timeout=60, capture_output=True)
    (span,) = read_run_folder(str(tmp_path / "r"))["spans"]
    assert span["name"] == "via-otel" and span["resource"]["telemetry.distro.name"] == "evlog"


OTHER_CONFIGURATOR = ("evlog: opentelemetry-instrument set the SDK up with another installed distro's configurator, "
                      "so evlog records nothing; set OTEL_PYTHON_DISTRO=evlog, or run evlog-instrument instead")


@pytest.mark.parametrize("distro", [None, "evlog"])
def test_opentelemetry_instrument_with_another_distro_installed_records_or_says_what_to_set(tmp_path, distro):
    otel = os.path.join(os.path.dirname(sys.executable), "opentelemetry-instrument")
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "r", **({"OTEL_PYTHON_DISTRO": distro} if distro else {}))
    code = """
    import concurrent.futures as cf
    from opentelemetry import trace
    if __name__ == "__main__":
        trace.get_tracer("t").start_span("via-otel").end()
        with cf.ProcessPoolExecutor(2) as ex:
            sum(ex.map(abs, range(10)))
    """
    proc = subprocess.run([otel, PYTHON, "-c", textwrap.dedent(code)], env=env, timeout=60, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    spans = read_run_folder(str(tmp_path / "r"))["spans"] if (tmp_path / "r").exists() else []
    evlog_lines = [l for l in proc.stderr.decode().splitlines() if l.startswith("evlog:")]
    if distro or spans:  # evlog's distro was named, or came first in the entry-point scan
        assert "via-otel" in {s["name"] for s in spans} and evlog_lines == [], proc.stderr
    else:  # opentelemetry-distro's configurator won: one message, not one per process
        assert evlog_lines == [OTHER_CONFIGURATOR], proc.stderr


FAKE_INSTRUMENTORS = {
    "fakeinst.py": """
        import os
        class Always:
            def instrument(self, **kw):
                os.environ["FAKE_ALWAYS"] = "1"
        class OnYaml:
            def instrument(self, **kw):
                os.environ["FAKE_ONYAML"] = "1"
    """,
    "fakealways-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakealways\nVersion: 0.1\n",
    "fakealways-0.1.dist-info/entry_points.txt": "[opentelemetry_instrumentor]\nalways = fakeinst:Always\n",
    "fakeonyaml-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakeonyaml\nVersion: 0.1\n"
                                        "Provides-Extra: instruments\nRequires-Dist: pyyaml; extra == \"instruments\"\n",
    "fakeonyaml-0.1.dist-info/entry_points.txt": "[opentelemetry_instrumentor]\nonyaml = fakeinst:OnYaml\n",
}


def test_other_installed_instrumentors_activate_when_their_library_is_imported(tmp_path):
    site = tmp_path / "site"
    for name, text in FAKE_INSTRUMENTORS.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(textwrap.dedent(text))
    code = """
    import json, os
    found = {"at start": [os.environ.get("FAKE_ALWAYS"), os.environ.get("FAKE_ONYAML")]}
    import yaml
    found["after import yaml"] = [os.environ.get("FAKE_ALWAYS"), os.environ.get("FAKE_ONYAML")]
    print(json.dumps(found))
    """
    env = evlog_env(EVLOG_RUN_DIR=tmp_path / "r", PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    proc = run_instrumented(code, env=env, check=True)
    # [FAKE_ALWAYS, FAKE_ONYAML]: the one that names no library is active at start, the other once yaml is imported
    assert json.loads(proc.stdout) == {"at start": ["1", None], "after import yaml": ["1", "1"]}
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "always"
    proc = run_instrumented("import os; print(os.environ.get('FAKE_ALWAYS'))", env=env, check=True)
    assert proc.stdout.strip() == b"None"


def test_configure_in_code_without_the_launcher(tmp_path):
    code = f"""
    import evlog
    from opentelemetry import trace
    assert evlog.configure(run_dir={str(tmp_path / 'r')!r}, consumers="none") is True
    assert evlog.configure() is False, "once per process"
    with trace.get_tracer('t').start_as_current_span('in-code'): pass
    """
    subprocess.run([PYTHON, "-c", textwrap.dedent(code)], env=evlog_env(), check=True, timeout=60)
    (span,) = read_run_folder(str(tmp_path / "r"))["spans"]
    assert span["name"] == "in-code" and span["resource"]["service.name"] == "python"


def test_an_instrumentation_whose_evlog_module_is_missing_is_named_and_the_program_runs(tmp_path):
    """A broken install (an instrumentor's module gone) says which instrumentation did not start."""
    code = f"""
    from evlog.observed import targets
    targets.TARGETS["wave"] = ("wave", "evlog.observed.not_there:WaveInstrumentor")
    import evlog
    evlog.configure(run_dir={str(tmp_path / 'r')!r}, consumers="none", summary=False)
    import wave
    print("ran", flush=True)
    """
    proc = subprocess.run([PYTHON, "-c", textwrap.dedent(code)], env=evlog_env(), capture_output=True, timeout=60)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0 and proc.stdout == b"ran\n", err
    assert [line for line in err.splitlines() if line.startswith("evlog:")] == [
        "evlog: the wave instrumentation could not start: ModuleNotFoundError(\"No module named "
        "'evlog.observed.not_there'\")"], err


def test_otel_traces_exporter_file_without_a_run_dir_means_the_run_folder(tmp_path):
    """README: `file` is the run folder; without EVLOG_RUN_DIR it is made where the default one would be."""
    code = "from opentelemetry import trace\nwith trace.get_tracer('t').start_as_current_span('one'): pass"
    env = evlog_env(OTEL_TRACES_EXPORTER="file", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    proc = run_instrumented(code, env=env, cwd=tmp_path, check=True)
    err = proc.stderr.decode()
    [run] = (tmp_path / "evlog-runs").iterdir()
    assert [s["name"] for s in read_run_folder(str(run))["spans"]] == ["one"]
    assert "1 spans" in err and "dropped" not in err and "failed" not in err, err
    assert f"-> {run}" in err, err


def test_a_program_that_sigkills_itself_is_counted_for_what_it_exported(tmp_path):
    """The summary sums what each process wrote to the stats file: progress lines after exports, not
    only a line at exit, which a SIGKILL never reaches."""
    code = ("import os, signal, time\nfrom opentelemetry import trace\n"
            "[trace.get_tracer('x').start_span('s').end() for _ in range(9)]\n"
            "trace.get_tracer_provider().force_flush()\nos.kill(os.getpid(), signal.SIGKILL)")
    proc = run_instrumented(code, env=evlog_env(EVLOG_RUN_DIR=tmp_path / "run"))
    err = proc.stderr.decode()
    assert proc.returncode == -signal.SIGKILL or proc.returncode == 128 + signal.SIGKILL, (proc.returncode, err)
    assert len(read_run_folder(str(tmp_path / "run"))["spans"]) == 9
    assert "evlog: 9 spans" in err and "from 1 process" in err, err


OS_EXIT = r"""
import multiprocessing as mp, os, sys
from opentelemetry import trace

def made(tag, n):
    [trace.get_tracer("x").start_span(tag).end() for _ in range(n)]

def child():
    made("child", 4)
    os._exit(0)

if __name__ == "__main__":
    how = sys.argv[1]
    if how == "main":
        made("main", 9)
        os._exit(3)
    p = mp.get_context(how).Process(target=child)
    p.start(); p.join()
    print("child exit", p.exitcode, flush=True)
"""


@pytest.mark.parametrize("how", ["main", "spawn", "fork", "forkserver"])
def test_os_exit_in_any_process_kind_keeps_what_it_made(tmp_path, how):
    """os._exit skips atexit; evlog flushes first, in the main program and in every kind of child."""
    script = _write(tmp_path, "osexit.py", OS_EXIT)
    proc = run_instrumented([PYTHON, script, how], env=evlog_env(EVLOG_RUN_DIR=tmp_path / "run"))
    err = proc.stderr.decode()
    names = [s["name"] for s in read_run_folder(str(tmp_path / "run"))["spans"]]
    if how == "main":
        assert proc.returncode == 3, err
        assert names.count("main") == 9 and "from 1 process" in err, (names, err)
    else:
        assert proc.returncode == 0 and b"child exit 0" in proc.stdout, err
        assert names.count("child") == 4, (names, err)


SCHEDULER_TWICE = """
from distributed import Client, LocalCluster
from opentelemetry import trace

def inc(x):
    return x + 1

if __name__ == "__main__":
    # a span exported before this process becomes the scheduler: its resource then gains dask.role, so
    # the process has two resources in the data (one process, counted once)
    trace.get_tracer("app").start_span("before the cluster").end()
    getattr(trace.get_tracer_provider(), "force_flush", lambda: None)()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
            Client(cluster) as client:
        print(sum(client.gather(client.map(inc, range(20)))))
"""


def test_the_summary_and_evlog_summary_count_the_same_processes_each_once(tmp_path):
    """The scheduler's process with two resources, the 2 workers (two resources each, when they export
    before they know their role), and multiprocessing's resource tracker (counted when it lived long
    enough to export its gauges): each process once, the exporter process apart, in the launcher's
    summary, `evlog summary` and the dashboard's overview."""
    import json
    import re

    from evlog.data.panels.overview import overview
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store

    script = _write(tmp_path, "app.py", SCHEDULER_TWICE)
    run = tmp_path / "run"
    proc = run_instrumented([PYTHON, str(script)], env=evlog_env(EVLOG_RUN_DIR=run), timeout=180, check=True)
    assert proc.stdout.strip() == b"210", proc.stdout
    err = proc.stderr.decode()
    said = re.search(r" metric points from (\d+) processes( \+ evlog's exporter)? -> ", err)
    assert said, err
    data = read_run_folder(str(run))
    resources = {json.dumps(r["resource"], sort_keys=True): r["resource"]
                 for s in ("spans", "logs", "metrics") for r in data[s]}.values()
    program = [r for r in resources if r.get("evlog.process.role") != "exporter"]
    (main_pid,) = {r["process.pid"] for r in program if r.get("dask.role") == "scheduler"}
    assert len([r for r in program if r["process.pid"] == main_pid]) == 2, program  # the case under test
    assert len({r["process.pid"] for r in program if r.get("dask.role") == "worker"}) == 2, program
    pids = {r["process.pid"] for r in program}
    assert len(pids) < len(program) and len(pids) >= 3, program
    assert (int(said.group(1)), bool(said.group(2))) == (len(pids), True), (said.group(0), pids)
    cli = subprocess.run([PYTHON, "-m", "evlog.cli", "summary", str(run), "--json"], capture_output=True, timeout=120,
                         env=evlog_env())
    assert cli.returncode == 0, cli.stderr
    counted = json.loads(cli.stdout)
    assert (counted["processes"], counted["exporters"]) == (len(pids), 1), (counted, pids)
    text = subprocess.run([PYTHON, "-m", "evlog.cli", "summary", str(run)], capture_output=True, timeout=120,
                          env=evlog_env()).stdout.decode()
    assert re.search(rf"^processes\s+{len(pids)}  \+ evlog's exporter \(1 host\)$", text, re.M), text
    # the dashboard's header counts and its run selector
    store = Store(None)
    RunFolder(str(run)).load_into(store)
    page = overview(store, None, store, str(run))
    assert (page["summary"]["processes"], page["summary"]["exporters"]) == (len(pids), 1), page["summary"]
    assert [r["processes"] for r in page["runs"]] == [len(pids)], page["runs"]
