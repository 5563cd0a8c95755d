"""evlog: an OpenTelemetry distribution for Python task schedulers and the workers they drive.

Run a program under `evlog-instrument python app.py`, or call `evlog.configure()` in code.
Public names are imported lazily, so `import evlog` costs next to nothing.
"""
from __future__ import annotations

from evlog.version import __version__ as __version__

_LAZY = {
    # name: (module, attribute or None for the module itself)
    "consumers": ("evlog.processors.consumers", None),
    "aggregators": ("evlog.processors.aggregators", None),
    "MultiEventLog": ("evlog.processors.multieventlog", "MultiEventLog"),
    "Event": ("evlog.processors.multieventlog", "Event"),
    "set_log_sink": ("evlog.processors.multieventlog", "set_log_sink"),
    "fetch_logs": ("evlog.processors.multieventlog", "fetch_logs"),
    "unset_log_sink": ("evlog.processors.multieventlog", "unset_log_sink"),
    "default_log": ("evlog.processors.multieventlog", "default_log"),
    "log_event": ("evlog.observed.events", "log_event"),
    "get_events": ("evlog.observed.events", "get_events"),
    "story": ("evlog.observed.events", "story"),
}


def configure(**overrides: object) -> bool:
    """Set evlog up in this process, in code: the same settings as the EVLOG_* variables.

    Keyword arguments, named as the settings' YAML keys (run_dir, capture, consumers, redact,
    dask_transitions, dask_trace_tasks, pool_spans, span_processors, summary, profile_interval), override
    the environment and the YAML file; each is read as its variable would be (a list where the variable
    takes a comma list), and a bad one is named in one line and replaced by its default. Console capture
    starts only if ``capture`` is given. Returns False if evlog was already set up in this process (or the
    SDK is disabled). When telemetry goes to a run folder, says where on stderr (one line; not with
    summary=False).
    """
    from evlog import config, notices
    from evlog.observed import boot

    settings, problems = config.with_arguments(config.load(), overrides)
    for p in problems:
        notices.warn_once(f"config-{p}", p)
    return boot.start(settings, capture="capture" in overrides and settings.capture != "off", ready=_say_where)


def _say_where(settings) -> None:
    """One line naming the run folder this process writes (evlog-instrument's summary says it at exit),
    before console capture starts (it is evlog's line, not the program's output)."""
    if settings.summary and settings.run_dir and settings.exporters.run_folder:
        from evlog import notices
        from evlog.observed import run

        notices.warn_once("configure-run-folder", f"writing telemetry to the run folder {settings.run_dir}; "
                                                  f"see it with: {run.view_command(settings.run_dir)}")


def __getattr__(name: str) -> object:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'evlog' has no attribute {name!r}") from None
    import importlib  # here, not at the top: the console relay imports evlog.wire under python -S

    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value
