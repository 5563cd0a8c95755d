"""Frames: how every observed process (evlog.observed.records) and the console relay hand records to
the run's exporter process (evlog/exporter/process.py) over its Unix socket.

A frame is a header, ``HEADER`` = (bytes of the body, records in it), then the body:
``marshal.dumps((hello, kind, meta, records))``. hello is None or the process's resource attributes and
settings (the first frame of a connection, and any after the resource changed); kind names the builder
(evlog.wire.kinds); meta is the source's meta (a dict or None); records a list of tuples of atoms.
Standard library only (``_struct``, the C module, not struct), so the relay can import it under ``python -S``.
"""
import _struct

HEADER = _struct.Struct("<II")  # bytes of the body, records in it
