"""Span processors: Dagger's consumers and aggregators (MultiEventLog, LogWindow, fetch_logs) on OTel spans.

- multieventlog: Event, MultiEventLog, set_log_sink, fetch_logs (user-installed logs)
- consumers, aggregators: the built-in callables (TimespanLogging.Events, Dagger.Events, LogWindow)
- builtin: the default log of EVLOG_CONSUMERS, fused into one cheap span processor
- gauges: the default consumers as OTel observable gauges
- spans, sampling: span -> (category, id, timeline); load, memory and bytes readings
- on_provider: these processors on an SDK tracer provider (they are not the SDK's SpanProcessor subclasses)

``install_default(settings)`` runs in every process under evlog-instrument that runs tasks or makes spans
(evlog/observed/boot.py says when), without building the OTel SDK; it imports only what the chosen
consumers need (no psutil until the first reading).
"""
from __future__ import annotations

from evlog import notices


def install_default(settings, tracer_provider=None, meter_provider=None):
    """Install the default log of ``settings.consumers`` on this process's tracer provider, and its gauges
    on ``meter_provider`` (anything with ``get_meter(name, version)``: evlog's own registry,
    evlog.observed.own_metrics, in an observed process; the global OTel one if None).

    Names the fused log can compute (core, wsat, psat, esat, loadavg, mem, bytes) cost a few tenths of
    a microsecond per span; naming id, timeline or full makes the default log a full MultiEventLog
    (an Event per span start and finish). Evlog's own tracer provider is not built for it: the log sees
    the task spans recorded here at once (the registry), and the SDK's spans once the program makes some
    (on_provider). Returns the log, or None. Never raises; idempotent."""
    names = tuple(getattr(settings, "consumers", ()) or ())
    if not names:
        return None
    try:
        from evlog.processors.registry import registry

        if registry.builtin is not None:
            return registry.builtin
        from opentelemetry import trace

        from evlog.processors.on_provider import add_span_processor, takes_span_processors

        provider = tracer_provider or trace.get_tracer_provider()
        if not takes_span_processors(provider):
            return None
        from evlog.processors import builtin, gauges

        if set(names) <= builtin.FAST_NAMES:
            log = builtin.BuiltinLog(names)
            add_span_processor(provider, log)
            source = log
        else:
            from evlog.processors import multieventlog as mel
            from evlog.processors.consumers import BUILTIN

            log = mel.MultiEventLog()
            for name in names:
                if name in BUILTIN:
                    log[name] = BUILTIN[name]()
            mel.set_log_sink(log, provider, default=False)
            source = gauges.ConsumersView(log)
        registry.builtin = log
        registry.changed()
        gauges.register(source, names, meter_provider)
        return log
    except Exception as exc:
        if not notices.exiting():  # else it raced the program's exit
            notices.warn_once("consumers-install", f"the default consumers could not be installed: {exc!r}")
        return None
