"""The read side: what `evlog view`, `evlog serve`, `evlog report` and the CLI's queries run on.

- otlp_decode: OTLP requests (JSON or protobuf) -> flat rows;
- run_reader: a run folder's OTLP/JSON lines -> rows (the writer is evlog/exporter/run_writer.py);
- receiver: the OTLP receiver of `evlog serve` (gRPC and HTTP);
- store: the SQLite store (schema, ingestion, queries, the writer thread);
- panels: the dashboard's data shaped for drawing (Gantt, plots, DAG, task story, flame graphs, ...);
- profile_samples, exception_text, jsonsafe: what the report and the panels both read that way.

evlog.viewer (aiohttp) and evlog.report import this package; it imports neither (pyproject.toml's
import-linter contracts).
"""
