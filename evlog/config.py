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

# Numbers the OTel SDK would read from OTEL_* itself: variable -> (value used where it is unset or
# bad: evlog's default where it has one, else the spec's; the unit, for the message). Every value must
# be a whole number >= 1. evlog validates them here and passes them to the SDK (evlog/observed/sdk.py,
# the console relay), so a bad one falls back with one message instead of failing the signal's set-up.
# Queues: 4-8 times the SDK's 2,048, which overflows at bursts of about 10,000 spans/s; a queued span
# or log record holds about 2 KB, so a dead collector costs at most about 50 MB (tests/test_faults.py).
SDK_NUMBERS = {
    "OTEL_BSP_SCHEDULE_DELAY": (1000, "milliseconds"),
    "OTEL_BSP_EXPORT_TIMEOUT": (30000, "milliseconds"),
    "OTEL_BSP_MAX_QUEUE_SIZE": (16384, "spans"),
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": (512, "spans"),
    "OTEL_BLRP_SCHEDULE_DELAY": (1000, "milliseconds"),
    "OTEL_BLRP_EXPORT_TIMEOUT": (30000, "milliseconds"),
    "OTEL_BLRP_MAX_QUEUE_SIZE": (8192, "log records"),
    "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE": (512, "log records"),
    "OTEL_METRIC_EXPORT_INTERVAL": (1000, "milliseconds"),  # the dashboard plots CPU load and memory at 1 s
    "OTEL_METRIC_EXPORT_TIMEOUT": (30000, "milliseconds"),
}
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio")
DEFAULT_SAMPLER = "parentbased_always_on"
_FACTORY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")  # span_processors entries
PROFILE_INTERVAL = 0.01  # EVLOG_PROFILE_INTERVAL's default: 10 ms, as Dask's own profiler
DASK_TRACE_TASKS = 2000  # about 3 MB of protobuf per trace for trivial tasks (evlog/builders/dask_shape.py)

# variable -> YAML key
_KEYS = {
    "EVLOG_RUN_DIR": "run_dir",
    "EVLOG_CAPTURE": "capture",
    "EVLOG_CONSUMERS": "consumers",
    "EVLOG_REDACT": "redact",
    "EVLOG_DASK_TRANSITIONS": "dask_transitions",
    "EVLOG_DASK_TRACE_TASKS": "dask_trace_tasks",
    "EVLOG_POOL_SPANS": "pool_spans",
    "EVLOG_SPAN_PROCESSORS": "span_processors",
    "EVLOG_SUMMARY": "summary",
    "EVLOG_PROFILE_INTERVAL": "profile_interval",
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

    @property
    def run_folder(self) -> bool:
        """Does a signal go to the run folder (the embedded default, or `file` named for one)?"""
        return self.embedded or any("file" in self.for_signal(s) for s in SIGNALS)


class Settings(_Record):
    FIELDS = {
        "config_file": None,
        "run_dir": None,
        "capture": "metadata",
        "consumers": DEFAULT_CONSUMERS,
        "redact": (),
        "dask_transitions": True,
        "dask_trace_tasks": DASK_TRACE_TASKS,  # tasks of one Dask computation in one trace; 0: no limit
        "pool_spans": "chunk",  # one span per chunk of a chunked pool map, or (call) per call
        "span_processors": (),  # module:attribute factories run in the run's exporter process
        "python_logging": 30,  # Python logging records at this level and above become OTel log records; None: off
        "summary": True,
        "profile_interval": PROFILE_INTERVAL,  # seconds between profiler samples of task threads; None: off
        "sdk_disabled": False,
        "disabled_instrumentations": frozenset(),
        "exporters": Exporters,
        "sdk_numbers": lambda: {var: v[0] for var, v in SDK_NUMBERS.items()},  # SDK_NUMBERS' values to use
        "sampler": (DEFAULT_SAMPLER, None),  # OTEL_TRACES_SAMPLER and its ratio (None if it takes none)
        "extra": dict,  # other top-level YAML sections
        "problems": (),
    }
    config_file: str | None
    run_dir: str | None
    capture: str
    consumers: tuple[str, ...]
    redact: tuple[str, ...]
    dask_transitions: bool
    dask_trace_tasks: int
    pool_spans: str
    span_processors: tuple[str, ...]
    python_logging: int | None
    summary: bool
    profile_interval: float | None
    sdk_disabled: bool
    disabled_instrumentations: frozenset[str]
    exporters: Exporters
    sdk_numbers: Mapping[str, int]
    sampler: tuple[str, float | None]
    extra: Mapping[str, Any]
    problems: tuple[str, ...]

    def instrumentation_enabled(self, name: str) -> bool:
        d = self.disabled_instrumentations
        return not ("*" in d or name in d or f"evlog_{name}" in d)


def parse_interval(raw: Any) -> float | None | bool:
    """EVLOG_PROFILE_INTERVAL: ``10ms``, ``0.02s``, a bare number of milliseconds, or off (None); False
    when it is none of these or outside 1 ms to 10 s."""
    if raw is False or (isinstance(raw, str) and raw.strip().lower() in ("off", "false", "none", "0")):
        return None  # YAML reads a bare `off` as false
    text = str(raw).strip().lower() if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else ""
    scale = 1e-3
    if text.endswith("ms"):
        text = text[:-2]
    elif text.endswith("s"):
        text, scale = text[:-1], 1.0
    try:
        value = float(text) * scale
    except ValueError:
        return False
    return value if 1e-3 <= value <= 10.0 else False


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
            problems.append(f"{where}: expected a folder path, got {raw!r}; using the default folder")
    if "capture" in values:
        raw, where = values["capture"]
        if isinstance(raw, dict):
            _unknown_keys(raw, ("mode",), f"{where}: ", problems)
            raw = raw.get("mode", "metadata")
        if raw is False:  # YAML reads a bare `off` as false
            raw = "off"
        mode = str(raw).strip().lower() if isinstance(raw, str) else None
        if mode in CAPTURE_MODES:
            kw["capture"] = mode
        else:
            problems.append(f"{where}: unknown capture mode {raw!r} (expected one of {', '.join(CAPTURE_MODES)}); using metadata")
    if "consumers" in values:
        raw, where = values["consumers"]
        default = ",".join(DEFAULT_CONSUMERS)
        if isinstance(raw, str) or (isinstance(raw, list) and all(isinstance(x, str) for x in raw)):
            names = [x.strip().lower() for x in (raw if isinstance(raw, list) else raw.split(","))]
            names = [n for n in names if n]
            if names in (["none"], []):
                kw["consumers"] = ()
            else:
                good = tuple(dict.fromkeys(n for n in names if n in KNOWN_CONSUMERS))
                bad = [n for n in names if n not in KNOWN_CONSUMERS]
                if bad:
                    what = "ignoring them" if good else f"using the default, {default}"
                    problems.append(f"{where}: unknown consumer(s) {', '.join(map(repr, bad))} "
                                    f"(known: {', '.join(KNOWN_CONSUMERS)}, or none); {what}")
                kw["consumers"] = good or DEFAULT_CONSUMERS
        else:
            problems.append(f"{where}: expected consumer names (a comma list, a list, or none), got {raw!r}; "
                            f"using the default, {default}")
    if "redact" in values:
        raw, where = values["redact"]
        pats = raw if isinstance(raw, list) else ([raw] if raw else [])
        good = []
        if not all(isinstance(p, str) for p in pats):
            problems.append(f"{where}: expected a regular expression or a list of them, got {raw!r}; ignoring it")
            pats = []
        for p in pats:
            try:
                re.compile(p)
                good.append(p)
            except re.error as exc:
                problems.append(f"{where}: redact pattern {p!r} is not a valid regular expression ({exc}); ignoring it")
        kw["redact"] = tuple(good)
    for key in ("dask_transitions", "summary"):
        if key in values:
            raw, where = values[key]
            b = parse_bool(raw) if isinstance(raw, (str, bool)) else None
            if b is None:
                problems.append(f"{where}: expected true or false, got {raw!r}; using true")
            else:
                kw[key] = b
    if "dask_trace_tasks" in values:
        raw, where = values["dask_trace_tasks"]
        n = _whole(raw)
        if n is None or n < 0:
            problems.append(f"{where}: expected a whole number of tasks >= 0 (0: no limit), got {raw!r}; "
                            f"using {DASK_TRACE_TASKS}")
        else:
            kw["dask_trace_tasks"] = n
    if "span_processors" in values:
        raw, where = values["span_processors"]
        if isinstance(raw, str) or (isinstance(raw, list) and all(isinstance(x, str) for x in raw)):
            names = [x.strip() for x in (raw if isinstance(raw, list) else raw.split(","))]
            names = [n for n in names if n]
            bad = [n for n in names if not _FACTORY.match(n)]
            if bad:
                problems.append(f"{where}: expected module:attribute (like mypkg.telemetry:MyProcessor), got "
                                f"{', '.join(map(repr, bad))}; ignoring {'it' if len(bad) == 1 else 'them'}")
            kw["span_processors"] = tuple(dict.fromkeys(n for n in names if n not in bad))
        else:
            problems.append(f"{where}: expected module:attribute names (a comma list or a list), got {raw!r}; "
                            "ignoring it")
    if "profile_interval" in values:
        raw, where = values["profile_interval"]
        interval = parse_interval(raw)
        if interval is False:
            problems.append(f"{where}: expected an interval like 10ms or 0.05s (1 ms to 10 s), or off, got {raw!r}; "
                            "using 10ms")
        else:
            kw["profile_interval"] = interval
    if "pool_spans" in values:
        raw, where = values["pool_spans"]
        mode = raw.strip().lower() if isinstance(raw, str) else None
        if mode in POOL_SPANS:
            kw["pool_spans"] = mode
        else:
            problems.append(f"{where}: unknown pool_spans mode {raw!r} "
                            f"(expected one of {', '.join(POOL_SPANS)}); using chunk")

    sdk_disabled = parse_bool(env.get("OTEL_SDK_DISABLED", "false"))
    if sdk_disabled is None:
        problems.append(f"OTEL_SDK_DISABLED: expected true or false, got {env['OTEL_SDK_DISABLED']!r}; using false")
        sdk_disabled = False
    kw["sdk_disabled"] = sdk_disabled
    kw["disabled_instrumentations"] = frozenset(
        x.strip() for x in env.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",") if x.strip()
    )
    kw["python_logging"] = python_logging(env, problems)
    kw["exporters"] = resolve_exporters(env, problems)
    kw["sdk_numbers"] = sdk_numbers(env, problems)
    kw["sampler"] = sampler(env, problems)
    kw["problems"] = tuple(problems)
    return Settings(**kw)


LOG_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50, "fatal": 50}


def python_logging(env: Mapping[str, str], problems: list[str]) -> int | None:
    """The level from which Python logging records become OTel log records, or None (off).

    OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED as the SDK reads it (``true`` turns it on, any other
    value off), except that evlog's default, when it is unset, is on; OTEL_PYTHON_LOG_LEVEL (debug, info,
    warning, error, critical) sets the level, WARNING by default."""
    raw = env.get("OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED")
    if raw is not None and raw.strip().lower() != "true":
        if raw.strip().lower() != "false":
            problems.append(f"OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED: expected true or false, got {raw!r}; "
                            "Python logging is not exported (as the OpenTelemetry SDK reads it)")
        return None
    level = env.get("OTEL_PYTHON_LOG_LEVEL")
    if level is None or not level.strip():
        return 30
    value = LOG_LEVELS.get(level.strip().lower())
    if value is None:
        problems.append(f"OTEL_PYTHON_LOG_LEVEL: unknown level {level!r} (expected one of debug, info, warning, "
                        "error, critical); using warning")
        return 30
    return value


def _whole(raw: Any) -> int | None:
    """A whole number from a variable's text or a YAML value, else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip().replace("_", ""))
    except ValueError:
        return None


def parse_bool(raw: Any) -> bool | None:
    if isinstance(raw, bool):
        return raw
    s = str(raw).strip().lower()
    return True if s in _TRUE else False if s in _FALSE else None


def sdk_numbers(env: Mapping[str, str], problems: list[str]) -> dict[str, int]:
    """SDK_NUMBERS' values: the user's where valid, else the default, with one message per bad one."""
    out = {}
    for var, (default, unit) in SDK_NUMBERS.items():
        raw = env.get(var, "").strip()
        if not raw:
            out[var] = default
            continue
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value >= 1:
            out[var] = value
        else:
            out[var] = default
            problems.append(f"{var}: expected a whole number of {unit}, 1 or more, got {raw!r}; using {default}")
    for prefix, unit in (("OTEL_BSP", "spans"), ("OTEL_BLRP", "log records")):
        batch, queue = f"{prefix}_MAX_EXPORT_BATCH_SIZE", f"{prefix}_MAX_QUEUE_SIZE"
        if out[batch] > out[queue]:  # the SDK refuses a batch larger than its queue
            problems.append(f"{batch}: {out[batch]} {unit} is more than the queue holds ({queue} is "
                            f"{out[queue]}); using {out[queue]}")
            out[batch] = out[queue]
    return out


def sampler(env: Mapping[str, str], problems: list[str]) -> tuple[str, float | None]:
    """(OTEL_TRACES_SAMPLER, its ratio for the ratio samplers), as the spec reads them, bad values named."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or DEFAULT_SAMPLER
    if name not in SAMPLERS:
        problems.append(f"OTEL_TRACES_SAMPLER: unknown sampler {env['OTEL_TRACES_SAMPLER']!r} "
                        f"(expected one of {', '.join(SAMPLERS)}); using {DEFAULT_SAMPLER}")
        name = DEFAULT_SAMPLER
    if not name.endswith("traceidratio"):
        return name, None
    raw = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if not raw:
        return name, 1.0  # the spec's default ratio
    try:
        ratio = float(raw)
    except ValueError:
        ratio = None
    if ratio is None or not 0.0 <= ratio <= 1.0:  # also NaN
        why = "is not a number" if ratio is None else "is out of range"
        problems.append(f"OTEL_TRACES_SAMPLER_ARG: {raw!r} {why} (expected a sampling ratio from 0 to 1 for "
                        f"{name}); using 1.0")
        ratio = 1.0
    return name, ratio


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
    as_json = []  # signals asked for http/json
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
            as_json.append(s)
            p = "http/protobuf"
        protocol[s] = p
    if as_json:
        problems.append(http_json_unsupported(as_json))

    kinds = {}
    for s in SIGNALS:
        raw = explicit[s] or "otlp"
        names = tuple(dict.fromkeys(n.strip().lower() for n in raw.split(",") if n.strip())) or ("otlp",)
        if "none" in names:
            names = ()
        kinds[s] = names
    ep = endpoints.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or endpoints.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return Exporters(embedded=False, protocol=protocol, endpoint=ep, **kinds)


def http_json_unsupported(signals: list[str]) -> str:
    """The one message for every signal asked to export OTLP as http/json."""
    signals = sorted(signals, key=("traces", "logs", "metrics").index)
    named = ", ".join(signals[:-1]) + " and " + signals[-1] if len(signals) > 1 else signals[0]
    return f"http/json is not supported by the Python OTLP exporters; using http/protobuf for {named}"


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

    node = None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line, problem = _yaml_fault(text, exc)
        problems.append(f"{path}{f', line {line}' if line else ''}: malformed YAML ({problem}); using defaults")
        return {}, path, {}
    except Exception as exc:  # a value its tag cannot make (`!!int x`): named by its key's line
        line = _unconstructible_line(node)
        problems.append(f"{path}{f', line {line}' if line else ''}: a value YAML cannot make ({exc}); using defaults")
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
            values[k] = (value, f"{where}, {key}")
        elif k.upper() in _KEYS:  # EVLOG_CAPTURE: spelled as the variable
            values[_KEYS[k.upper()]] = (value, f"{where}, {key}")
        else:
            _unknown_keys({key: value}, tuple(_KEYS.values()), f"{where}: ", problems)
            extra[k] = value
    return values, path, extra


_OPENED = ("flow sequence", "flow mapping", "quoted scalar", "simple key")  # opened by a bracket, a quote, a key


def _yaml_fault(text: str, exc) -> tuple[int | None, str]:
    """(line of the fault, 1-based, or None; what is wrong) for PyYAML's error on ``text``.

    PyYAML marks where it noticed the problem (0-based), which is often past the fault: a bracket or
    quote left open is noticed at the next line or the end of the file (its ``context_mark`` is where it
    opened), and a key missing its ':' runs on into the next line, where that line's ':' is refused.
    """
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return None, problem
    line = mark.line + 1
    ended = mark.index >= len(text.rstrip())
    problem = problem.replace("'<stream end>'", "the end of the file").replace("end of stream", "end of the file")
    context, opened = getattr(exc, "context", None) or "", getattr(exc, "context_mark", None)
    if opened is not None and opened.line < mark.line and any(o in context for o in _OPENED):
        what = re.sub(r"^while (parsing|scanning) an? ", "", context)
        at = "" if ended else f" on line {line}"
        return opened.line + 1, f"{problem}{at}, in the {what} that starts here"
    if ended:  # the text ran out: the fault is in its last line
        return len(text.rstrip().splitlines()) or 1, problem
    start = _last_scalar_line(text)
    if problem == "mapping values are not allowed here" and start is not None and start < mark.line:
        return start + 1, (f"the ':' on line {line} follows text that starts here: is a ':' missing on this line, "
                           f"or is line {line} indented too far?")
    return line, problem


def _last_scalar_line(text: str) -> int | None:
    """The 0-based line where the last plain or quoted value PyYAML read before its error starts."""
    import yaml

    scanner = yaml.SafeLoader(text)
    last = None
    try:
        while scanner.check_token():
            token = scanner.get_token()
            if isinstance(token, yaml.ScalarToken):
                last = token
    except Exception:  # the error being explained, or another: what was read stands
        pass
    for token in scanner.tokens:  # read ahead, not yet handed out
        if isinstance(token, yaml.ScalarToken):
            last = token
    return None if last is None else last.start_mark.line


def _unconstructible_line(node) -> int | None:
    """The line of the first top-level key whose value PyYAML cannot construct, or None."""
    import yaml

    for key, value in getattr(node, "value", None) or ():
        if not isinstance(key, yaml.Node) or not isinstance(value, yaml.Node):
            continue
        try:
            yaml.SafeLoader("").construct_object(value, deep=True)
        except Exception:
            return key.start_mark.line + 1
    return None


def _unknown_keys(mapping: Mapping, known: tuple[str, ...], where: str, problems: list[str]) -> None:
    """One message per key of ``mapping`` not in ``known``, with the closest known key if one is close."""
    import difflib

    for key in mapping:
        k = str(key).strip().lower()
        if k in known:
            continue
        close = difflib.get_close_matches(k.removeprefix("evlog_"), known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        problems.append(f"{where}unknown key {key!r} ({hint}); ignoring it")


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
