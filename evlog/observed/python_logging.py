"""Python logging -> OTel log records: the program's records, and Dask's own warnings and errors.

A record at ``settings.python_logging``'s level or above (WARNING by default; OTEL_PYTHON_LOG_LEVEL;
OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED=false turns it off) becomes an OTel log record through
this process's LoggerProvider (evlog/observed/own_logs.py: without the SDK until the program makes logs
of its own) once a logger hands it to its handlers (``Logger.callHandlers``: the
logger's level and filters have let it through), in the thread where it was logged: it carries the trace
and span ids current then. A Dask task's record is in its execute span; a worker's "Compute Failed"
error is logged while the failing task's context is current (dask_worker.execute).

Nothing is added to the program's loggers, unlike the SDK's LoggingHandler on the root logger: with a
handler there, ``logging.basicConfig()`` would do nothing and ``logging.lastResort`` would no longer print
an unconfigured program's warnings. The method is wrapped instead, and the program's handlers run as
before, after the record is taken. The wrapper is a plain function (``functools.wraps``: its name,
docstring and signature are the method's), not wrapt's: logging is imported by nearly every process
(OpenTelemetry's API imports it), and wrapt 2.5 imports asyncio and importlib.metadata, about 30 ms of
start-up a process that uses nothing else of it would pay. OpenTelemetry's and evlog's own loggers are
left out (they report evlog's problems, once, on stderr).

The record is translated as the SDK's LoggingHandler does it: body the message, severity from the
level, the instrumentation scope named for the logger, attributes code.file.path, code.function.name,
code.line.number, exception.type/.message/.stacktrace, and the record's extra attributes. With console
capture in mode ``enabled`` the same text also reaches stdout or stderr through the program's handlers:
those lines are marked (console.logged), and the console's builder drops them, so no text arrives twice;
the record then carries ``log.iostream`` (stdout or stderr), as the console's lines do.
"""
from __future__ import annotations

import functools
import logging
import sys
import threading
import time
import traceback

from evlog import notices

_SKIP = ("opentelemetry", "evlog")
_RESERVED = frozenset(("asctime", "args", "created", "exc_info", "exc_text", "filename", "funcName", "getMessage",
                       "message", "levelname", "levelno", "lineno", "module", "msecs", "msg", "name", "pathname",
                       "process", "processName", "relativeCreated", "stack_info", "thread", "threadName",
                       "taskName"))
_TEXT = {"WARNING": "WARN", "CRITICAL": "FATAL"}  # OTel's severity texts (the SDK's LoggingHandler's)
_inside = threading.local()  # a record logged while one is being taken (by the SDK itself): not taken


def severity(levelno: int) -> int:
    """The OTel SeverityNumber value of a Python level (the mapping of the SDK's std_to_otel)."""
    if levelno < 10:
        return 0
    if levelno > 53:
        return 24
    base, top = ((10, 5), (20, 9), (30, 13), (40, 17), (50, 21))[min(4, levelno // 10 - 1)]
    return min(top + (levelno - base), top + 3)


class _Taker:
    """Takes the records at ``level`` and above, from every logger but OpenTelemetry's and evlog's."""

    def __init__(self, level: int, capture_enabled: bool):
        self.level = level
        self.capture_enabled = capture_enabled
        self.loggers: dict = {}

    def take(self, record: logging.LogRecord, logger: logging.Logger) -> None:
        if record.levelno < self.level or record.name.startswith(_SKIP) or getattr(_inside, "on", False):
            return
        if sys.is_finalizing():
            # a record from a finalizer as the interpreter shuts down (a library's object collected late):
            # the program's records have been shipped at exit and no import can run now, so it goes only
            # where the program's own handlers send it
            return
        _inside.on = True
        try:
            stream = None
            if self.capture_enabled:
                from evlog.observed import console

                stream = console.logged(record, logger)
            self._emit(record, stream)
        except Exception as exc:
            notices.warn_once("python-logging", f"a Python logging record could not be exported: {exc!r}")
        finally:
            _inside.on = False

    def _emit(self, record: logging.LogRecord, stream: str | None) -> None:
        out = self.loggers.get(record.name)
        if out is None:
            from evlog.observed.own_logs import Logger  # no SDK until the program makes logs of its own

            if len(self.loggers) > 4096:
                self.loggers.clear()
            out = self.loggers[record.name] = Logger(record.name, None)

        attrs = {k: v for k, v in vars(record).items() if k not in _RESERVED}
        attrs["code.file.path"] = record.pathname
        attrs["code.function.name"] = record.funcName
        attrs["code.line.number"] = record.lineno
        if stream is not None:  # its text is on the captured console too (and exported once: this record)
            attrs["log.iostream"] = stream
        if record.exc_info and record.exc_info is not True:
            etype, value, tb = record.exc_info
            if etype is not None:
                attrs["exception.type"] = etype.__name__
            if value is not None and value.args:
                attrs["exception.message"] = str(value.args[0])
            if tb is not None:
                attrs["exception.stacktrace"] = "".join(traceback.format_exception(etype, value, tb))
        if not record.args and not isinstance(record.msg, str):
            body = record.msg if isinstance(record.msg, (bool, int, float, bytes, list, tuple, dict)) else str(record.msg)
        else:
            body = record.getMessage()
        out.emit(timestamp=int(record.created * 1e9), observed_timestamp=time.time_ns(),
                 severity_number=severity(record.levelno),
                 severity_text=_TEXT.get(record.levelname, record.levelname), body=body, attributes=attrs)


_taker: list = []  # the _Taker while instrumented


def _wrap(original):
    """``Logger.callHandlers`` that takes the record first."""

    @functools.wraps(original)
    def callHandlers(self, record):  # the method's own name
        try:
            taker = _taker[0] if _taker else None
            if taker is not None:
                taker.take(record, self)
        except Exception as exc:
            notices.warn_once("python-logging", f"a Python logging record could not be exported: {exc!r}")
        return original(self, record)

    return callHandlers


class LoggingInstrumentor:
    """instrument() wraps logging.Logger.callHandlers; uninstrument() puts it back. Both idempotent."""

    _original = None

    def instrument(self) -> None:
        from evlog import config

        settings = config.get()
        level = settings.python_logging
        if level is None or LoggingInstrumentor._original is not None:
            return
        _taker[:] = [_Taker(level, settings.capture == "enabled")]
        LoggingInstrumentor._original = logging.Logger.__dict__["callHandlers"]
        logging.Logger.callHandlers = _wrap(LoggingInstrumentor._original)

    def uninstrument(self) -> None:
        original = LoggingInstrumentor._original
        if original is None:
            return
        logging.Logger.callHandlers = original
        LoggingInstrumentor._original = None
        _taker.clear()
