"""The embedded default: the run's exporter processes append OTLP/JSON lines to the shared run folder.

One file per signal and writing process (traces-<pid>.jsonl.gz, logs-<pid>.jsonl.gz,
metrics-<pid>.jsonl.gz: the run's exporter process on each host, or another writer of the same folder),
opened O_APPEND by the process that writes it (re-opened after a fork). Each export request is one
line, compressed as a gzip member of its own and written in one write: a gzip file may be a series of
members (RFC 1952), so the file stays one gzip stream that ``zcat``, Python's gzip module and the
Collector's otlpjsonfile receiver (``compression: gzip``) read whole, and a file cut by SIGKILL or
``os._exit`` reads up to its last whole member. No line is torn or interleaved, whatever the other
processes do. A full or read-only disk is reported once; what cannot be written by the end of the run is
dropped and counted, the program goes on.

Level 3: zlib's fastest levels (1 to 3) cost the same CPU here, and 3 writes the smallest files of
them (a Dask run's spans: 94 bytes per graph task for about 3.4 us of CPU; level 6 writes 74 bytes
for twice the CPU, on the export thread, while the program runs). Every field of every span is kept:
what repeats from span to span (keys, names, attribute names) costs little once compressed.
"""
from __future__ import annotations

import os
import zlib

from evlog import notices
from evlog.exporter import otlp_json
from evlog.text import utf8

_dumps = otlp_json.dumps
LEVEL = 3
SUFFIX = ".jsonl.gz"


def member(data: bytes, level: int = LEVEL) -> bytes:
    """``data`` as one whole gzip member."""
    z = zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: a gzip header and trailer (CRC-32, size)
    return z.compress(data) + z.flush()


class RunFolderWriter:
    """Appends whole lines, one gzip member each, to ``<run_dir>/<signal>-<pid>.jsonl.gz``."""

    def __init__(self, run_dir: str | None, signal: str):
        if not run_dir:  # refused here, once (the exporter process says so), rather than failing every export
            raise ValueError(f"no run folder is set (EVLOG_RUN_DIR) to write {signal} to")
        self.run_dir = run_dir
        self.signal = signal
        self._fd = -1
        self._pid = -1

    def _open(self) -> int:
        pid = os.getpid()
        if self._pid != pid:
            self._fd = -1  # a forked child must not share its parent's file
            self._pid = pid
        if self._fd < 0:
            os.makedirs(self.run_dir, mode=0o700, exist_ok=True)
            path = os.path.join(self.run_dir, f"{self.signal}-{pid}{SUFFIX}")
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    def write(self, request: dict) -> bool:
        return self.write_text(_dumps(request))

    def write_text(self, text: str) -> bool:
        """Append ``text`` (one JSON document) as one line."""
        data = member(utf8(text + "\n"))  # a lone surrogate as U+FFFD: else readers skip the line whole
        try:
            fd = self._open()
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            return True
        except OSError as exc:
            if not (os.environ.get("EVLOG_CONFIG_REPORTED") and not os.path.isdir(self.run_dir)):  # else said at start
                notices.warn_once(
                    f"runfolder-{exc.errno}",
                    f"cannot write to the run folder {self.run_dir}: {exc.strerror or exc}; "
                    "telemetry is dropped and counted, the program goes on",
                )
            return False  # the exporter process tries again later; what is left at the end is counted

    def close(self) -> None:
        if self._fd >= 0 and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = -1


def span_exporter(run_dir: str):
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class RunFolderSpanExporter(SpanExporter):
        def __init__(self):
            self.writer = RunFolderWriter(run_dir, "traces")

        def export(self, spans):
            ok = self.writer.write_text(otlp_json.encode_spans_text(spans))
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

        def shutdown(self):
            self.writer.close()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return RunFolderSpanExporter()


def log_exporter(run_dir: str):
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class RunFolderLogExporter(LogRecordExporter):
        def __init__(self):
            self.writer = RunFolderWriter(run_dir, "logs")

        def export(self, batch):
            ok = self.writer.write(otlp_json.encode_logs(batch))
            return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

        def shutdown(self):
            self.writer.close()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return RunFolderLogExporter()


def metric_exporter(run_dir: str):
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class RunFolderMetricExporter(MetricExporter):
        def __init__(self):
            super().__init__()
            self.writer = RunFolderWriter(run_dir, "metrics")

        def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
            ok = self.writer.write(otlp_json.encode_metrics(metrics_data))
            return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
            self.writer.close()

    return RunFolderMetricExporter()
