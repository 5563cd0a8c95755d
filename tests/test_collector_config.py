"""collector-config/ checked without Docker: every file parses; every collector pipeline uses only
components it defines, each of them in the contrib distribution (tests/data/collector_components.txt,
with the Collector version it was taken from) and fit for the pipeline's signal; the compose file,
Tempo, Prometheus and Grafana provisioning point at each other; every dashboard query names metrics,
labels, spans and attributes listed in docs/conventions.md; and the run folder evlog writes is what the
Collector's otlpjsonfile receiver reads (OTLP/JSON, hex ids, one export request per line).
"""
from __future__ import annotations

import base64
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from evlog.wire.console import ATTR_IOSTREAM

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "collector-config"
COMPONENTS_FILE = Path(__file__).resolve().parent / "data" / "collector_components.txt"
CONVENTIONS = ROOT / "docs" / "conventions.md"
BACKENDS_DOC = ROOT / "docs" / "backends.md"

COLLECTOR_CONFIGS = sorted(CONFIG_DIR.glob("otelcol*.yaml"))
DASHBOARDS = sorted((CONFIG_DIR / "grafana" / "dashboards").glob("*.json"))
SIGNALS = ("traces", "metrics", "logs")


# ---------------------------------------------------------------------------------------------
# the component list


def load_components():
    """(version, {kind: {type: spec}}) from tests/data/collector_components.txt.

    spec is a set of signals, or for a connector a (input, output) pair."""
    version = None
    table: dict[str, dict] = {k: {} for k in ("receiver", "processor", "exporter", "connector", "extension")}
    for raw in COMPONENTS_FILE.read_text().splitlines():
        line = raw.strip()
        m = re.match(r"#\s*version:\s*(\S+)", line)
        if m:
            version = m.group(1)
        if not line or line.startswith("#"):
            continue
        kind, ctype, signals, _module = line.split()
        if kind == "connector":
            src, dst = signals.split(">")
            table[kind][ctype] = (src, dst)
        elif signals == "-":
            table[kind][ctype] = set()
        else:
            table[kind][ctype] = set(signals.split(","))
    assert version, f"{COMPONENTS_FILE} must say which Collector version its list comes from"
    return version, table


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def load_yaml(path: Path):
    with open(path) as f:
        return yaml.safe_load(f)


# ---------------------------------------------------------------------------------------------
# docs/conventions.md


def _md_tables(text: str):
    """Yield (section title, [row dicts]) for every markdown table."""
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip()):
            header = [c.strip().lower() for c in line.strip().strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                rows.append(dict(zip(header, cells)))
                i += 1
            yield section, rows
            continue
        i += 1


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


METRIC_KINDS = {"counter", "updowncounter", "histogram", "gauge"}


class Conventions:
    def __init__(self, text: str):
        self.metrics: dict[str, tuple[str, str]] = {}  # name -> (kind, unit)
        self.spans: list[str] = []
        self.events: list[str] = []
        self.attributes: set[str] = set()
        self.resource_attributes: set[str] = set()
        self.prometheus: dict[str, str] = {}
        for _section, rows in _md_tables(text):
            for row in rows:
                if "prometheus" in row and "metric" in row:
                    names = _ticked(row["metric"])
                    proms = _ticked(row["prometheus"])
                    if names and proms:
                        self.prometheus[names[0]] = proms[0]
                    continue
                if "name" not in row or "kind" not in row:
                    continue
                names = _ticked(row["name"])
                kind = row["kind"].strip().lower()
                self.attributes.update(_ticked(row.get("attributes", "")))
                if not names:
                    continue
                name = names[0]
                if kind in METRIC_KINDS:
                    unit = (_ticked(row.get("unit", "")) or [""])[0]
                    self.metrics[name] = (kind, unit)
                elif kind.startswith("span ("):
                    self.spans.append(name)
                elif kind in ("event", "span event"):
                    self.events.append(name)
                elif kind == "resource attribute":
                    self.resource_attributes.add(name)
                elif kind == "attribute":
                    self.attributes.add(name)

    @property
    def all_attributes(self) -> set[str]:
        return self.attributes | self.resource_attributes


@pytest.fixture(scope="module")
def conventions() -> Conventions:
    return Conventions(CONVENTIONS.read_text())


# The names the brief fixes (other parts implement them); conventions.md must list them all.
REQUIRED_METRICS = {
    "dask.scheduler.transitions": "counter", "dask.task.duration": "histogram", "dask.scheduler.tasks": "gauge",
    "dask.scheduler.workers": "gauge", "dask.transfer.bytes": "counter", "evlog.worker.saturation": "gauge",
    "evlog.processor.saturation": "gauge", "evlog.event.saturation": "gauge",
    "system.cpu.load_average.1m": "gauge", "evlog.memory.free_fraction": "gauge", "evlog.bytes.allocated": "gauge",
    "evlog.metadata.{key}": "gauge", "torchelastic.{group}.{name}": "gauge",
}
REQUIRED_SPANS = {"dask.compute", "dask.task {prefix}", "dask.execute {prefix}", "dask.transfer",
                  "futures.task {function}", "multiprocessing.task {function}"}
REQUIRED_EVENTS = {"dask.log_event", "transition", "evlog.metadata"}
REQUIRED_RESOURCE = {"service.name", "service.instance.id", "process.pid", "process.parent_pid", "host.name",
                     "evlog.run.id", "dask.role", "dask.worker.address", "dask.worker.name", "torch.rank",
                     "torch.local_rank", "torch.group_rank", "torch.role"}
REQUIRED_ATTRIBUTES = {"dask.transition.start", "dask.transition.finish", "dask.task.prefix", "dask.task.state",
                       "dask.worker.status", "dask.transfer.source", "dask.transfer.bytes", "dask.topic",
                       "dask.stimulus_id", "evlog.event_type", ATTR_IOSTREAM}


# ---------------------------------------------------------------------------------------------
# OTel -> Prometheus names, as the collector's prometheus exporters translate them (otlptranslator
# normalizeName with suffixes, the default): tokens of [A-Za-z0-9:], unit word appended unless
# present, `{...}` units dropped, `_total` for monotonic counters, `_ratio` for gauges of unit 1.

UNIT_WORDS = {"d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
              "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes",
              "GiBy": "gibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes", "1": "",
              "%": "percent", "Hz": "hertz"}


def prometheus_name(name: str, kind: str, unit: str) -> str:
    """The Prometheus name of an OTel metric; a template part like `{key}` is kept as it is."""
    name = re.sub(r"\{([a-z_]+)\}", r"TEMPLATE0\g<1>0TEMPLATE", name)
    tokens = [t for t in re.split(r"[^A-Za-z0-9:]+", name) if t]
    if unit and "{" not in unit and "/" not in unit:
        word = UNIT_WORDS.get(unit, unit)
        if word and word not in tokens:
            tokens.append(word)
    if kind == "counter":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if kind == "gauge" and unit == "1":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    out = "_".join(tokens)
    out = "_" + out if out[:1].isdigit() else out
    return re.sub(r"TEMPLATE0([a-z_]+)0TEMPLATE", r"{\g<1>}", out)


def prometheus_label(attribute: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", attribute)


def _template_regex(template: str) -> str:
    parts = re.split(r"(\{[a-z_]+\})", template)
    return "".join("[A-Za-z0-9_:]+" if re.fullmatch(r"\{[a-z_]+\}", p) else re.escape(p) for p in parts)


def test_prometheus_name_rules_match_the_translator_examples():
    # examples from the collector's translator and otlptranslator docs
    assert prometheus_name("http.server.duration", "histogram", "s") == "http_server_duration_seconds"
    assert prometheus_name("requests.count", "counter", "1") == "requests_count_total"
    assert prometheus_name("memory.usage", "gauge", "By") == "memory_usage_bytes"
    assert prometheus_name("system.cpu.load_average.1m", "gauge", "{thread}") == "system_cpu_load_average_1m"
    assert prometheus_name("dask.transfer.bytes", "counter", "By") == "dask_transfer_bytes_total"


# ---------------------------------------------------------------------------------------------
# conventions.md


def test_conventions_lists_every_name_the_design_fixes(conventions):
    for name, kind in REQUIRED_METRICS.items():
        assert name in conventions.metrics, f"docs/conventions.md lacks metric {name}"
        assert conventions.metrics[name][0] == kind, f"{name} must be a {kind}"
    assert conventions.metrics["dask.task.duration"][1] == "s"
    assert conventions.metrics["dask.transfer.bytes"][1] == "By"
    assert conventions.metrics["evlog.memory.free_fraction"][1] == "1"
    assert conventions.metrics["evlog.bytes.allocated"][1] == "By"
    assert REQUIRED_SPANS <= set(conventions.spans), REQUIRED_SPANS - set(conventions.spans)
    assert REQUIRED_EVENTS <= set(conventions.events), REQUIRED_EVENTS - set(conventions.events)
    assert REQUIRED_RESOURCE <= conventions.resource_attributes, REQUIRED_RESOURCE - conventions.resource_attributes
    assert REQUIRED_ATTRIBUTES <= conventions.all_attributes, REQUIRED_ATTRIBUTES - conventions.all_attributes


def test_conventions_prometheus_table_is_the_translation_of_every_metric(conventions):
    for name, (kind, unit) in conventions.metrics.items():
        expected = prometheus_name(name, kind, unit)
        assert name in conventions.prometheus, \
            f"docs/conventions.md 'In Prometheus' lacks `{name}` (it is `{expected}` in Prometheus)"
        assert conventions.prometheus[name] == expected, \
            f"`{name}` ({kind}, unit {unit or 'none'}) is `{expected}` in Prometheus, not `{conventions.prometheus[name]}`"
    stray = set(conventions.prometheus) - set(conventions.metrics)
    assert not stray, f"'In Prometheus' names metrics listed in no section: {stray}"


def known_series(conv: Conventions) -> list[tuple[str, str]]:
    """(regex of a Prometheus series name, OTel name) for every metric, histograms with their series."""
    out = []
    for name, (kind, unit) in conv.metrics.items():
        base = _template_regex(prometheus_name(name, kind, unit))
        if kind == "histogram":
            out.append((base + "_(bucket|sum|count)", name))
        else:
            out.append((base, name))
    return out


# ---------------------------------------------------------------------------------------------
# collector configs


@pytest.fixture(scope="module")
def components():
    return load_components()


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_collector_config_uses_only_defined_contrib_components(path, components):
    _version, table = components
    cfg = load_yaml(path)
    assert isinstance(cfg, dict)
    assert set(cfg) <= {"receivers", "processors", "exporters", "connectors", "extensions", "service"}, set(cfg)
    defined = {k: dict(cfg.get(k + "s") or {}) for k in ("receiver", "processor", "exporter", "connector", "extension")}
    for kind, comps in defined.items():
        for cid in comps:
            assert component_type(cid) in table[kind], \
                f"{path.name}: {kind} {cid!r}: type {component_type(cid)!r} is not in {COMPONENTS_FILE.name}"

    service = cfg["service"]
    for ext in service.get("extensions", []):
        assert ext in defined["extension"], f"{path.name}: service extension {ext} is not defined"
    pipelines = service["pipelines"]
    assert pipelines
    used: set[tuple[str, str]] = set()
    connector_uses: dict[str, dict[str, set[str]]] = {c: {"exporter": set(), "receiver": set()}
                                                      for c in defined["connector"]}
    for pid, pipe in pipelines.items():
        signal = pid.split("/", 1)[0]
        assert signal in SIGNALS, f"{path.name}: pipeline {pid}"
        assert pipe.get("receivers") and pipe.get("exporters"), f"{path.name}: {pid} needs receivers and exporters"
        for rid in pipe["receivers"]:
            if rid in defined["connector"]:
                src, dst = table["connector"][component_type(rid)]
                assert dst == signal, f"{path.name}: connector {rid} emits {dst}, used as receiver of {pid}"
                connector_uses[rid]["receiver"].add(pid)
            else:
                assert rid in defined["receiver"], f"{path.name}: {pid} uses undefined receiver {rid}"
                assert signal in table["receiver"][component_type(rid)], f"{path.name}: {rid} cannot receive {signal}"
                used.add(("receiver", rid))
        for prid in pipe.get("processors", []):
            assert prid in defined["processor"], f"{path.name}: {pid} uses undefined processor {prid}"
            assert signal in table["processor"][component_type(prid)], f"{path.name}: {prid} cannot process {signal}"
            used.add(("processor", prid))
        for eid in pipe["exporters"]:
            if eid in defined["connector"]:
                src, dst = table["connector"][component_type(eid)]
                assert src == signal, f"{path.name}: connector {eid} takes {src}, used as exporter of {pid}"
                connector_uses[eid]["exporter"].add(pid)
            else:
                assert eid in defined["exporter"], f"{path.name}: {pid} uses undefined exporter {eid}"
                assert signal in table["exporter"][component_type(eid)], f"{path.name}: {eid} cannot export {signal}"
                used.add(("exporter", eid))
    for cid, uses in connector_uses.items():
        assert uses["exporter"] and uses["receiver"], f"{path.name}: connector {cid} must end one pipeline and start another"
    for kind in ("receiver", "processor", "exporter"):
        unused = set(defined[kind]) - {c for k, c in used if k == kind}
        assert not unused, f"{path.name}: {kind}s defined but in no pipeline: {unused}"


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_every_pipeline_limits_memory_first_and_batches_last(path):
    cfg = load_yaml(path)
    for pid, pipe in cfg["service"]["pipelines"].items():
        procs = [component_type(p) for p in pipe.get("processors", [])]
        assert procs[:1] == ["memory_limiter"], f"{path.name}: {pid} must start with memory_limiter: {procs}"
        assert procs[-1:] == ["batch"], f"{path.name}: {pid} must end with batch: {procs}"


def _env_defaults(value):
    """Replace ${env:NAME:-default} by its default, refusing references without one."""
    if isinstance(value, str):
        def sub(m):
            assert m.group(2) is not None, f"${{env:{m.group(1)}}} has no default"
            return m.group(2)
        return re.sub(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", sub, value)
    if isinstance(value, dict):
        return {k: _env_defaults(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_env_defaults(v) for v in value]
    return value


def test_main_config_has_what_the_issue_asks_for():
    cfg = _env_defaults(load_yaml(CONFIG_DIR / "otelcol.yaml"))
    protocols = cfg["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"
    exporters = cfg["exporters"]
    assert exporters["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert exporters["otlp/tempo"]["endpoint"] == "tempo:4317"
    assert exporters["prometheus"]["resource_to_telemetry_conversion"]["enabled"] is True
    pipes = cfg["service"]["pipelines"]
    assert {"otlp/jaeger", "otlp/tempo", "spanmetrics"} <= set(pipes["traces"]["exporters"])
    assert "spanmetrics" in pipes["metrics"]["receivers"] and "prometheus" in pipes["metrics"]["exporters"]
    assert "logs" in pipes


@pytest.mark.parametrize("name,backend", [("otelcol-tempo.yaml", "tempo"), ("otelcol-jaeger.yaml", "jaeger")])
def test_single_backend_variants_send_traces_to_that_backend_only(name, backend):
    cfg = _env_defaults(load_yaml(CONFIG_DIR / name))
    trace_exporters = {e for pid, p in cfg["service"]["pipelines"].items() if pid.startswith("traces")
                       for e in p["exporters"] if e in cfg.get("exporters", {})}
    assert [cfg["exporters"][e]["endpoint"] for e in trace_exporters] == [f"{backend}:4317"]


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_spanmetrics_make_the_names_and_labels_listed_in_conventions(path, conventions):
    cfg = load_yaml(path)
    for cid, conn in (cfg.get("connectors") or {}).items():
        if component_type(cid) != "spanmetrics":
            continue
        namespace = conn.get("namespace")
        unit = conn["histogram"]["unit"]
        assert f"{namespace}.calls" in conventions.metrics and f"{namespace}.duration" in conventions.metrics
        assert conventions.metrics[f"{namespace}.duration"][1] == unit
        dims = [d["name"] for d in conn.get("dimensions", [])]
        for dim in dims:
            assert dim in conventions.all_attributes, f"{path.name}: spanmetrics dimension {dim} is in no conventions table"
        listed = set(_ticked(_row_cell(f"{namespace}.calls", "attributes")))
        assert set(dims) == listed, f"conventions.md row {namespace}.calls should list exactly {dims}"


def _row_cell(name: str, column: str) -> str:
    for _s, rows in _md_tables(CONVENTIONS.read_text()):
        for row in rows:
            if _ticked(row.get("name", ""))[:1] == [name]:
                return row.get(column, "")
    return ""


def test_sampling_variant_keeps_errors_and_slow_traces_and_counts_all_spans():
    cfg = load_yaml(CONFIG_DIR / "otelcol-sampling.yaml")
    policies = {p["type"]: p for p in cfg["processors"]["tail_sampling"]["policies"]}
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    assert policies["latency"]["latency"]["threshold_ms"] > 0
    pipes = cfg["service"]["pipelines"]
    # span metrics see every span: the pipeline feeding spanmetrics has no sampler
    for pid, pipe in pipes.items():
        if "spanmetrics" in pipe["exporters"]:
            assert "tail_sampling" not in pipe.get("processors", []), pid
        if "tail_sampling" in pipe.get("processors", []):
            assert pipe["processors"].index("tail_sampling") < pipe["processors"].index("batch")


EVLOG_FILE_NAMES = {"traces": "traces-4242.jsonl.gz", "metrics": "metrics-4242.jsonl.gz", "logs": "logs-4242.jsonl.gz"}


def test_runfolder_config_reads_every_signal_file_evlog_writes_from_the_beginning():
    cfg = load_yaml(CONFIG_DIR / "otelcol-runfolder.yaml")
    compose = load_yaml(CONFIG_DIR / "docker-compose.yaml")
    mounts = [_volume(v)[1] for v in compose["services"]["otel-replay"]["volumes"]]
    pipes = cfg["service"]["pipelines"]
    for signal, filename in EVLOG_FILE_NAMES.items():
        receivers = [r for r in pipes[signal]["receivers"] if component_type(r) == "otlpjsonfile"]
        assert receivers, f"no otlpjsonfile receiver in the {signal} pipeline"
        for rid in receivers:
            rcfg = cfg["receivers"][rid]
            assert rcfg.get("start_at") == "beginning", f"{rid}: the default start_at is end: old files would be skipped"
            assert rcfg.get("compression") == "gzip", f"{rid}: evlog's run folder files are gzip"
            size = rcfg.get("max_log_size", "1MiB")
            m = re.fullmatch(r"(\d+)MiB", str(size))
            assert m and int(m.group(1)) >= 16, f"{rid}: max_log_size {size}: a batch of spans is one line, 1MiB default is too small"
            for pattern in rcfg["include"]:
                assert any(pattern.startswith(mnt + "/") for mnt in mounts), f"{pattern} is outside the mounted run folders"
                for run_path in (f"/evlog-runs/{filename}", f"/evlog-runs/2024-01-01T00-00-00-app/{filename}"):
                    assert _doublestar_match(pattern, run_path), f"{rid} include {pattern} misses {run_path}"
                for other, other_name in EVLOG_FILE_NAMES.items():
                    if other != signal:
                        assert not _doublestar_match(pattern, f"/evlog-runs/x/{other_name}"), \
                            f"{rid} ({signal}) would also read {other_name}"


def _doublestar_match(pattern: str, path: str) -> bool:
    """Glob with `**` matching zero or more directories, as the collector's file matcher does."""
    regex = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex += "(?:[^/]+/)*"
            i += 3
        elif pattern[i] == "*":
            regex += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            regex += "[^/]"
            i += 1
        else:
            regex += re.escape(pattern[i])
            i += 1
    return re.fullmatch(regex, path) is not None


# ---------------------------------------------------------------------------------------------
# compose, Tempo, Prometheus, Grafana provisioning


@pytest.fixture(scope="module")
def compose():
    return load_yaml(CONFIG_DIR / "docker-compose.yaml")


def _compose_default(value: str) -> str:
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _volume(spec: str) -> tuple[str, str]:
    """(host path or volume name, container path) of a compose volume entry."""
    parts = _compose_default(spec).split(":")
    return parts[0], parts[1]


def _ports(service: dict) -> dict[int, str]:
    """container port -> host binding ('127.0.0.1' ...)"""
    out = {}
    for p in service.get("ports", []):
        parts = _compose_default(str(p)).split(":")
        out[int(parts[-1])] = parts[0] if len(parts) == 3 else "0.0.0.0"
    return out


def test_compose_starts_collector_and_backends_with_their_ports(compose, components):
    version, _ = components
    services = compose["services"]
    for name in ("otel-collector", "jaeger", "tempo", "prometheus", "grafana"):
        assert name in services, f"compose lacks {name}"
    collector = services["otel-collector"]
    image = _compose_default(collector["image"])
    assert image == f"otel/opentelemetry-collector-contrib:{version}", \
        f"the compose collector image {image} must be the version the component list was taken from ({version})"
    assert {4317, 4318} <= set(_ports(collector))
    assert 16686 in _ports(services["jaeger"])
    assert 3200 in _ports(services["tempo"])
    assert 9090 in _ports(services["prometheus"])
    assert 3000 in _ports(services["grafana"])
    for svc in ("jaeger", "tempo", "prometheus", "grafana"):
        assert set(_ports(services[svc]).values()) == {"127.0.0.1"}, f"{svc} UI must listen on 127.0.0.1 only"
    # every config the collector services can be given exists here, and is mounted where they read it
    for svc in ("otel-collector", "otel-replay"):
        cmd = _compose_default(" ".join(services[svc]["command"]))
        m = re.search(r"--config=/etc/otelcol/(\S+)", cmd)
        assert m and (CONFIG_DIR / m.group(1)).is_file(), cmd
        assert "./:/etc/otelcol:ro" in services[svc]["volumes"]
    for svc in services.values():
        for vol in svc.get("volumes", []):
            host = _volume(vol)[0]
            if host.startswith("./") and "evlog-runs" not in host:
                assert (CONFIG_DIR / host).exists(), f"compose mounts missing {host}"


def test_exporter_endpoints_are_compose_services_listening_there(compose):
    services = compose["services"]
    tempo = load_yaml(CONFIG_DIR / "tempo.yaml")
    tempo_grpc = tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    listening = {"tempo": {int(tempo_grpc.rsplit(":", 1)[1])}, "jaeger": {4317, 4318}}
    assert "JAEGER_LISTEN_HOST=0.0.0.0" in services["jaeger"]["environment"]
    for path in COLLECTOR_CONFIGS:
        cfg = _env_defaults(load_yaml(path))
        for eid, exp in (cfg.get("exporters") or {}).items():
            if component_type(eid) == "otlp":
                host, port = exp["endpoint"].rsplit(":", 1)
                assert host in services, f"{path.name}: {eid} points at {host}, not a compose service"
                assert int(port) in listening[host], f"{path.name}: {eid}: {host} does not listen on {port}"
            if component_type(eid) == "prometheusremotewrite":
                assert exp["endpoint"] == "http://prometheus:9090/api/v1/write"
                assert "--web.enable-remote-write-receiver" in services["prometheus"]["command"]


def test_prometheus_scrapes_the_collector_exporter(compose):
    prom = load_yaml(CONFIG_DIR / "prometheus.yaml")
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    main = load_yaml(CONFIG_DIR / "otelcol.yaml")
    port = main["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    assert f"otel-collector:{port}" in targets
    assert all(job.get("honor_labels") for job in prom["scrape_configs"]), "keep job/instance from the exporter"
    assert prom["storage"]["tsdb"]["out_of_order_time_window"], "replayed runs carry past timestamps"


@pytest.fixture(scope="module")
def datasources():
    prov = load_yaml(CONFIG_DIR / "grafana" / "provisioning" / "datasources" / "datasources.yaml")
    assert prov["apiVersion"] == 1
    return {ds["uid"]: ds for ds in prov["datasources"]}


def test_grafana_datasources_point_at_the_compose_services(datasources, compose):
    by_type = {ds["type"]: ds for ds in datasources.values()}
    assert set(by_type) == {"prometheus", "tempo", "jaeger"}
    expected = {"prometheus": ("prometheus", 9090), "tempo": ("tempo", 3200), "jaeger": ("jaeger", 16686)}
    for dstype, (service, port) in expected.items():
        assert by_type[dstype]["url"] == f"http://{service}:{port}"
        assert port in _ports(compose["services"][service])
    tempo = load_yaml(CONFIG_DIR / "tempo.yaml")
    assert tempo["server"]["http_listen_port"] == 3200
    for dest in by_type["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]:
        assert dest["datasourceUid"] in datasources


def test_grafana_dashboard_provider_reads_the_mounted_dashboards(compose):
    prov = load_yaml(CONFIG_DIR / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml")
    paths = [p["options"]["path"] for p in prov["providers"]]
    grafana = compose["services"]["grafana"]
    mounted = {_volume(v)[1]: _volume(v)[0] for v in grafana["volumes"]}
    for path in paths:
        assert mounted.get(path) == "./grafana/dashboards", f"provider path {path} is not the dashboards mount"
    assert "/etc/grafana/provisioning" in mounted
    home = [e.split("=", 1)[1] for e in grafana["environment"] if e.startswith("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH=")]
    assert home and (CONFIG_DIR / "grafana" / "dashboards" / Path(home[0]).name).is_file()


# ---------------------------------------------------------------------------------------------
# dashboards


def _panels(dashboard: dict):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


PROMQL_FUNCTIONS_AND_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase", "histogram_quantile", "topk", "bottomk",
    "label_values", "delta", "deriv", "abs", "clamp_min", "clamp_max", "max_over_time", "min_over_time",
    "avg_over_time", "quantile", "stddev", "count_values", "sort", "sort_desc", "time", "vector", "scalar",
}
PROM_LABELS_FROM_PIPELINE = {
    "job", "instance", "le", "__name__",
    # added by the spanmetrics connector
    "service_name", "span_name", "span_kind", "status_code", "collector_instance_id",
}


def promql_names(expr: str):
    """(metric names, __name__ regexes, label names) used in a PromQL expression (Grafana vars allowed)."""
    name_regexes = re.findall(r'__name__\s*=~\s*"([^"]*)"', expr)
    labels = set()
    for block in re.findall(r"\{([^}]*)\}", expr):
        labels.update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block))
    for clause in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels.update(x.strip() for x in clause.split(",") if x.strip())
    m = re.match(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", expr)
    if m:
        labels.add(m.group(2))
        expr = m.group(1)
    stripped = re.sub(r'"[^"]*"', '""', expr)
    stripped = re.sub(r"\{[^}]*\}", " ", stripped)
    stripped = re.sub(r"\[[^\]]*\]", " ", stripped)
    stripped = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", stripped)
    names = set()
    for m in re.finditer(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", stripped):
        word, call = m.group(1), m.group(2)
        if call or word in PROMQL_FUNCTIONS_AND_KEYWORDS:
            continue
        names.add(word)
    return names, name_regexes, labels


def test_promql_parser_finds_names_labels_and_regexes():
    names, regexes, labels = promql_names(
        'histogram_quantile(0.95, sum by (le, dask_task_prefix) (rate(dask_task_duration_seconds_bucket'
        '{evlog_run_id=~"$run"}[$__rate_interval]))) + on(instance) {__name__=~"evlog_metadata_.+"}')
    assert names == {"dask_task_duration_seconds_bucket"}
    assert regexes == ["evlog_metadata_.+"]
    assert labels == {"le", "dask_task_prefix", "evlog_run_id", "instance", "__name__"}


def _prometheus_queries(dashboard: dict, datasources: dict):
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            uid = (target.get("datasource") or panel.get("datasource") or {}).get("uid")
            if datasources.get(uid, {}).get("type") == "prometheus":
                yield panel["title"], target["expr"]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"] if isinstance(var["query"], str) else var["query"]["query"]
            yield f"variable {var['name']}", query


def _check_metric_name(name: str, series: list[tuple[str, str]]) -> bool:
    return any(re.fullmatch(rx, name) for rx, _ in series)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_panels_use_provisioned_datasources(path, datasources):
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] in datasources, f"{panel['title']}: unknown data source"
        assert panel.get("targets"), f"{panel['title']}: no query"
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] in datasources


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_prometheus_queries_name_metrics_evlog_emits(path, datasources, conventions):
    dashboard = json.loads(path.read_text())
    series = known_series(conventions)
    labels_ok = PROM_LABELS_FROM_PIPELINE | {prometheus_label(a) for a in conventions.all_attributes}
    templated = [prometheus_name(n, k, u) for n, (k, u) in conventions.metrics.items() if "{" in n]
    for title, expr in _prometheus_queries(dashboard, datasources):
        names, regexes, labels = promql_names(expr)
        assert names or regexes, f"{title}: no metric in {expr!r}"
        for name in names:
            assert _check_metric_name(name, series), \
                f"{path.name} / {title}: {name} is not the Prometheus name of any metric in docs/conventions.md"
        for rx in regexes:
            literal = re.split(r"[.\[(*+?\\^$|]", rx, maxsplit=1)[0]
            assert any(t.split("{", 1)[0] == literal for t in templated), \
                f"{path.name} / {title}: __name__=~{rx!r} matches no templated metric family in conventions.md"
        unknown = labels - labels_ok
        assert not unknown, f"{path.name} / {title}: labels {unknown} come from no attribute in conventions.md"


def _example_span_names(conv: Conventions) -> list[str]:
    fill = {"{prefix}": "inc", "{function}": "mymod.work", "{name}": "my_event"}
    out = []
    for name in conv.spans:
        for k, v in fill.items():
            name = name.replace(k, v)
        out.append(name)
    return out


def traceql_names(query: str):
    """(name regexes/values, attributes) used in a TraceQL query."""
    span_names = re.findall(r'\bname\s*(?:=~|=)\s*"([^"]*)"', query)
    attributes = re.findall(r"\b(?:span|resource)\.([A-Za-z_][A-Za-z0-9_.]*)", query)
    return span_names, attributes


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_trace_queries_name_spans_and_attributes_evlog_emits(path, datasources, conventions):
    dashboard = json.loads(path.read_text())
    examples = _example_span_names(conventions)
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            dstype = datasources[target.get("datasource", panel.get("datasource"))["uid"]]["type"]
            if dstype == "tempo":
                assert target["queryType"] == "traceql"
                names, attributes = traceql_names(target["query"])
                assert names, f"{panel['title']}: a task query should select spans by name"
                for rx in names:
                    for alt in rx.split("|"):
                        assert any(re.fullmatch(alt, ex) for ex in examples), \
                            f"{panel['title']}: name =~ {alt!r} matches no span in conventions.md"
                for attr in attributes:
                    assert attr in conventions.all_attributes, f"{panel['title']}: {attr} is in no conventions table"
            elif dstype == "jaeger":
                assert target["queryType"] == "search" and target.get("service")
                if target.get("operation"):
                    assert target["operation"] in examples


def test_overview_dashboard_shows_what_daggerwebdash_shows(datasources, conventions):
    dashboard = json.loads((CONFIG_DIR / "grafana" / "dashboards" / "evlog-overview.json").read_text())
    used = set()
    traceql = []
    for _title, expr in _prometheus_queries(dashboard, datasources):
        names, regexes, _labels = promql_names(expr)
        used |= names | {r.split(".", 1)[0] for r in regexes}
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            if target.get("queryType") == "traceql":
                traceql.append(target["query"])
    wanted = {
        "worker saturation": "evlog_worker_saturation", "CPU load": "system_cpu_load_average_1m",
        "free memory": "evlog_memory_free_fraction_ratio", "bytes allocated": "evlog_bytes_allocated",
        "task rate by prefix": "traces_span_metrics_calls_total",
        "task duration by prefix": "dask_task_duration_seconds_bucket",
        "console metadata series": "evlog_metadata_",
    }
    for what, name in wanted.items():
        assert name in used, f"no panel shows {what} ({name})"
    assert any("duration >" in q for q in traceql), "no panel lists the traces of the slowest tasks"


# ---------------------------------------------------------------------------------------------
# docs/backends.md


def test_backends_doc_covers_the_issue():
    text = BACKENDS_DOC.read_text()
    for needle in ("docker compose up", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:3000", "http://localhost:16686",
                   "http://localhost:9090", "OTEL_TRACES_SAMPLER", "tail_sampling", "otlpjsonfile",
                   "otelcol-tempo.yaml", "otelcol-jaeger.yaml", "otelcol-runfolder.yaml", "EVLOG_BIND"):
        assert needle in text, f"docs/backends.md does not mention {needle}"
    assert re.search(r"^## What was checked", text, re.M), "docs/backends.md must say what was and was not checked"


# ---------------------------------------------------------------------------------------------
# the run folder format vs. the otlpjsonfile receiver

from google.protobuf import json_format  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor as FD  # noqa: E402
from helpers import ID_BYTES, hex_ids_to_base64  # noqa: E402
from helpers import is_repeated as _repeated  # noqa: E402
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2  # noqa: E402
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402

REQUESTS = {
    "traces": ("resourceSpans", trace_service_pb2.ExportTraceServiceRequest),
    "logs": ("resourceLogs", logs_service_pb2.ExportLogsServiceRequest),
    "metrics": ("resourceMetrics", metrics_service_pb2.ExportMetricsServiceRequest),
}
INT64_TYPES = {FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_FIXED64, FD.TYPE_SFIXED64, FD.TYPE_SINT64}
INT32_TYPES = {FD.TYPE_INT32, FD.TYPE_UINT32, FD.TYPE_FIXED32, FD.TYPE_SFIXED32, FD.TYPE_SINT32}


def otlp_json_problems(obj, descriptor, path="") -> list[str]:
    """What in obj is not the OTLP/JSON form the Collector's file exporter writes and otlpjsonfile reads:
    lowerCamelCase field names, (u)int64 as decimal strings, enums as integers, trace/span ids as hex."""
    problems = []
    if not isinstance(obj, dict):
        return [f"{path or '.'}: expected an object for {descriptor.full_name}"]
    fields = {f.json_name: f for f in descriptor.fields}
    for key, value in obj.items():
        where = f"{path}.{key}"
        field = fields.get(key)
        if field is None:
            snake = {f.name: f.json_name for f in descriptor.fields}
            hint = f" (the JSON name is {snake[key]!r})" if key in snake and snake[key] != key else ""
            problems.append(f"{where}: not a field of {descriptor.full_name}{hint}")
            continue
        repeated = _repeated(field)
        if repeated and not isinstance(value, list):
            problems.append(f"{where}: expected a list")
            continue
        for i, v in enumerate(value if repeated else [value]):
            w = f"{where}[{i}]" if repeated else where
            if field.type == FD.TYPE_MESSAGE:
                problems += otlp_json_problems(v, field.message_type, w)
            elif field.type in INT64_TYPES:
                if not (isinstance(v, str) and re.fullmatch(r"-?\d+", v)):
                    problems.append(f"{w}: 64-bit integer must be a decimal string, got {v!r}")
            elif field.type == FD.TYPE_ENUM:
                if not isinstance(v, int) or isinstance(v, bool):
                    problems.append(f"{w}: enum must be an integer, got {v!r}")
            elif field.type in INT32_TYPES:
                if not isinstance(v, int) or isinstance(v, bool):
                    problems.append(f"{w}: integer expected, got {v!r}")
            elif field.type == FD.TYPE_BYTES and field.name in ID_BYTES:
                n = ID_BYTES[field.name]
                if not (isinstance(v, str) and (v == "" or re.fullmatch(rf"[0-9a-fA-F]{{{2 * n}}}", v))):
                    problems.append(f"{w}: {field.name} must be {2 * n} hex digits, got {v!r}")
            elif field.type == FD.TYPE_BOOL:
                if not isinstance(v, bool):
                    problems.append(f"{w}: bool expected, got {v!r}")
            elif field.type == FD.TYPE_STRING:
                if not isinstance(v, str):
                    problems.append(f"{w}: string expected, got {v!r}")
            elif field.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
                if not (isinstance(v, (int, float)) and not isinstance(v, bool) or v in ("NaN", "Infinity", "-Infinity")):
                    problems.append(f"{w}: number expected, got {v!r}")
    return problems


def gzip_members_of(path) -> list[bytes]:
    """What each gzip member of ``path`` holds, read one member at a time: each must hold whole lines (a
    member is one flush of the writer), and together they are the file as gzip reads it whole."""
    import gzip
    import zlib

    with open(path, "rb") as f:
        data = f.read()
    members, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(wbits=31)
        members.append(d.decompress(data[pos:]))
        assert d.eof, f"{path}: the gzip member at byte {pos} is cut short"
        assert members[-1].endswith(b"\n"), f"{path}: the gzip member at byte {pos} ends inside a line"
        pos = len(data) - len(d.unused_data)
    assert b"".join(members) == gzip.decompress(data)
    return members


def check_run_folder_line(signal: str, line: str):
    """Parse one line as the otlpjsonfile receiver does; return the protobuf request."""
    top, request_cls = REQUESTS[signal]
    assert line.endswith("\n"), "a line must end with a newline (a torn last line?)"
    obj = json.loads(line)
    assert isinstance(obj, dict) and list(obj) == [top], f"one {top} export request per line, got keys {list(obj)}"
    problems = otlp_json_problems(obj, request_cls.DESCRIPTOR)
    assert not problems, "\n".join(problems[:20])
    msg = request_cls()
    json_format.Parse(json.dumps(hex_ids_to_base64(obj, request_cls.DESCRIPTOR)), msg)
    return msg


def _file_exporter_form(request) -> dict:
    """A protobuf request as the Collector's file exporter writes it (reference for the checker)."""
    obj = json_format.MessageToDict(request, use_integers_for_enums=True)

    def to_hex(o, descriptor):
        fields = {f.json_name: f for f in descriptor.fields}
        for key, value in list(o.items()):
            field = fields[key]
            if field.type == FD.TYPE_MESSAGE:
                for v in (value if _repeated(field) else [value]):
                    to_hex(v, field.message_type)
            elif field.type == FD.TYPE_BYTES and field.name in ID_BYTES:
                o[key] = base64.b64decode(value).hex()
        return o
    return to_hex(obj, request.DESCRIPTOR)


def _sdk_requests():
    """One real export request per signal, made by the OTel SDK and its OTLP encoders."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogRecordExporter()
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    with tp.get_tracer("t").start_as_current_span("outer"):
        with tp.get_tracer("t").start_as_current_span("dask.execute inc") as s:
            s.set_attribute("dask.task.key", "inc-1")
            s.set_attribute("dask.task.nbytes", 28)
            lp.get_logger("t").emit(event_name="dask.log_event", body={"msg": 1}, attributes={"dask.topic": "x"})
    mp.get_meter("t").create_counter("dask.transfer.bytes", unit="By").add(5)
    mp.get_meter("t").create_histogram("dask.task.duration", unit="s").record(0.5)
    return {
        "traces": encode_spans(spans.get_finished_spans()),
        "logs": encode_logs(logs.get_finished_logs()),
        "metrics": encode_metrics(reader.get_metrics_data()),
    }


def test_run_folder_checker_accepts_the_file_exporter_form_of_real_sdk_requests():
    for signal, request in _sdk_requests().items():
        line = json.dumps(_file_exporter_form(request)) + "\n"
        parsed = check_run_folder_line(signal, line)
        assert parsed == request, signal


def test_run_folder_checker_rejects_base64_ids_int64_numbers_and_snake_case():
    request = _sdk_requests()["traces"]
    good = _file_exporter_form(request)
    span = good["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    bad_ids = json.loads(json.dumps(good))
    bad_ids["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = base64.b64encode(
        bytes.fromhex(span["traceId"])).decode()
    bad_int = json.loads(json.dumps(good))
    bad_int["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = int(span["startTimeUnixNano"])
    bad_case = json.loads(json.dumps(good))
    s = bad_case["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    s["start_time_unix_nano"] = s.pop("startTimeUnixNano")
    for bad in (bad_ids, bad_int, bad_case):
        with pytest.raises(AssertionError):
            check_run_folder_line("traces", json.dumps(bad) + "\n")
    with pytest.raises(AssertionError):
        check_run_folder_line("traces", json.dumps(good))  # no newline: a torn line


PROGRAM = textwrap.dedent("""
    from opentelemetry import _logs, metrics, trace
    tracer = trace.get_tracer("evlog.collector-config-test")
    with tracer.start_as_current_span("collector-config-check") as span:
        span.set_attribute("answer", 42)
        _logs.get_logger("evlog.collector-config-test").emit(
            event_name="evlog.collector-config-test", body={"k": 1}, attributes={"n": 1})
        metrics.get_meter("evlog.collector-config-test").create_counter("evlog.collector_config_test").add(3)
""")


def _launcher() -> list[str] | None:
    exe = shutil.which("evlog-instrument")
    return [exe] if exe else None


@pytest.mark.timeout(180)
def test_evlog_run_folder_lines_are_what_otlpjsonfile_reads(tmp_path):
    launcher = _launcher()
    if launcher is None:
        pytest.skip("evlog-instrument is not on PATH (pip install -e . installs it); "
                    "the run-folder format is checked against a real run only")
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.update(EVLOG_RUN_DIR=str(run_dir), EVLOG_SUMMARY="false", EVLOG_CAPTURE="off", PYTHONUNBUFFERED="1")
    proc = subprocess.run(launcher + [sys.executable, "-c", PROGRAM], env=env, cwd=tmp_path,
                          capture_output=True, timeout=150)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")

    parsed = {}
    for signal in SIGNALS:
        files = sorted(glob.glob(str(run_dir / f"{signal}*")))
        assert files, f"no {signal} file in the run folder: {sorted(os.listdir(run_dir)) if run_dir.exists() else 'no folder'}"
        for f in files:
            assert fnmatch.fnmatch(os.path.basename(f), f"{signal}-*.jsonl.gz")
            lines = [line for member in gzip_members_of(f) for line in member.decode("utf-8").splitlines(keepends=True)]
            assert lines, f"{f} is empty"
            for n, line in enumerate(lines, 1):
                try:
                    parsed.setdefault(signal, []).append(check_run_folder_line(signal, line))
                except AssertionError as exc:
                    raise AssertionError(f"{os.path.basename(f)} line {n}: {exc}") from None

    spans = [s for req in parsed["traces"] for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans
             if s.name == "collector-config-check"]
    assert len(spans) == 1
    assert len(spans[0].trace_id) == 16 and len(spans[0].span_id) == 8
    records = [r for req in parsed["logs"] for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records
               if r.event_name == "evlog.collector-config-test"]
    assert len(records) == 1
    # the event was emitted inside the span: same ids once both hex forms are decoded
    assert records[0].trace_id == spans[0].trace_id and records[0].span_id == spans[0].span_id
    names = {m.name for req in parsed["metrics"] for rm in req.resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    assert "evlog.collector_config_test" in names
