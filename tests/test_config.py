"""Settings: EVLOG_* variables, the YAML file, OTEL_* exporter choice; every bad value named, never raised."""
from __future__ import annotations

from hypothesis import given, settings as hsettings, strategies as st

from evlog import config


def test_defaults_are_the_embedded_run_folder_and_documented_values():
    s = config.load({}, cwd="/nonexistent")
    assert s.capture == "metadata" and s.consumers == config.DEFAULT_CONSUMERS
    assert s.dask_transitions and s.summary and not s.problems
    assert s.pool_spans == "call"
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
    assert f"{tmp_path / 'evlog.yaml'}, line 3: unknown consumer(s) 'nope'" in text
    assert "line 4: redact pattern '(unclosed' is not a valid regular expression" in text
    assert s.capture == "metadata" and s.summary is True and s.consumers == ("wsat",) and s.redact == ()


def test_pool_spans_from_the_variable_or_the_file_and_a_bad_mode_is_named(tmp_path):
    assert config.load({"EVLOG_POOL_SPANS": " Chunk "}, cwd="/nonexistent").pool_spans == "chunk"
    (tmp_path / "evlog.yaml").write_text("pool_spans: chunk\n")
    assert config.load({}, cwd=str(tmp_path)).pool_spans == "chunk"
    assert config.load({"EVLOG_POOL_SPANS": "call"}, cwd=str(tmp_path)).pool_spans == "call"  # the variable wins
    s = config.load({"EVLOG_POOL_SPANS": "batch"}, cwd="/nonexistent")
    assert s.pool_spans == "call" and s.problems == (
        "EVLOG_POOL_SPANS: unknown pool_spans mode 'batch' (expected one of call, chunk); using call",)
    (tmp_path / "evlog.yaml").write_text("summary: true\npool_spans: [chunk]\n")
    s = config.load({}, cwd=str(tmp_path))
    assert s.pool_spans == "call"
    assert f"{tmp_path / 'evlog.yaml'}, line 2: unknown pool_spans mode ['chunk']" in s.problems[0]


def test_malformed_yaml_names_the_file_and_line(tmp_path):
    (tmp_path / "evlog.yaml").write_text("capture: enabled\nconsumers: [wsat\n")
    s = config.load({}, cwd=str(tmp_path))
    assert len(s.problems) == 1 and "evlog.yaml, line" in s.problems[0] and "malformed YAML" in s.problems[0]
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
@given(st.dictionaries(st.sampled_from(["EVLOG_CAPTURE", "EVLOG_CONSUMERS", "EVLOG_REDACT", "EVLOG_SUMMARY",
                                        "EVLOG_DASK_TRANSITIONS", "EVLOG_RUN_DIR", "OTEL_EXPORTER_OTLP_ENDPOINT",
                                        "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED",
                                        "EVLOG_POOL_SPANS"]),
                       st.text(max_size=30)))
def test_any_variable_values_give_settings_never_an_exception(env):
    s = config.load(env, cwd="/nonexistent")
    assert s.capture in config.CAPTURE_MODES and s.pool_spans in config.POOL_SPANS
    assert all(isinstance(p, str) and p for p in s.problems)


@hsettings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_yaml_text_gives_settings_never_an_exception(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("y") / "evlog.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass") if "\ud800" not in text else None
    s = config.load({"EVLOG_CONFIG": str(path)})
    assert s.capture in config.CAPTURE_MODES
