"""Reading telemetry back: OTLP decoding, the OTLP receiver, the run-folder store and the dashboard."""
