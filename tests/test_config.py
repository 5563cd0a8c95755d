"""Settings: EVLOG_* variables, the YAML file, OTEL_* exporter choice; every bad value named, never raised."""
from __future__ import annotations

import subprocess

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from evlog import config


def test_defaults_are_the_embedded_run_folder_and_documented_values():
    s = config.load({}, cwd="/nonexistent")
    assert s.capture == "metadata" and s.consumers == config.DEFAULT_CONSUMERS
    assert s.dask_transitions and s.summary and not s.problems
    assert s.pool_spans == "chunk"
    assert s.exporters.embedded and s.exporters.traces == ("file",)


def test_variables_win_over_the_yaml_file(tmp_path):
    (tmp_path / "evlog.yaml").write_text("capture: {mode: enabled}\nconsumers: [wsat, mem]\nsummary: false\n")
    s = config.load({"EVLOG_CAPTURE": "disabled"}, cwd=str(tmp_path))
    assert s.capture == "disabled" and s.consumers == ("wsat", "mem") and s.summary is False
    assert s.config_file == str(tmp_path / "evlog.yaml")


def test_evlog_config_names_the_file(tmp_path):
    f = tmp_path / "other.yaml"
    f.write_text("EVLOG_CONSUMERS: none\ndask_transitions: off\ncustom: {a: 1}\n")
    s = config.load({"EVLOG_CONFIG": str(f)}, cwd="/nonexistent")
    assert s.consumers == () and s.dask_transitions is False and s.extra == {"custom": {"a": 1}}


def test_bad_values_are_named_and_replaced_by_defaults(tmp_path):
    (tmp_path / "evlog.yaml").write_text("summary: true\n\nconsumers: [wsat, nope]\nredact: ['(unclosed']\n")
    s = config.load({"EVLOG_CAPTURE": "loud", "EVLOG_SUMMARY": "maybe"}, cwd=str(tmp_path))
    text = "\n".join(s.problems)
    assert "EVLOG_CAPTURE: unknown capture mode 'loud'" in text
    assert "EVLOG_SUMMARY: expected true or false, got 'maybe'" in text
    assert f"{tmp_path / 'evlog.yaml'}, line 3, consumers: unknown consumer(s) 'nope'" in text
    assert "line 4, redact: redact pattern '(unclosed' is not a valid regular expression" in text
    assert s.capture == "metadata" and s.summary is True and s.consumers == ("wsat",) and s.redact == ()


def test_pool_spans_from_the_variable_or_the_file_and_a_bad_mode_is_named(tmp_path):
    assert config.load({"EVLOG_POOL_SPANS": " Call "}, cwd="/nonexistent").pool_spans == "call"
    (tmp_path / "evlog.yaml").write_text("pool_spans: call\n")
    assert config.load({}, cwd=str(tmp_path)).pool_spans == "call"
    assert config.load({"EVLOG_POOL_SPANS": "chunk"}, cwd=str(tmp_path)).pool_spans == "chunk"  # the variable wins
    s = config.load({"EVLOG_POOL_SPANS": "batch"}, cwd="/nonexistent")
    assert s.pool_spans == "chunk" and s.problems == (
        "EVLOG_POOL_SPANS: unknown pool_spans mode 'batch' (expected one of call, chunk); using chunk",)
    (tmp_path / "evlog.yaml").write_text("summary: true\npool_spans: [call]\n")
    s = config.load({}, cwd=str(tmp_path))
    assert s.pool_spans == "chunk"
    assert f"{tmp_path / 'evlog.yaml'}, line 2, pool_spans: unknown pool_spans mode ['call']" in s.problems[0]


def test_unknown_yaml_keys_are_named_with_the_closest_known_key(tmp_path):
    f = tmp_path / "evlog.yaml"
    f.write_text("captur: enabled\nfoo: bar\nEVLOG_SUMARY: false\ncapture: {mdoe: enabled}\n")
    s = config.load({}, cwd=str(tmp_path))
    assert s.problems == (
        f"{f}, line 1: unknown key 'captur' (did you mean 'capture'?); ignoring it",
        f"{f}, line 2: unknown key 'foo' (known keys: run_dir, capture, consumers, redact, dask_transitions, "
        "dask_trace_tasks, pool_spans, span_processors, summary, profile_interval); ignoring it",
        f"{f}, line 3: unknown key 'EVLOG_SUMARY' (did you mean 'summary'?); ignoring it",
        f"{f}, line 4, capture: unknown key 'mdoe' (did you mean 'mode'?); ignoring it",
    )
    assert s.capture == "metadata" and s.summary is True


def test_dask_trace_tasks_from_the_variable_or_the_file_and_a_bad_value_named(tmp_path):
    assert config.load({}).dask_trace_tasks == 2000
    assert config.load({"EVLOG_DASK_TRACE_TASKS": "500"}).dask_trace_tasks == 500
    assert config.load({"EVLOG_DASK_TRACE_TASKS": "0"}).dask_trace_tasks == 0
    s = config.load({"EVLOG_DASK_TRACE_TASKS": "lots"})
    assert s.dask_trace_tasks == 2000 and s.problems == (
        "EVLOG_DASK_TRACE_TASKS: expected a whole number of tasks >= 0 (0: no limit), got 'lots'; using 2000",)
    f = tmp_path / "evlog.yaml"
    f.write_text("dask_trace_tasks: 300\n")
    assert config.load({}, cwd=str(tmp_path)).dask_trace_tasks == 300
    assert config.load({"EVLOG_DASK_TRACE_TASKS": "40"}, cwd=str(tmp_path)).dask_trace_tasks == 40  # the variable wins
    f.write_text("summary: true\ndask_trace_tasks: -3\n")
    s = config.load({}, cwd=str(tmp_path))
    assert s.dask_trace_tasks == 2000 and s.problems == (
        f"{f}, line 2, dask_trace_tasks: expected a whole number of tasks >= 0 (0: no limit), got -3; using 2000",)


def test_wrongly_typed_yaml_values_name_their_key(tmp_path):
    f = tmp_path / "evlog.yaml"
    f.write_text("redact: {a: 1}\nsummary: [1]\ndask_transitions: maybe\nconsumers: {wsat: 1}\nrun_dir: 7\n")
    s = config.load({}, cwd=str(tmp_path))
    assert s.problems == (
        f"{f}, line 5, run_dir: expected a folder path, got 7; using the default folder",
        f"{f}, line 4, consumers: expected consumer names (a comma list, a list, or none), got {{'wsat': 1}}; "
        "using the default, wsat,psat,loadavg,mem,bytes",
        f"{f}, line 1, redact: expected a regular expression or a list of them, got {{'a': 1}}; ignoring it",
        f"{f}, line 3, dask_transitions: expected true or false, got 'maybe'; using true",
        f"{f}, line 2, summary: expected true or false, got [1]; using true",
    )
    assert s.redact == () and s.summary is True and s.dask_transitions is True
    assert s.consumers == config.DEFAULT_CONSUMERS and s.run_dir is None


def test_a_bare_off_in_yaml_is_the_capture_mode_off(tmp_path):
    (tmp_path / "evlog.yaml").write_text("capture: off\n")
    s = config.load({}, cwd=str(tmp_path))
    assert s.capture == "off" and not s.problems


def test_consumers_with_no_valid_name_fall_back_to_the_default():
    s = config.load({"EVLOG_CONSUMERS": "foo,bar"}, cwd="/nonexistent")
    assert s.consumers == config.DEFAULT_CONSUMERS
    assert s.problems == ("EVLOG_CONSUMERS: unknown consumer(s) 'foo', 'bar' (known: wsat, psat, esat, loadavg, "
                          "mem, bytes, core, id, timeline, full, or none); using the default, wsat,psat,loadavg,mem,bytes",)
    s = config.load({"EVLOG_CONSUMERS": "foo,mem"}, cwd="/nonexistent")
    assert s.consumers == ("mem",) and s.problems[0].endswith("; ignoring them")


def test_a_bad_sampler_or_ratio_is_named_with_what_is_used_instead():
    s = config.load({"OTEL_TRACES_SAMPLER": "garbage"}, cwd="/nonexistent")
    assert s.sampler == ("parentbased_always_on", None)
    assert s.problems == ("OTEL_TRACES_SAMPLER: unknown sampler 'garbage' (expected one of always_on, always_off, "
                          "traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio); "
                          "using parentbased_always_on",)
    s = config.load({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "5"}, cwd="/nonexistent")
    assert s.sampler == ("traceidratio", 1.0)
    assert s.problems == ("OTEL_TRACES_SAMPLER_ARG: '5' is out of range (expected a sampling ratio from 0 to 1 for "
                          "traceidratio); using 1.0",)
    s = config.load({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
                    cwd="/nonexistent")
    assert s.sampler == ("parentbased_traceidratio", 1.0)
    assert s.problems == ("OTEL_TRACES_SAMPLER_ARG: 'half' is not a number (expected a sampling ratio from 0 to 1 "
                          "for parentbased_traceidratio); using 1.0",)
    s = config.load({"OTEL_TRACES_SAMPLER": "TraceIdRatio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, cwd="/nonexistent")
    assert s.sampler == ("traceidratio", 0.25) and not s.problems


def test_sdk_numbers_fall_back_to_their_default_one_message_each():
    env = {"OTEL_BSP_SCHEDULE_DELAY": "-5", "OTEL_METRIC_EXPORT_INTERVAL": "soon", "OTEL_BLRP_MAX_QUEUE_SIZE": "0",
           "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "99999", "OTEL_BSP_EXPORT_TIMEOUT": "2500"}
    s = config.load(env, cwd="/nonexistent")
    assert s.problems == (
        "OTEL_BSP_SCHEDULE_DELAY: expected a whole number of milliseconds, 1 or more, got '-5'; using 1000",
        "OTEL_BLRP_MAX_QUEUE_SIZE: expected a whole number of log records, 1 or more, got '0'; using 8192",
        "OTEL_METRIC_EXPORT_INTERVAL: expected a whole number of milliseconds, 1 or more, got 'soon'; using 1000",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 99999 spans is more than the queue holds (OTEL_BSP_MAX_QUEUE_SIZE is "
        "16384); using 16384",
    )
    n = s.sdk_numbers
    assert n["OTEL_BSP_SCHEDULE_DELAY"] == 1000 and n["OTEL_METRIC_EXPORT_INTERVAL"] == 1000
    assert n["OTEL_BLRP_MAX_QUEUE_SIZE"] == 8192 and n["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] == 16384
    assert n["OTEL_BSP_EXPORT_TIMEOUT"] == 2500, "a good value is the user's"


@pytest.mark.parametrize("text, line", [
    ("capture: [enabled\n", 1),  # PyYAML notices the open bracket at the end of the file, line 2
    ("capture: 'enabled\n", 1),
    ("capture enabled\nconsumers: [wsat]\n", 1),  # the key's missing ':' is noticed at line 2's ':'
    ("capture: enabled: yes\n", 1),
    ("capture: enabled\nconsumers: [wsat\n", 2),
    ("capture: enabled\nconsumers: [wsat\nredact: x\n", 2),
    ("capture: enabled\nconsumers enabled\nredact: x\n", 2),
    ("capture: enabled\nconsumers: wsat\n\tredact: x\n", 3),
    ("- enabled\ncapture: enabled\n", 2),
])
def test_malformed_yaml_names_the_file_and_the_line_of_the_fault(tmp_path, text, line):
    (tmp_path / "evlog.yaml").write_text(text)
    s = config.load({}, cwd=str(tmp_path))
    assert len(s.problems) == 1 and s.problems[0].startswith(f"{tmp_path / 'evlog.yaml'}, line {line}: malformed YAML ("), \
        s.problems
    assert s.capture == "metadata"


def test_a_yaml_value_its_tag_cannot_make_is_named_by_its_line(tmp_path):
    (tmp_path / "evlog.yaml").write_text("capture: enabled\nconsumers: !!int wsat\n")
    s = config.load({}, cwd=str(tmp_path))
    assert s.problems == (f"{tmp_path / 'evlog.yaml'}, line 2: a value YAML cannot make (invalid literal for int() "
                          "with base 10: 'wsat'); using defaults",)
    assert s.capture == "metadata"


def test_unreadable_or_foreign_config_files(tmp_path):
    s = config.load({"EVLOG_CONFIG": str(tmp_path / "missing.yaml")})
    assert "EVLOG_CONFIG: cannot read" in s.problems[0]
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    s = config.load({"EVLOG_CONFIG": str(tmp_path / "list.yaml")})
    assert "expected a mapping" in s.problems[0]
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00bad")
    s = config.load({"EVLOG_CONFIG": str(tmp_path / "bin.yaml")})
    assert "not UTF-8" in s.problems[0]


def test_otlp_endpoint_and_protocol_selection():
    s = config.load({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, cwd="/nonexistent")
    assert not s.exporters.embedded and s.exporters.traces == ("otlp",) and s.exporters.protocol["traces"] == "grpc"
    s = config.load({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, cwd="/nonexistent")
    assert s.exporters.protocol["logs"] == "http/protobuf", "the HTTP port implies HTTP"
    s = config.load({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                     "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"}, cwd="/nonexistent")
    assert s.exporters.protocol == {"traces": "grpc", "metrics": "http/protobuf", "logs": "grpc"}
    s = config.load({"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}, cwd="/nonexistent")
    assert s.exporters.traces == ("console",) and s.exporters.metrics == () and s.exporters.logs == ("otlp",)


def test_bad_endpoint_falls_back_to_the_run_folder():
    s = config.load({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"}, cwd="/nonexistent")
    assert s.exporters.embedded
    assert "OTEL_EXPORTER_OTLP_ENDPOINT='localhost:4317' is not a usable endpoint" in s.problems[0]
    s = config.load({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:99999"}, cwd="/nonexistent")
    assert s.exporters.embedded and "port" in s.problems[0].lower()


def test_disabled_instrumentations_accept_both_spellings():
    s = config.load({"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "evlog_dask, futures"}, cwd="/nonexistent")
    assert not s.instrumentation_enabled("dask") and not s.instrumentation_enabled("futures")
    assert s.instrumentation_enabled("multiprocessing")


@hsettings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([*(s.variable for s in config.SETTINGS if s.parse),
                                        "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                                        "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER",
                                        "OTEL_TRACES_SAMPLER_ARG", *config.SDK_NUMBERS]),
                       st.text(max_size=30)))
def test_any_variable_values_give_settings_never_an_exception(env):
    s = config.load(env, cwd="/nonexistent")
    assert s.capture in config.CAPTURE_MODES and s.pool_spans in config.POOL_SPANS
    assert all(isinstance(p, str) and p for p in s.problems)
    assert s.sampler[0] in config.SAMPLERS and all(v >= 1 for v in s.sdk_numbers.values())


@hsettings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_yaml_text_gives_settings_never_an_exception(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("y") / "evlog.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass") if "\ud800" not in text else None
    s = config.load({"EVLOG_CONFIG": str(path)})
    assert s.capture in config.CAPTURE_MODES


# -- in real processes: one bad setting keeps every signal's telemetry --------------------------------

SIGNALS_PROGRAM = r"""
import evlog
from opentelemetry import trace
with trace.get_tracer("app").start_as_current_span("work"):
    evlog.log_event("app", "an event")
    print("a console line", flush=True)
"""


def _bad_setting_cases():
    cases = [(var, "-5", f"{var}: expected a whole number of {unit}, 1 or more, got '-5'; using {default}")
             for var, (default, unit) in config.SDK_NUMBERS.items()]
    cases.append(("OTEL_BSP_SCHEDULE_DELAY", "soon",
                  "OTEL_BSP_SCHEDULE_DELAY: expected a whole number of milliseconds, 1 or more, got 'soon'; using 1000"))
    cases.append(("EVLOG_CONSUMERS", "foo,bar",
                  "EVLOG_CONSUMERS: unknown consumer(s) 'foo', 'bar' (known: wsat, psat, esat, loadavg, mem, bytes, "
                  "core, id, timeline, full, or none); using the default, wsat,psat,loadavg,mem,bytes"))
    cases.append(("OTEL_TRACES_SAMPLER", "garbage",
                  "OTEL_TRACES_SAMPLER: unknown sampler 'garbage' (expected one of always_on, always_off, traceidratio, "
                  "parentbased_always_on, parentbased_always_off, parentbased_traceidratio); using parentbased_always_on"))
    cases.append(("OTEL_TRACES_SAMPLER_ARG", "5",
                  "OTEL_TRACES_SAMPLER_ARG: '5' is out of range (expected a sampling ratio from 0 to 1 for "
                  "traceidratio); using 1.0"))
    return cases


@pytest.mark.parametrize("var,value,message", _bad_setting_cases(), ids=lambda x: x if isinstance(x, str) and
                         x.isupper() else None)
def test_a_bad_setting_falls_back_with_one_message_and_every_signal_keeps_its_telemetry(tmp_path, var, value,
                                                                                        message):
    env = evlog_env({var: value}, EVLOG_RUN_DIR=tmp_path / "run", EVLOG_SUMMARY="false", EVLOG_CAPTURE="enabled")
    if var == "OTEL_TRACES_SAMPLER_ARG":
        env["OTEL_TRACES_SAMPLER"] = "traceidratio"
    proc = run_instrumented(SIGNALS_PROGRAM, env=env, timeout=120)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0 and proc.stdout == b"a console line\n", err
    assert [line for line in err.splitlines() if line.startswith("evlog: ")] == [f"evlog: {message}"], err
    got = read_run_folder(str(tmp_path / "run"))
    assert [s["name"] for s in got["spans"]] == ["work"], "traces"
    assert {r["body"] for r in got["logs"]} >= {"an event", "a console line"}, "logs: the program's and the console's"
    assert {m["name"] for m in got["metrics"]} >= {"evlog.worker.saturation", "evlog.bytes.allocated"}, "metrics"


@pytest.mark.parametrize("env,name", [({"OTEL_SERVICE_NAME": "mysvc"}, "mysvc"),
                                      ({"OTEL_RESOURCE_ATTRIBUTES": "team=a,service.name=my%20svc"}, "my_svc"),
                                      ({"OTEL_SERVICE_NAME": "first", "OTEL_RESOURCE_ATTRIBUTES": "service.name=x"},
                                       "first"),
                                      ({}, "app")],
                         ids=["OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "both", "neither"])
def test_the_run_folder_is_named_after_the_service_name_when_set(tmp_path, env, name):
    (tmp_path / "app.py").write_text("from opentelemetry import trace\ntrace.get_tracer('a').start_span('s').end()\n")
    proc = run_instrumented([PYTHON, "app.py"], env=evlog_env(env, EVLOG_SUMMARY="false"), cwd=str(tmp_path),
                            timeout=60, check=True)
    (run_dir,) = (tmp_path / "evlog-runs").iterdir()
    assert run_dir.name.endswith(f"Z-{name}"), (run_dir.name, proc.stderr)
    spans = read_run_folder(str(run_dir))["spans"]
    assert [s["name"] for s in spans] == ["s"]
    assert spans[0]["resource"]["service.name"] == (name.replace("_", " ") if env else "app")


def test_span_processors_take_module_attribute_names_and_name_the_others():
    s = config.load({"EVLOG_SPAN_PROCESSORS": "pkg.mod:Proc, bad, other:make.log,,"})
    assert s.span_processors == ("pkg.mod:Proc", "other:make.log")
    assert s.problems == ("EVLOG_SPAN_PROCESSORS: expected module:attribute (like mypkg.telemetry:MyProcessor), "
                          "got 'bad'; ignoring it",)
    s = config.load({"EVLOG_SPAN_PROCESSORS": ""})
    assert s.span_processors == () and not s.problems


# -- one declaration per setting: load, evlog.configure() and the README read it ------------------------

def test_an_argument_of_configure_is_read_as_its_variable_is_and_a_bad_one_named_once():
    for name, bad in [("capture", "bogus"), ("consumers", "foo,bar"), ("summary", "maybe"), ("pool_spans", "batch"),
                      ("dask_trace_tasks", -3), ("profile_interval", "fast"), ("run_dir", 7)]:
        variable = config.BY_NAME[name].variable
        from_env = config.load({variable: bad}, cwd="/nonexistent")
        settings, problems = config.with_arguments(config.load({}, cwd="/nonexistent"), {name: bad})
        assert len(from_env.problems) == 1 and problems == [
            from_env.problems[0].replace(f"{variable}: ", f"evlog.configure({name}=...): ", 1)], (problems, from_env)
        assert getattr(settings, name) == getattr(from_env, name) == config.BY_NAME[name].default
    settings, problems = config.with_arguments(config.load({"EVLOG_CAPTURE": "enabled"}, cwd="/nonexistent"),
                                               {"capture": "Off", "consumers": ["WSAT", "mem"], "redact": "secret"})
    assert (settings.capture, settings.consumers, settings.redact, problems) == ("off", ("wsat", "mem"), ("secret",), [])


def test_configure_names_an_unknown_argument_and_one_its_variable_alone_sets():
    settings, problems = config.with_arguments(config.load({}, cwd="/nonexistent"),
                                               {"captur": "enabled", "spool_limit": "2G", "summary": False})
    assert problems == ["evlog.configure: unknown setting 'captur' (did you mean 'capture'?); ignoring it",
                        "evlog.configure: spool_limit is read from EVLOG_SPOOL_LIMIT only; ignoring it"]
    assert settings.capture == "metadata" and settings.spool_limit == 1 << 30 and settings.summary is False


def test_configure_with_a_bad_capture_mode_says_so_once_and_the_program_runs_on_the_default(tmp_path):
    code = ("import evlog\nfrom evlog import config\n"
            f"started = evlog.configure(capture='bogus', run_dir={str(tmp_path / 'run')!r}, consumers='none', "
            "summary=False)\n"
            "print(started, config.get().capture, flush=True)\n")
    proc = subprocess.run([PYTHON, "-c", code], env=evlog_env(), capture_output=True, timeout=60, cwd=tmp_path)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0 and proc.stdout == b"True metadata\n", err
    assert [line for line in err.splitlines() if line.startswith("evlog:")] == [
        "evlog: evlog.configure(capture=...): unknown capture mode 'bogus' (expected one of enabled, metadata, "
        "disabled, off); using metadata"], err


def test_each_setting_is_declared_once_and_the_default_it_shows_is_the_default_it_has():
    assert len({s.name for s in config.SETTINGS}) == len({s.variable for s in config.SETTINGS}) == len(config.SETTINGS)
    assert all(s.variable.startswith("EVLOG_") and s.help and s.shown for s in config.SETTINGS)
    for s in config.SETTINGS:
        assert s.default is None or isinstance(s.default, s.type), s.name
        assert config.Settings.FIELDS[s.name] == s.default, s.name
        shown = s.shown.strip("`")
        if s.parse is not None and s.shown == f"`{shown}`":  # one value, as a variable would be set to it
            assert s.parse(shown, None) == pytest.approx(s.default), s.name


def test_spool_limit_takes_a_size_and_names_a_bad_one():
    assert config.load({"EVLOG_SPOOL_LIMIT": "512M"}, cwd="/nonexistent").spool_limit == 512 << 20
    assert config.load({"EVLOG_SPOOL_LIMIT": "4096"}, cwd="/nonexistent").spool_limit == 4096
    assert config.load({"EVLOG_SPOOL_LIMIT": ""}, cwd="/nonexistent").spool_limit == 1 << 30
    for bad in ("lots", "-1G", "inf"):
        s = config.load({"EVLOG_SPOOL_LIMIT": bad}, cwd="/nonexistent")
        assert s.spool_limit == 1 << 30 and s.problems == (
            f"EVLOG_SPOOL_LIMIT: expected a size like 512M or 2G, got {bad!r}; using 1G",)
    assert config.from_variable("spool_limit", {"EVLOG_SPOOL_LIMIT": "lots"}) == 1 << 30  # quietly
    assert config.from_variable("spool_limit", {"EVLOG_SPOOL_LIMIT": "2K"}) == 2048


_ARGUMENT_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3),
    max_leaves=6)


@hsettings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([s.name for s in config.SETTINGS] + ["nope"]), _ARGUMENT_VALUES))
def test_any_configure_arguments_give_settings_never_an_exception(arguments):
    settings, problems = config.with_arguments(config.load({}, cwd="/nonexistent"), arguments)
    assert settings.capture in config.CAPTURE_MODES and settings.pool_spans in config.POOL_SPANS
    assert all(isinstance(p, str) and p.startswith("evlog.configure") for p in problems)
