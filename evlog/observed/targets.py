"""Registry of evlog's instrumentations: one module per target, activated on import of the target.

Each entry maps an instrumentation name (as used in OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, with or
without the ``evlog_`` prefix) to the module whose import triggers it and the class that patches it.
An instrumentor class has ``instrument()`` and ``uninstrument()``, both idempotent; ``instrument()`` is
called once the target module is imported, so nothing is paid by a process that never imports it.
"""
from __future__ import annotations

# name: (module whose import activates it, "module:Class" of the instrumentor)
TARGETS: dict[str, tuple[str, str]] = {
    "dask": ("distributed", "evlog.observed.dask.instrumentor:DaskInstrumentor"),
    "futures": ("concurrent.futures", "evlog.observed.pools.futures:FuturesInstrumentor"),
    "multiprocessing": ("multiprocessing", "evlog.observed.pools.multiprocessing:MultiprocessingInstrumentor"),
    "torch_elastic": ("torch.distributed.elastic", "evlog.observed.torch_elastic:TorchElasticInstrumentor"),
    "logging": ("logging", "evlog.observed.python_logging:LoggingInstrumentor"),
}

# name: the target's submodules its instrumentor hooks when they are imported (boot.watch()es them)
SUBMODULES: dict[str, tuple[str, ...]] = {
    "futures": ("concurrent.futures.thread", "concurrent.futures.process"),
    "multiprocessing": ("multiprocessing.pool",),
}
