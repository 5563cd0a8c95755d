"""torchelastic's events and metrics on OpenTelemetry (their public API is evlog.bridge, and torch's own
``torch.distributed.elastic.events`` / ``.metrics`` calls come here too): events -> OTel log records
(otel.py), metric points -> OTel instruments (metrics.py)."""
