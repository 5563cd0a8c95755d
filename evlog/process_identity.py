"""Who a process of the run is, as its resource says: its pid, its parent's pid and an instance id.

Shared by the observed processes (their resource, evlog/observed/resource.py, made afresh after a fork)
and the run's exporter process (its own resource, for the host samples): standard library only.
"""
from __future__ import annotations

import os


def process_attributes() -> dict:
    """process.pid, process.parent_pid and a new service.instance.id (a random UUID, as uuid.uuid4().hex,
    without importing uuid)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return {
        "process.pid": os.getpid(),
        "process.parent_pid": os.getppid(),
        "service.instance.id": b.hex(),
    }
