"""Settings: evlog's EVLOG_* variables, the optional YAML file, and the exporter choice from OTEL_*.

One Settings object, validated in one place. Every problem becomes one message naming the variable
or the file and line; the bad value is replaced by its default, so the program always runs.
Parsing is pure (no SDK import), so the launcher can validate once for the whole run and children
stay quiet (EVLOG_CONFIG_REPORTED).
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping
from urllib.parse import urlsplit

CAPTURE_MODES = ("enabled", "metadata", "disabled", "off")
KNOWN_CONSUMERS = ("wsat", "psat", "esat", "loadavg", "mem", "bytes", "core", "id", "timeline", "full")
DEFAULT_CONSUMERS = ("wsat", "psat", "loadavg", "mem", "bytes")
SIGNALS = ("traces", "metrics", "logs")
PROTOCOLS = ("grpc", "http/protobuf", "http/json")
POOL_SPANS = ("call", "chunk")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

# variable -> YAML key
_KEYS = {
    "EVLOG_RUN_DIR": "run_dir",
    "EVLOG_CAPTURE": "capture",
    "EVLOG_CONSUMERS": "consumers",
    "EVLOG_REDACT": "redact",
    "EVLOG_DASK_TRANSITIONS": "dask_transitions",
    "EVLOG_POOL_SPANS": "pool_spans",
    "EVLOG_SUMMARY": "summary",
}


class _Record:
    """A small frozen record, as a frozen dataclass would be (dataclasses costs every process about
    10 ms of imports at start-up). FIELDS: name -> default, or a zero-argument factory of it."""

    FIELDS: dict = {}

    def __init__(self, **kw: Any):
        unknown = set(kw) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected field(s) {', '.join(sorted(unknown))}")
        for name, default in self.FIELDS.items():
            object.__setattr__(self, name, kw[name] if name in kw else default() if callable(default) else default)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen; use with_overrides()")

    def _values(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    __hash__ = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values().items())})"

    def with_overrides(self, **kw: Any):
        return type(self)(**{**self._values(), **kw})


class Exporters(_Record):
    """Where each signal goes. kinds per signal: file, otlp, console, none, or an entry-point name."""

    FIELDS = {
        "embedded": True,
        "traces": ("file",),
        "metrics": ("file",),
        "logs": ("file",),
        "protocol": lambda: {s: "grpc" for s in SIGNALS},
        "endpoint": None,  # for the summary: the general or traces endpoint
    }
    embedded: bool
    traces: tuple[str, ...]
    metrics: tuple[str, ...]
    logs: tuple[str, ...]
    protocol: Mapping[str, str]
    endpoint: str | None

    def for_signal(self, signal: str) -> tuple[str, ...]:
        return getattr(self, signal)


class Settings(_Record):
    FIELDS = {
        "config_file": None,
        "run_dir": None,
        "capture": "metadata",
        "consumers": DEFAULT_CONSUMERS,
        "redact": (),
        "dask_transitions": True,
        "pool_spans": "call",  # one span per call of a pool task, or per chunk of a chunked map
        "summary": True,
        "sdk_disabled": False,
        "disabled_instrumentations": frozenset(),
        "exporters": Exporters,
        "extra": dict,  # other top-level YAML sections
        "problems": (),
    }
    config_file: str | None
    run_dir: str | None
    capture: str
    consumers: tuple[str, ...]
    redact: tuple[str, ...]
    dask_transitions: bool
    pool_spans: str
    summary: bool
    sdk_disabled: bool
    disabled_instrumentations: frozenset[str]
    exporters: Exporters
    extra: Mapping[str, Any]
    problems: tuple[str, ...]

    def instrumentation_enabled(self, name: str) -> bool:
        d = self.disabled_instrumentations
        return not ("*" in d or name in d or f"evlog_{name}" in d)


def load(env: Mapping[str, str] | None = None, cwd: str | None = None) -> Settings:
    """Read EVLOG_*/OTEL_* from ``env`` and the YAML file; never raises."""
    env = os.environ if env is None else env
    problems: list[str] = []
    values, config_file, extra = _read_yaml(env, cwd, problems)
    for var, key in _KEYS.items():
        if var in env:
            values[key] = (env[var], var)
    kw: dict[str, Any] = {"config_file": config_file, "extra": extra}

    if "run_dir" in values:
        raw, where = values["run_dir"]
        if isinstance(raw, str) and raw.strip():
            kw["run_dir"] = os.path.abspath(os.path.expanduser(raw.strip()))
        else:
            problems.append(f"{where}: run_dir must be a folder path, got {raw!r}; using the default folder")
    if "capture" in values:
        raw, where = values["capture"]
        if isinstance(raw, dict):
            raw = raw.get("mode", "metadata")
        mode = str(raw).strip().lower()
        if mode in CAPTURE_MODES:
            kw["capture"] = mode
        else:
            problems.append(f"{where}: unknown capture mode {raw!r} (expected one of {', '.join(CAPTURE_MODES)}); using metadata")
    if "consumers" in values:
        raw, where = values["consumers"]
        names = [str(x).strip().lower() for x in (raw if isinstance(raw, list) else str(raw).split(","))]
        names = [n for n in names if n]
        if names in (["none"], []):
            kw["consumers"] = ()
        else:
            bad = [n for n in names if n not in KNOWN_CONSUMERS]
            if bad:
                problems.append(f"{where}: unknown consumer(s) {', '.join(map(repr, bad))} (known: {', '.join(KNOWN_CONSUMERS)}, or none); ignoring them")
            kw["consumers"] = tuple(dict.fromkeys(n for n in names if n in KNOWN_CONSUMERS))
    if "redact" in values:
        raw, where = values["redact"]
        pats = raw if isinstance(raw, list) else ([raw] if raw else [])
        good = []
        for p in pats:
            try:
                re.compile(str(p))
                good.append(str(p))
            except re.error as exc:
                problems.append(f"{where}: redact pattern {p!r} is not a valid regular expression ({exc}); ignoring it")
        kw["redact"] = tuple(good)
    for key in ("dask_transitions", "summary"):
        if key in values:
            raw, where = values[key]
            b = parse_bool(raw)
            if b is None:
                problems.append(f"{where}: expected true or false, got {raw!r}; using true")
            else:
                kw[key] = b
    if "pool_spans" in values:
        raw, where = values["pool_spans"]
        mode = str(raw).strip().lower()
        if mode in POOL_SPANS:
            kw["pool_spans"] = mode
        else:
            problems.append(f"{where}: unknown pool_spans mode {raw!r} "
                            f"(expected one of {', '.join(POOL_SPANS)}); using call")

    sdk_disabled = parse_bool(env.get("OTEL_SDK_DISABLED", "false"))
    if sdk_disabled is None:
        problems.append(f"OTEL_SDK_DISABLED: expected true or false, got {env['OTEL_SDK_DISABLED']!r}; using false")
        sdk_disabled = False
    kw["sdk_disabled"] = sdk_disabled
    kw["disabled_instrumentations"] = frozenset(
        x.strip() for x in env.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",") if x.strip()
    )
    kw["exporters"] = resolve_exporters(env, problems)
    kw["problems"] = tuple(problems)
    return Settings(**kw)


def parse_bool(raw: Any) -> bool | None:
    if isinstance(raw, bool):
        return raw
    s = str(raw).strip().lower()
    return True if s in _TRUE else False if s in _FALSE else None


def resolve_exporters(env: Mapping[str, str], problems: list[str]) -> Exporters:
    """Apply the OTel spec's exporter variables, with evlog's embedded default (the run folder)."""
    endpoints = {}
    for var in ["OTEL_EXPORTER_OTLP_ENDPOINT"] + [f"OTEL_EXPORTER_OTLP_{s.upper()}_ENDPOINT" for s in SIGNALS]:
        value = env.get(var, "").strip()
        if not value:
            continue
        why = endpoint_problem(value)
        if why:
            problems.append(f"{var}={value!r} is not a usable endpoint: {why}; ignoring it")
        else:
            endpoints[var] = value
    explicit = {s: env.get(f"OTEL_{s.upper()}_EXPORTER", "").strip() for s in SIGNALS}
    if not endpoints and not explicit["traces"]:
        return Exporters(endpoint=None)

    protocol = {}
    general_proto = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip().lower()
    if general_proto and general_proto not in PROTOCOLS:
        problems.append(f"OTEL_EXPORTER_OTLP_PROTOCOL={general_proto!r} is not one of {', '.join(PROTOCOLS)}; ignoring it")
        general_proto = ""
    for s in SIGNALS:
        var = f"OTEL_EXPORTER_OTLP_{s.upper()}_PROTOCOL"
        p = env.get(var, "").strip().lower()
        if p and p not in PROTOCOLS:
            problems.append(f"{var}={p!r} is not one of {', '.join(PROTOCOLS)}; ignoring it")
            p = ""
        if not p:
            p = general_proto
        if not p:
            ep = endpoints.get(f"OTEL_EXPORTER_OTLP_{s.upper()}_ENDPOINT") or endpoints.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
            # Python's OTLP default is gRPC; an endpoint on the HTTP port says otherwise.
            p = "http/protobuf" if _port(ep) == 4318 or "/v1/" in ep else "grpc"
        if p == "http/json":
            problems.append(f"OTLP protocol http/json is not supported by the Python exporters for {s}; using http/protobuf")
            p = "http/protobuf"
        protocol[s] = p

    kinds = {}
    for s in SIGNALS:
        raw = explicit[s] or "otlp"
        names = tuple(dict.fromkeys(n.strip().lower() for n in raw.split(",") if n.strip())) or ("otlp",)
        if "none" in names:
            names = ()
        kinds[s] = names
    ep = endpoints.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or endpoints.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return Exporters(embedded=False, protocol=protocol, endpoint=ep, **kinds)


def endpoint_problem(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "it needs an http:// or https:// scheme, as in http://localhost:4317"
    if not parts.hostname:
        return "it has no host"
    if port is not None and not 0 < port < 65536:
        return f"port {port} is out of range"
    return None


def _port(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def _read_yaml(env: Mapping[str, str], cwd: str | None, problems: list[str]):
    """Return ({key: (value, where)}, path or None, extra sections)."""
    path = env.get("EVLOG_CONFIG", "").strip()
    named = bool(path)
    if not named:
        path = os.path.join(cwd or os.getcwd(), "evlog.yaml")
        if not os.path.isfile(path):
            return {}, None, {}
    path = os.path.abspath(os.path.expanduser(path))
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        problems.append(f"EVLOG_CONFIG: cannot read {path}: {exc.strerror or exc}; using defaults")
        return {}, None, {}
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); using defaults")
        return {}, None, {}
    import yaml  # only when a file is there

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        problems.append(f"{where}: malformed YAML ({problem}); using defaults")
        return {}, path, {}
    if data is None:
        return {}, path, {}
    if not isinstance(data, dict):
        problems.append(f"{path}, line 1: expected a mapping of settings (key: value), got {type(data).__name__}; using defaults")
        return {}, path, {}
    lines = {}
    if node is not None and hasattr(node, "value") and isinstance(node.value, list):
        for k, _v in node.value:
            lines[getattr(k, "value", None)] = k.start_mark.line + 1
    values, extra = {}, {}
    for key, value in data.items():
        where = f"{path}, line {lines.get(key, '?')}"
        k = str(key).strip().lower()
        if k in _KEYS.values():
            values[k] = (value, where)
        elif k.upper() in _KEYS:  # EVLOG_CAPTURE: spelled as the variable
            values[_KEYS[k.upper()]] = (value, where)
        else:
            extra[k] = value
    return values, path, extra


_cached: Settings | None = None


def get() -> Settings:
    """This process's settings (read once)."""
    global _cached
    if _cached is None:
        _cached = load()
    return _cached


def set_current(settings: Settings | None) -> None:
    global _cached
    _cached = settings
