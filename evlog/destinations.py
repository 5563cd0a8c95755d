"""Where each signal goes, by the settings' names: checked and described once per run by its owner (the
launched program, evlog/observed/run.py), built by the run's exporter process (evlog/exporter/select.py).
"""
from __future__ import annotations


def unknown(signal: str, kind: str) -> str:
    return f"OTEL_{signal.upper()}_EXPORTER: no exporter named {kind!r} is installed; {signal} go nowhere"


def unknown_exporters(settings) -> list[str]:
    """A message per exporter name of the settings that is neither evlog's nor an installed entry point
    (said once per run, by its owner, at its start)."""
    out = []
    for signal in ("traces", "metrics", "logs"):
        for kind in getattr(settings.exporters, signal):
            if kind in ("file", "otlp", "console"):
                continue
            from importlib.metadata import entry_points

            if not list(entry_points(group=f"opentelemetry_{signal}_exporter", name=kind)):
                out.append(unknown(signal, kind))
    return out


def describe(settings) -> str:
    """Where telemetry goes, for the summary and messages (no secrets: headers are never shown)."""
    ex = settings.exporters
    if ex.embedded:
        return settings.run_dir or "the run folder"
    kinds = sorted({k for s in ("traces", "metrics", "logs") for k in ex.for_signal(s)})
    parts = []
    for k in kinds:
        if k == "file":
            parts.append(settings.run_dir or "the run folder")
        elif k == "otlp":
            parts.append(f"OTLP {ex.protocol['traces']} {ex.endpoint or _default_endpoint(ex.protocol['traces'])}")
        else:
            parts.append(k)
    return ", ".join(parts) or "nowhere (exporters set to none)"


def _default_endpoint(protocol: str) -> str:
    return "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
