"""Freed memory back to the system after a big read: glibc's ``malloc_trim``.

`evlog view` reads a run folder with several threads (the folder's reader, the store's writer, the
server's), and glibc gives each thread an arena of its own; memory those threads free inside an arena
stays the process's until ``malloc_trim`` hands its free pages back. Reading a 157k-task run folder
leaves about 60 MB so held (an RSS of 127 MB after the read, 67 MB once trimmed), and a report panel
made next stacks its own peak on top of it. Dask does the same for its workers (distributed's
"Memory not released back to the OS").

``give_back()`` costs a few milliseconds; it does nothing where the C library has no ``malloc_trim``
(musl, macOS, Windows).
"""
from __future__ import annotations

import ctypes

_trim = None  # libc's malloc_trim, once looked up; False where there is none


def give_back() -> None:
    """Return the free pages of every malloc arena to the system (glibc), else nothing."""
    global _trim
    if _trim is None:
        try:
            _trim = ctypes.CDLL(None).malloc_trim  # the symbols the process has loaded: its C library's among them
            _trim.argtypes = [ctypes.c_size_t]
            _trim.restype = ctypes.c_int
        except (OSError, AttributeError, TypeError):  # no such symbol (not glibc), or no dlopen of the process
            _trim = False
    if _trim:
        _trim(0)
