"""Record kinds: how a stream of records from an observed process names the builder it needs in the
run's exporter process (evlog.observed.records -> evlog/exporter/process.py). Standard library only, so that the
observed side can name a kind without importing the builder (which imports the SDK).

Each kind's record fields are described where its records are written: pool.task in
observed/pools/taskspan.py (and its builder pool_spans.py), otel.* in observed/sdk_records.py.
"""
POOL_TASK = "pool.task"  # a pool task's span
OTEL_SPAN = "otel.span"  # a span of the program's own SDK provider
OTEL_LOG = "otel.log"  # a log record of the program's own SDK provider (its events, Python logging)
OTEL_METRICS = "otel.metrics"  # one collection of the program's own SDK meter provider
