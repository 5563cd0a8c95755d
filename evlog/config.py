"""Settings: evlog's EVLOG_* variables, the optional YAML file, and the exporter choice from OTEL_*.

One Settings object, validated in one place. Each EVLOG_* setting is declared once in SETTINGS (its
variable, YAML key, parser, default and help line): ``load`` reads the variables and the YAML file through
it, ``evlog.configure()``'s arguments go through the same parsers (``with_arguments``), and the README's
table is made from it (``readme_rows``). Every problem becomes one message naming the variable, the
argument, or the file, line and key; the bad value is replaced by its default, so the program always runs.
Parsing is pure (no SDK import), so the launcher can validate once for the whole run and children
stay quiet (EVLOG_CONFIG_REPORTED).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
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
SPOOL_LIMIT = 1 << 30  # EVLOG_SPOOL_LIMIT's default: bytes of records the exporter process spools to disk


class Bad(ValueError):
    """A value a setting cannot take; its text says why (the setting adds what it uses instead)."""


def comma_list(raw: Any) -> list[str] | None:
    """The items of a comma list (a variable's text) or of a list of strings (YAML, evlog.configure()),
    stripped, empty ones dropped; None when ``raw`` is neither."""
    if isinstance(raw, str):
        raw = raw.split(",")
    elif not (isinstance(raw, (list, tuple)) and all(isinstance(x, str) for x in raw)):
        return None
    return [x.strip() for x in raw if x.strip()]


class Setting:
    """One of evlog's settings, declared once: ``load`` reads it from its variable or the YAML file,
    ``evlog.configure()`` takes it by name, and the README's table and the messages come from it."""

    __slots__ = ("name", "variable", "key", "type", "parse", "default", "help", "shown", "instead")

    def __init__(self, name: str, variable: str, key: str | None, type: type, parse, default: Any, help: str,
                 shown: str, instead: str | None = None):
        #: the Settings field and evlog.configure()'s keyword argument
        self.name = name
        #: the environment variable (it wins over the YAML file)
        self.variable = variable
        #: the key in the YAML file, or None for a variable only
        self.key = key
        #: the type of the value the parser gives (None is also allowed where the default is None)
        self.type = type
        #: ``parse(raw, say) -> value``: raw is a variable's text, a YAML value or an argument; it raises
        #: Bad(why) for a value it cannot take at all and calls say(why) for a part it leaves out
        self.parse = parse
        #: the value when the setting is not given, or given a value the parser cannot take
        self.default = default
        #: what it sets, in one line (the README's "meaning" column)
        self.help = help
        #: the default as the README shows it
        self.shown = shown
        #: what a bad value gives, for the message ("using metadata")
        self.instead = instead or f"using {shown.strip('`')}"

    def read(self, raw: Any, where: str, problems: list[str]) -> Any:
        """The value for ``raw``; what is wrong with it goes to ``problems`` as ``where: why; instead``."""
        try:
            return self.parse(raw, lambda why: problems.append(f"{where}: {why}"))
        except Bad as exc:
            problems.append(f"{where}: {exc}; {self.instead}")
            return self.default


def _folder(raw: Any, say) -> str:
    if isinstance(raw, str) and raw.strip():
        return os.path.abspath(os.path.expanduser(raw.strip()))
    raise Bad(f"expected a folder path, got {raw!r}")


def _one_of(choices: tuple[str, ...], what: str):
    def parse(raw: Any, say) -> str:
        mode = raw.strip().lower() if isinstance(raw, str) else None
        if mode in choices:
            return mode
        raise Bad(f"unknown {what} {raw!r} (expected one of {', '.join(choices)})")

    return parse


def _capture(raw: Any, say) -> str:
    if isinstance(raw, dict):  # capture: {mode: enabled}
        for why in _unknown_keys(raw, ("mode",)):
            say(why)
        raw = raw.get("mode", "metadata")
    if raw is False:  # YAML reads a bare `off` as false
        raw = "off"
    return _one_of(CAPTURE_MODES, "capture mode")(raw, say)


def _consumers(raw: Any, say) -> tuple[str, ...]:
    names = comma_list(raw)
    if names is None:
        raise Bad(f"expected consumer names (a comma list, a list, or none), got {raw!r}")
    names = [n.lower() for n in names]
    if names in (["none"], []):
        return ()
    good = tuple(dict.fromkeys(n for n in names if n in KNOWN_CONSUMERS))
    bad = [n for n in names if n not in KNOWN_CONSUMERS]
    unknown = f"unknown consumer(s) {', '.join(map(repr, bad))} (known: {', '.join(KNOWN_CONSUMERS)}, or none)"
    if not good:
        raise Bad(unknown)
    if bad:
        say(f"{unknown}; ignoring them")
    return good


def _patterns(raw: Any, say) -> tuple[str, ...]:
    pats = raw if isinstance(raw, (list, tuple)) else ([raw] if raw else [])
    if not all(isinstance(p, str) for p in pats):
        raise Bad(f"expected a regular expression or a list of them, got {raw!r}")
    good = []
    for p in pats:
        try:
            re.compile(p)
            good.append(p)
        except re.error as exc:
            say(f"redact pattern {p!r} is not a valid regular expression ({exc}); ignoring it")
    return tuple(good)


def _bool(raw: Any, say) -> bool:
    b = parse_bool(raw) if isinstance(raw, (str, bool)) else None
    if b is None:
        raise Bad(f"expected true or false, got {raw!r}")
    return b


def _tasks(raw: Any, say) -> int:
    n = _whole(raw)
    if n is None or n < 0:
        raise Bad(f"expected a whole number of tasks >= 0 (0: no limit), got {raw!r}")
    return n


def _factories(raw: Any, say) -> tuple[str, ...]:
    names = comma_list(raw)
    if names is None:
        raise Bad(f"expected module:attribute names (a comma list or a list), got {raw!r}")
    bad = [n for n in names if not _FACTORY.match(n)]
    if bad:
        say(f"expected module:attribute (like mypkg.telemetry:MyProcessor), got {', '.join(map(repr, bad))}; "
            f"ignoring {'it' if len(bad) == 1 else 'them'}")
    return tuple(dict.fromkeys(n for n in names if n not in bad))


def _interval(raw: Any, say) -> float | None:
    interval = parse_interval(raw)
    if interval is False:
        raise Bad(f"expected an interval like 10ms or 0.05s (1 ms to 10 s), or off, got {raw!r}")
    return interval


def parse_size(raw: Any, say=None) -> int:
    """EVLOG_SPOOL_LIMIT: bytes, with a K, M or G suffix (binary); empty for the default."""
    text = str(raw).strip() if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
    if text == "":
        return SPOOL_LIMIT
    try:
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        value = int(float(text[:-1] if mult != 1 else text) * mult)
    except (ValueError, OverflowError, TypeError):  # TypeError: text is None; OverflowError: inf
        value = -1
    if value < 0:
        raise Bad(f"expected a size like 512M or 2G, got {raw!r}")
    return value


# Every EVLOG_* setting, in the README's order. EVLOG_CONFIG names the YAML file (read by _read_yaml).
SETTINGS = (
    Setting("config_file", "EVLOG_CONFIG", None, str, None, None,
            "the YAML file", "`./evlog.yaml` if it exists"),
    Setting("run_dir", "EVLOG_RUN_DIR", "run_dir", str, _folder, None,
            "where the local exporter writes",
            "`./evlog-runs/<UTC time>-<service>/` (`<service>`: `OTEL_SERVICE_NAME`, else `service.name` in "
            "`OTEL_RESOURCE_ATTRIBUTES`, else the script's name)", instead="using the default folder"),
    Setting("capture", "EVLOG_CAPTURE", "capture", str, _capture, "metadata",
            f"console capture: {', '.join(f'`{m}`' for m in CAPTURE_MODES)} (in YAML also `capture: {{mode: ...}}`)",
            "`metadata`"),
    Setting("consumers", "EVLOG_CONSUMERS", "consumers", tuple, _consumers, DEFAULT_CONSUMERS,
            "built-in consumers, comma list (or YAML list), or `none`", f"`{','.join(DEFAULT_CONSUMERS)}`",
            instead=f"using the default, {','.join(DEFAULT_CONSUMERS)}"),
    Setting("redact", "EVLOG_REDACT", "redact", tuple, _patterns, (),
            "extra regular expression(s) replaced by `[REDACTED]`", "built-in patterns only", instead="ignoring it"),
    Setting("dask_transitions", "EVLOG_DASK_TRANSITIONS", "dask_transitions", bool, _bool, True,
            "one span event per Dask scheduler transition", "`true`"),
    Setting("dask_trace_tasks", "EVLOG_DASK_TRACE_TASKS", "dask_trace_tasks", int, _tasks, DASK_TRACE_TASKS,
            "at most this many Dask tasks per trace: a bigger computation is split by task group into linked traces "
            "that Jaeger and Tempo can show ([docs/dask.md](docs/dask.md#big-computations)); `0`: no limit",
            f"`{DASK_TRACE_TASKS}`"),
    Setting("pool_spans", "EVLOG_POOL_SPANS", "pool_spans", str, _one_of(POOL_SPANS, "pool_spans mode"), "chunk",
            "pool tasks: `chunk` (a span per chunk of a chunked map, its calls counted and timed; a span per call "
            "sent alone) or `call` (a span per call everywhere), see [docs/pools.md](docs/pools.md)", "`chunk`"),
    Setting("span_processors", "EVLOG_SPAN_PROCESSORS", "span_processors", tuple, _factories, (),
            "your span processors (or MultiEventLogs) for every task span of the run, in its exporter process: "
            "`module:attribute` factories, comma list (or YAML list); see "
            "[docs/consumers.md](docs/consumers.md#every-task-span-of-the-run-in-one-place)", "none",
            instead="ignoring it"),
    Setting("summary", "EVLOG_SUMMARY", "summary", bool, _bool, True, "print the summary at exit", "`true`"),
    Setting("profile_interval", "EVLOG_PROFILE_INTERVAL", "profile_interval", float, _interval, PROFILE_INTERVAL,
            "how often the task profiler samples the threads running task spans: `10ms`, `0.05s`, a bare number "
            "of milliseconds (1 ms to 10 s), or `off` (no profiler thread at all); see "
            "[docs/profile.md](docs/profile.md)", "`10ms`"),
    Setting("spool_limit", "EVLOG_SPOOL_LIMIT", None, int, parse_size, SPOOL_LIMIT,
            "bytes of records the exporter process keeps on disk while export is behind (a collector slow or "
            "down), e.g. `512M`, `2G`; past it records are dropped and counted", "`1G`"),
)
BY_NAME = {s.name: s for s in SETTINGS}
_BY_KEY = {s.key: s for s in SETTINGS if s.key}
_BY_VARIABLE = {s.variable: s for s in SETTINGS if s.key}  # a YAML key may be spelled as its variable


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
    """This process's settings: one field per declaration of SETTINGS, then what the OTEL_* variables give."""

    FIELDS = {
        **{s.name: s.default for s in SETTINGS},
        "python_logging": 30,  # Python logging records at this level and above become OTel log records; None: off
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
    dask_trace_tasks: int  # tasks of one Dask computation in one trace; 0: no limit
    pool_spans: str  # one span per chunk of a chunked pool map, or (call) per call
    span_processors: tuple[str, ...]  # module:attribute factories run in the run's exporter process
    summary: bool
    profile_interval: float | None  # seconds between profiler samples of task threads; None: off
    spool_limit: int
    python_logging: int | None
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
    given, config_file, extra = _read_yaml(env, cwd, problems)  # {name: (raw value, where)}
    given.update({s.name: (env[s.variable], s.variable) for s in SETTINGS if s.parse and s.variable in env})
    kw: dict[str, Any] = {"config_file": config_file, "extra": extra}
    for s in SETTINGS:
        if s.name in given:
            kw[s.name] = s.read(*given[s.name], problems)
    kw["sdk_disabled"] = sdk_disabled(env, problems)
    kw["disabled_instrumentations"] = frozenset(comma_list(env.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")))
    kw["python_logging"] = python_logging(env, problems)
    kw["exporters"] = resolve_exporters(env, problems)
    kw["sdk_numbers"] = sdk_numbers(env, problems)
    kw["sampler"] = sampler(env, problems)
    return Settings(problems=tuple(problems), **kw)


def with_arguments(settings: Settings, arguments: Mapping[str, Any]) -> tuple[Settings, list[str]]:
    """``settings`` with evlog.configure()'s keyword arguments, each read by its setting's parser as its
    variable would be; returns the settings and one message per bad argument (replaced by its default)
    or unknown name (left out)."""
    problems: list[str] = []
    kw = {}
    for name, raw in arguments.items():
        s = BY_NAME.get(name)
        if s is None or s.key is None:
            why = (f"{name} is read from {s.variable} only" if s else
                   f"unknown setting {name!r} ({_hint(name, tuple(_BY_KEY), 'settings')})")
            problems.append(f"evlog.configure: {why}; ignoring it")
            continue
        kw[name] = s.read(os.fspath(raw) if isinstance(raw, os.PathLike) else raw, f"evlog.configure({name}=...)",
                          problems)
    return settings.with_overrides(**kw), problems


def from_variable(name: str, env: Mapping[str, str]) -> Any:
    """One setting's value from its variable alone: its default when unset or bad, quietly (for a process
    of the run that reads it where the program's settings were already read and their problems named)."""
    s = BY_NAME[name]
    return s.read(env[s.variable], s.variable, []) if s.variable in env else s.default


def readme_rows() -> list[str]:
    """The README's table of evlog's variables (tests/test_readme.py holds the README to it;
    docs/config_table.py writes it there)."""
    rows = ["| variable | YAML key | meaning | default |", "|---|---|---|---|"]
    for s in SETTINGS:
        key = f" `{s.key}` " if s.key else " "
        rows.append(f"| `{s.variable}` |{key}| {s.help} | {s.shown} |")
    return rows


def sdk_disabled(env: Mapping[str, str], problems: list[str]) -> bool:
    value = parse_bool(env.get("OTEL_SDK_DISABLED", "false"))
    if value is None:
        problems.append(f"OTEL_SDK_DISABLED: expected true or false, got {env['OTEL_SDK_DISABLED']!r}; using false")
        return False
    return value


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
        if p == "http/json" and s != "traces":  # evlog sends spans itself, OTLP/JSON too (exporter/otlp_send)
            as_json.append(s)
            p = "http/protobuf"
        protocol[s] = p
    if as_json:
        problems.append(http_json_unsupported(as_json))

    kinds = {}
    for s in SIGNALS:
        names = tuple(dict.fromkeys(n.lower() for n in comma_list(explicit[s]))) or ("otlp",)
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
        setting = _BY_KEY.get(k) or _BY_VARIABLE.get(k.upper())  # EVLOG_CAPTURE: spelled as the variable
        if setting is not None:
            values[setting.name] = (value, f"{where}, {key}")
        else:
            problems.extend(f"{where}: {why}" for why in _unknown_keys({key: value}, tuple(_BY_KEY)))
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


def _unknown_keys(mapping: Mapping, known: tuple[str, ...]) -> list[str]:
    """One message per key of ``mapping`` not in ``known``, with the closest known key if one is close."""
    return [f"unknown key {key!r} ({_hint(key, known)}); ignoring it" for key in mapping
            if str(key).strip().lower() not in known]


def _hint(name: Any, known: tuple[str, ...], what: str = "keys") -> str:
    import difflib

    close = difflib.get_close_matches(str(name).strip().lower().removeprefix("evlog_"), known, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"known {what}: {', '.join(known)}"


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
