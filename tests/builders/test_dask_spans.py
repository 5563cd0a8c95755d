"""evlog/builders/dask_spans.py: what every Dask span the exporter process builds shares (its
instrumentation scope, sampled trace flags, an unset status), checked on the spans the scheduler's and a
worker's records become, no cluster.

Records as tests/builders/test_dask_lives.py and test_dask_executions.py write them (see there).
"""
from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import StatusCode

import evlog
from evlog.builders import dask_spans
from evlog.builders.dask_executions import EXECUTE, Executions
from evlog.builders.dask_lives import Lives
from evlog.wire.dask import SCOPE_NAME

RES = Resource({"service.name": "app"})
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CALL = 0xB7AD6B7169203331
TP = f"00-{TRACE:032x}-{CALL:016x}-01"
W1 = "tcp://127.0.0.1:40001"
T0 = 1000.0


def scheduler_spans() -> list:
    """One task's life on the scheduler, released to memory, forgotten (out at once)."""
    info = ("inc", "inc-5d1f", None, {"traceparent": TP}, (0, 1, 0))
    records = [("inc-1", "released", "waiting", "update-graph-1", T0, None, info),
               ("inc-1", "waiting", "processing", "update-graph-1", T0 + 1, W1, None),
               ("inc-1", "processing", "memory", "task-finished-1", T0 + 3, (W1, None, None, 28, 0, 0.5), None),
               ("inc-1", "memory", "released", "client-releases-keys-1", T0 + 4, None, None),
               ("inc-1", "released", "forgotten", "client-releases-keys-1", T0 + 4.5, None, None)]
    return Lives(lambda: RES).feed(records, 50.0)


def worker_spans() -> list:
    record = (EXECUTE, "inc-1", "inc", TRACE, 0x00F067AA0BA902B7, (TRACE, CALL, 1), T0 + 1.5, T0 + 2.5, 140001,
              "Dask-Default-Threads-1-0", None, (), W1, None)
    return Executions(lambda: RES).feed([record], 50.0)


def test_the_scope_is_evlogs_dask_scope_at_evlogs_version():
    assert (dask_spans.SCOPE.name, dask_spans.SCOPE.version) == (SCOPE_NAME, evlog.__version__) == ("evlog.dask",
                                                                                                    evlog.__version__)
    assert dask_spans.SAMPLED.sampled and dask_spans.UNSET.status_code is StatusCode.UNSET


def test_scheduler_and_worker_spans_share_one_scope_object_sampled_flags_and_an_unset_status():
    spans = scheduler_spans() + worker_spans()
    assert {s.name for s in spans} == {"dask.task inc", "dask.execute inc"}
    for span in spans:
        assert span.instrumentation_scope is dask_spans.SCOPE, span.name  # one object: the encoder writes it once
        assert span.context.trace_flags == dask_spans.SAMPLED and span.context.trace_id == TRACE, span.name
        assert span.status.status_code is StatusCode.UNSET, span.name
