"""Record kinds: how a stream of records from an observed process names the builder it needs in the
run's exporter process (evlog.observed.records -> evlog/exporter/process.py). Standard library only, so that the
observed side can name a kind without importing the builder (which imports the SDK).

Each kind's record fields are named in evlog/wire: pool.task and otel.* in otel.py, dask.* in dask.py,
console in console.py, profile in profile_records.py.
"""
POOL_TASK = "pool.task"  # a pool task's span
OTEL_SPAN = "otel.span"  # a span of the program's own SDK provider
OTEL_LOG = "otel.log"  # a log record of the program's own SDK provider (its events, Python logging)
OTEL_METRICS = "otel.metrics"  # one collection of the program's own SDK meter provider
