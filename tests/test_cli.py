"""`evlog summary | story | events | view | report` against run folders: counts, stories in time order across
processes, events by topic, corrupt and foreign folders, `evlog view` serving and following a
run that is still being written, and `evlog report` run in-process."""
from __future__ import annotations

import gc
import json
import os
import re
import sqlite3
import subprocess
import sys
import urllib.request

import pytest
from helpers import evlog_env, run_instrumented, start_view, stop_view, wait_until
from synthetic_run import MS, T0, log, logs_request, make_run, resource, span, traces_request, write_lines

from evlog import cli


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def run(tmp_path):
    path = tmp_path / "evlog-runs" / "20260101T000000Z-app"
    info = make_run(str(path), n_tasks=30)
    return str(path), info


def test_summary_counts_everything_in_a_run_folder(run, capsys):
    path, info = run
    code, out, err = run_cli(capsys, "summary", path, "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["spans"] == 60 and s["tasks"] == 30 and s["traces"] == 1
    assert s["span_events"] == 90  # 3 transitions per scheduler task
    assert s["events"] == 7 + 8  # topic events + console metadata
    assert s["logs"] == 1
    assert s["processes"] == 3
    assert s["metric_points"] > 0
    assert s["start"] < s["end"]
    code, out, err = run_cli(capsys, "summary", path)
    assert code == 0
    assert re.search(r"^spans\s+60\s", out, re.M) and re.search(r"^processes\s+3\s", out, re.M)
    assert "time range" in out and "UTC" in out


def test_summary_defaults_to_the_newest_run_under_evlog_runs(tmp_path, capsys, monkeypatch):
    make_run(str(tmp_path / "evlog-runs" / "20250101T000000Z-old"), n_tasks=3)
    make_run(str(tmp_path / "evlog-runs" / "20260101T000000Z-new"), n_tasks=5)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "summary")
    assert code == 0, err
    assert out.splitlines()[0].endswith("20260101T000000Z-new")
    assert re.search(r"^spans\s+10\s", out, re.M)


def test_story_prints_transitions_in_time_order(run, capsys):
    path, info = run
    key = info["keys"][4]
    code, out, err = run_cli(capsys, "story", key, path)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split()[:4] == ["time", "(UTC)", "start", "finish"]
    steps = [ln.split()[2:4] for ln in lines[1:]]
    assert steps == [["released", "waiting"], ["waiting", "processing"], ["processing", "memory"]]
    assert info["workers"][0] in lines[-1] and "scheduler" in lines[-1]
    code, out, err = run_cli(capsys, "story", key, path, "--json")
    story = json.loads(out)
    assert [e["time"] for e in story] == sorted(e["time"] for e in story)
    assert story[0]["stimulus"] == "update-graph-4"


def test_story_merges_transitions_from_several_processes(tmp_path, capsys):
    path = str(tmp_path / "run")
    os.makedirs(path)
    tr = "1" * 32
    a = span(tr, "a" * 16, "dask.task inc", T0, T0 + 5 * MS, {"dask.task.key": "k-1"}, [
        ("transition", T0 + 3 * MS, {"dask.transition.start": "processing", "dask.transition.finish": "memory",
                                     "dask.stimulus_id": "s2"})])
    b = span(tr, "b" * 16, "dask.task inc", T0, T0 + 5 * MS, {"dask.task.key": "k-1"}, [
        ("transition", T0 + 1 * MS, {"dask.transition.start": "waiting", "dask.transition.finish": "processing",
                                     "dask.stimulus_id": "s1"})])
    write_lines(os.path.join(path, "traces-1.jsonl"), [traces_request(resource(1, "scheduler"), [a])])
    write_lines(os.path.join(path, "traces-2.jsonl"), [traces_request(resource(2, "worker", "tcp://w:1"), [b])])
    code, out, err = run_cli(capsys, "story", "k-1", path, "--json")
    story = json.loads(out)
    assert [e["stimulus"] for e in story] == ["s1", "s2"]
    # each process named as elsewhere; a worker's address is in the worker column, not its process's name
    assert {(e["process"], e["worker"]) for e in story} == {("app scheduler 1@hostA", ""), ("app worker 2@hostA", "tcp://w:1")}


def test_story_of_an_unknown_key_says_so(run, capsys):
    path, _ = run
    code, out, err = run_cli(capsys, "story", "no-such-key", path)
    assert code == 1
    assert "no transitions recorded for task 'no-such-key'" in err


def test_events_by_topic_like_get_events(run, capsys):
    path, _ = run
    code, out, err = run_cli(capsys, "events", "runtimes", path, "--json")
    assert code == 0, err
    evs = json.loads(out)
    assert [e["msg"] for e in evs] == [{"start": i, "stop": i + 1} for i in range(5)]
    assert all(e["topic"] == "runtimes" for e in evs)
    code, out, err = run_cli(capsys, "events", path)  # one positional that is a folder: the run folder
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 7 + 8, "every event: the 7 with a topic and the 8 console metadata events"
    assert any("checkpoints" in ln and "checkpoint saved" in ln for ln in lines)  # evlog.log_event / evlog.topic
    assert any(" all " in ln and "add-worker" in ln for ln in lines)  # dask.log_event / dask.topic
    groups = [ln.split()[2] for ln in lines]
    assert groups == sorted(groups) and groups.count("evlog.metadata") == 8, "grouped: topic, else event name"
    code, out, err = run_cli(capsys, "events", "nope", path)
    assert code == 0 and out == "" and "no events with topic 'nope'" in err and "runtimes" in err
    assert "evlog.metadata" in err


def test_events_lists_every_event_of_the_quickstart_run_as_summary_counts_them(tmp_path, capsys):
    """The quickstart's events are console metadata (event name evlog.metadata, no topic)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run_instrumented([sys.executable, os.path.join(root, "examples", "quickstart.py")],
                     env=evlog_env(EVLOG_SUMMARY="false"), cwd=str(tmp_path), check=True)
    (path,) = (tmp_path / "evlog-runs").iterdir()
    code, out, err = run_cli(capsys, "summary", str(path), "--json")
    assert code == 0 and json.loads(out)["events"] == 5, (out, err)
    code, out, err = run_cli(capsys, "events", str(path), "--json")
    assert code == 0 and err == ""
    evs = json.loads(out)
    assert [(e["topic"], e["event_name"]) for e in evs] == [("evlog.metadata", "evlog.metadata")] * 5
    assert [e["msg"]["epoch"] for e in evs] == [1, 2, 3, 4, 5]
    code, out, err = run_cli(capsys, "events", "evlog.metadata", str(path))
    assert code == 0 and len(out.strip().splitlines()) == 5


def test_a_corrupt_line_is_reported_with_file_and_line_and_the_rest_kept(run, capsys):
    path, info = run
    f = os.path.join(path, "logs-100.jsonl")
    with open(f, "a") as fh:
        fh.write('{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "zz"}]}]}]}\n')
        fh.write("this is not json\n")
    write_lines(f, [logs_request(resource(100, "scheduler"), [
        log(T0, "dask.log_event", "after the damage", {"dask.topic": "late"})])])
    code, out, err = run_cli(capsys, "events", "late", path)
    assert code == 0
    assert "after the damage" in out
    assert f"{f}:2: skipped a corrupt line" in err and "traceId" in err
    assert f"{f}:3: skipped a corrupt line" in err


def test_report_in_process_leaves_its_tasks_to_reference_counts_not_the_collector(run, capsys):
    """The report's tasks, computations and executions (and the rows they hold) are freed as the command returns:
    a task and its computation refer to each other, and a big run's rows left as cyclic garbage cost the
    collector's next pass a third of a second to walk and free."""
    from evlog.report import model

    path, _info = run
    gc.collect()  # other tests' garbage
    enabled = gc.isenabled()
    gc.disable()
    try:
        code, out, err = run_cli(capsys, "report", path, "--format", "json")
        left = [type(o).__name__ for o in gc.get_objects() if type(o) in (model.Task, model.Computation,
                                                                          model.Execution)]
    finally:
        if enabled:
            gc.enable()
    assert code == 0 and json.loads(out)["computations"], err
    assert left == []


def test_a_line_of_random_bytes_is_reported_as_not_utf8_json_with_file_and_line(run, capsys):
    path, _info = run
    f = os.path.join(path, "traces-100.jsonl")
    with open(f, "ab") as fh:
        fh.write(bytes([0x9c, 0x00, 0xff, 0x41, 0xfe, 0x13, 0x80, 0x7f]) + b"\n")  # json.loads guessed UTF-16
    code, out, err = run_cli(capsys, "summary", path, "--json")
    assert code == 0 and json.loads(out)["spans"] == 60, "the other lines are kept"
    assert err == f"evlog: {f}:2: skipped a corrupt line: not UTF-8 JSON (byte 0x9c at column 1)\n"


def test_an_incomplete_last_line_is_reported(run, capsys):
    path, _ = run
    f = os.path.join(path, "traces-100.jsonl")
    with open(f, "a") as fh:
        fh.write('{"resourceSpans": [')
    code, out, err = run_cli(capsys, "summary", path)
    assert code == 0
    assert f"{f}:2: incomplete last line" in err


@pytest.mark.parametrize("make, expect", [
    (lambda p: None, "no such run folder"),
    (lambda p: open(p, "w").write("x"), "not a folder"),
    (lambda p: (os.makedirs(p), open(os.path.join(p, "notes.txt"), "w").write("x")), "not an evlog run folder"),
])
def test_a_missing_or_foreign_run_folder_gets_a_clear_message(tmp_path, capsys, make, expect):
    p = str(tmp_path / "thing")
    make(p)
    code, out, err = run_cli(capsys, "summary", p)
    assert code == 1
    assert err.startswith(f"evlog: {p}") and expect in err
    assert "Traceback" not in err


def test_a_corrupt_or_foreign_database_gets_a_clear_message(tmp_path, capsys):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    code, out, err = run_cli(capsys, "summary", "--db", str(junk))
    assert code == 1 and "not an evlog database" in err and str(junk) in err
    foreign = tmp_path / "foreign.sqlite"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE users (name TEXT)")
    c.commit()
    c.close()
    code, out, err = run_cli(capsys, "story", "k", "--db", str(foreign))
    assert code == 1 and "not evlog's" in err and "users" in err
    code, out, err = run_cli(capsys, "events", "--db", str(tmp_path / "missing.sqlite"))
    assert code == 1 and "no such database" in err


@pytest.mark.parametrize("command", [["serve", "--http-port", "0", "--grpc-port", "0"], ["summary"]],
                         ids=["serve", "summary"])
def test_a_database_in_a_missing_folder_is_named_as_such(tmp_path, capsys, command):
    db = tmp_path / "nonexistent" / "x.sqlite"
    code, out, err = run_cli(capsys, *command, "--db", str(db))
    assert code == 1 and out == ""
    if command[0] == "serve":
        assert err == f"evlog: {db}: cannot create the database: the folder {db.parent} does not exist\n"
    else:
        assert err == f"evlog: {db}: no such database\n"
    assert not db.parent.exists()


def test_a_damaged_evlog_database_gets_a_clear_message(run, tmp_path, capsys):
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store

    path, info = run
    db = tmp_path / "damaged.sqlite"
    st = Store(str(db))
    RunFolder(path).load_into(st)
    st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    st.close()
    data = bytearray(db.read_bytes())
    page = 4096
    data[page:] = b"\xa5" * (len(data) - page)  # keep the header page, scramble every table
    db.write_bytes(bytes(data))
    for argv in (["summary", "--db", str(db)], ["story", info["keys"][0], "--db", str(db)]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 1, argv
        assert err.startswith(f"evlog: {db}:") and "damaged database" in err and "Traceback" not in err


def test_bad_usage_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["story"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli.main(["serve", "--http-port", "99999"])
    assert e.value.code == 2
    assert "port out of range" in capsys.readouterr().err


def test_view_refuses_a_non_loopback_host_without_a_token(run, capsys):
    path, _ = run
    code, out, err = run_cli(capsys, "view", path, "--host", "0.0.0.0")
    assert code == 1 and "--token" in err and "not a loopback address" in err


# ---------------------------------------------------------------------------------------------
# evlog view, as a user runs it


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def test_view_serves_the_dashboard_and_follows_a_growing_run(run):
    path, info = run
    proc, url = start_view(path, "--port", "0")
    try:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as r:
            page = r.read().decode()
        assert "<title>evlog dashboard</title>" in page
        with urllib.request.urlopen(url + "static/vendor/uplot/uPlot.iife.min.js", timeout=10) as r:
            assert r.status == 200 and len(r.read()) > 10_000
        ov = wait_until(lambda: (lambda o: o if o["summary"]["spans"] == 60 else None)(_get(url + "api/overview")))
        assert ov["source"] == f"run folder {path}"
        g = _get(url + "api/gantt")
        assert g["mode"] == "bars" and len(g["bars"]) == 30  # the worker-side executions
        assert set(g["workers"]) == set(info["workers"])
        # the run goes on: a new process appends spans; the view picks them up
        extra = [span("2" * 32, f"{0xabc000 + i:016x}", "dask.execute late", T0 + i * MS, T0 + (i + 1) * MS,
                      {"dask.task.key": f"late-{i}", "thread.id": 7}, kind=5) for i in range(4)]
        write_lines(os.path.join(path, "traces-999.jsonl"),
                    [traces_request(resource(999, "worker", "tcp://127.0.0.1:49999"), extra)])
        wait_until(lambda: _get(url + "api/overview")["summary"]["spans"] == 64)
        assert "tcp://127.0.0.1:49999" in _get(url + "api/overview")["workers"]
    finally:
        stop_view(proc)


def test_view_with_a_token_asks_for_it(run):
    path, _ = run
    proc, url = start_view(path, "--token", "s3cret")
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(url + "api/overview")
        assert e.value.code == 401
        req = urllib.request.Request(url + "api/overview", headers={"Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        assert _get(url + "api/overview?token=s3cret")["source"].startswith("run folder")
        with urllib.request.urlopen(url, timeout=10) as r:  # the page itself loads, then asks
            assert "token-dialog" in r.read().decode()
    finally:
        stop_view(proc)


@pytest.mark.parametrize("command", ["serve", "view"])
def test_serve_and_view_without_the_view_extra_say_what_to_install(run, tmp_path, command):
    """A real `evlog` process in which aiohttp cannot be imported (a module of that name that raises
    ModuleNotFoundError, first on PYTHONPATH), as in an install without the `view` extra."""
    path, _info = run
    hide = tmp_path / "no-aiohttp"
    hide.mkdir()
    (hide / "aiohttp.py").write_text("raise ModuleNotFoundError(\"No module named 'aiohttp'\", name='aiohttp')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide)] + sys.path)}
    argv = {"serve": ["serve", "--http-port", "0", "--grpc-port", "0", "--db", str(tmp_path / "x.sqlite")],
            "view": ["view", path]}[command]
    proc = subprocess.run([sys.executable, "-m", "evlog.cli", *argv], env=env, cwd=tmp_path, capture_output=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and proc.stdout == b""
    assert proc.stderr.decode() == (f"evlog: evlog {command} needs the viewer extras: pip install 'evlog-otel[view]' "
                                    "(No module named 'aiohttp')\n")


def test_programs_started_by_tests_write_no_run_folder_into_the_checkout():
    """Tests start programs without EVLOG_RUN_DIR and without a cwd (tests/conftest.py runs them all in
    a temporary folder): their default ./evlog-runs must not be the checkout's."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = os.path.join(root, "evlog-runs")
    here = os.path.join(os.getcwd(), "evlog-runs")

    def listing(path):
        return set(os.listdir(path)) if os.path.isdir(path) else set()

    before, before_here = listing(runs), listing(here)
    run_instrumented("from opentelemetry import trace; trace.get_tracer('t').start_span('s').end()",
                     env=evlog_env(EVLOG_SUMMARY="false"), check=True)
    assert listing(runs) == before, f"new run folders in the checkout: {sorted(listing(runs) - before)}"
    assert len(listing(here) - before_here) == 1, "it went to the tests' own folder"
