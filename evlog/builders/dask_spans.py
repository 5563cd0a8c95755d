"""What every Dask span built in the exporter process shares: its scope, unset status and flags."""
from __future__ import annotations

from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode, TraceFlags

from evlog.version import __version__
from evlog.wire.dask import SCOPE_NAME

SCOPE = InstrumentationScope(SCOPE_NAME, __version__)
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSET = Status(StatusCode.UNSET)
