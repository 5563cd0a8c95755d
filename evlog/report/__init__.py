"""`evlog report`: why a run took as long as it did, from the telemetry evlog recorded.

- model: Dask computations (one per client call) and their tasks' times, from decoded span rows;
- analysis: critical path, time by prefix, stragglers, failures, workers, metadata trends, advice;
- groups: the parts that apply to pool calls (by function) and torch elastic ranks;
- render_text, render_html: the report as text, or as one offline HTML page;
- command: loading a run folder or an `evlog serve` database, and the CLI entry.

Pure functions over otlp_decode's rows (evlog.data.otlp_decode); nothing of the OTel SDK.
docs/report.md defines every figure.
"""
