"""EVLOG_SPAN_PROCESSORS: ordinary span processors on every task span, in the run's exporter process.

Dask's and the pools' task spans are built in the run's exporter process (evlog/exporter/process.py),
not in the processes where the tasks ran, so a ``SpanProcessor`` added to a tracer provider there never
sees them (evlog's consumers and MultiEventLogs do: they are fed from the same records in that process,
evlog.processors). Processors named here see all of them, from every process of the run, in one place:
each entry is ``module:attribute``, a SpanProcessor class or a callable returning one, or returning a
log (a MultiEventLog, or any object with ``write(event)``), which then gets start and finish Events as
``set_log_sink`` gives them. Spans arrive finished, so ``on_end`` is called, not ``on_start``; a
processor's ``shutdown`` runs at the exporter process's exit, within its exit limit.
"""
from __future__ import annotations

import importlib

from evlog import notices
from evlog.builders.span_data import readable
from evlog.processors.multieventlog import LogDispatch


class RunProcessors:
    """The processors of EVLOG_SPAN_PROCESSORS; one that fails is reported once and left out."""

    def __init__(self, names):
        self.processors: list = []
        for name in names:
            proc = _make(name)
            if proc is not None:
                self.processors.append((name, proc))

    def on_end(self, spans) -> None:
        """``spans``: the builders' SpanData, given to the processors as the SDK's ReadableSpans."""
        if not self.processors:
            return
        spans = [readable(s) for s in spans]
        for name, proc in self.processors:
            for span in spans:  # one span that fails does not keep the others from the processor
                try:
                    proc.on_end(span)
                except Exception as exc:
                    notices.warn_once(f"span-processor-{name}", f"EVLOG_SPAN_PROCESSORS: {name} failed on a span: {exc!r}")

    def shutdown(self) -> None:
        for name, proc in self.processors:
            try:
                proc.shutdown()
            except Exception as exc:
                notices.warn_once(f"span-processor-end-{name}", f"EVLOG_SPAN_PROCESSORS: {name} failed to shut down: {exc!r}")


def _make(name: str):
    module, _, attr = name.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        made = obj()
    except BaseException as exc:  # an import that exits or raises anything must not stop the exporter process
        notices.warn_once(f"span-processor-make-{name}", f"EVLOG_SPAN_PROCESSORS: cannot make {name}: {exc!r}; "
                          "the run's spans are exported without it")
        return None
    if hasattr(made, "on_end"):
        return made
    if hasattr(made, "write"):
        return _log_processor(made)
    notices.warn_once(f"span-processor-make-{name}", f"EVLOG_SPAN_PROCESSORS: {name} made {type(made).__name__}, "
                      "neither a span processor (on_end) nor a log (write); left out")
    return None


def _log_processor(log):
    """A log fed as set_log_sink feeds it, with the timeline's process taken from each span's resource
    (the process the task ran in, not this one)."""

    class LogProcessor(LogDispatch):
        def shutdown(self) -> None:
            self.flush()
            for log in self.logs:
                close = getattr(log, "close", None)
                if close is not None:
                    close()

    d = LogProcessor(process_of=_pid)
    d.logs = (log,)
    return d


def _pid(span):
    return span.resource.attributes.get("process.pid") if span.resource is not None else None
