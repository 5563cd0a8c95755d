"""Starting and ending the run's exporter process (evlog/exporter/process.py) from the launcher or a process.

Light on purpose (the launcher imports it): only os, sys and the C socket module.
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # True for a type checker only: typing is not imported here
if TYPE_CHECKING:
    import _socket

ENV = "EVLOG_EXPORTER"  # the exporter socket's abstract name, inherited by every process of the run
LISTEN_FD, CONTROL_FD = 3, 4  # in the exporter process: its listening socket and its control pipe
TOLD_FD = 5  # and, started by the launcher (TOLD_ARG), the pipe it tells on: LISTENING, then ACCEPTED
TOLD_ARG = "--tell"
LISTENING, ACCEPTED = b"r", b"a"  # it listens; it accepted its first connection (then it closes the pipe)
LINGER = 1.0  # seconds, after the control pipe closed, for connected processes to send their last records
EXIT_TIMEOUT = 5.0  # seconds the exporter process then exports (1 s once the collector has failed)


def listen(env: dict) -> tuple[str, _socket.socket]:
    """Bind a new exporter socket; returns its address (for EVLOG_EXPORTER) and the listening socket.
    Connections wait in its backlog until ``spawn`` starts the process that accepts them."""
    import _socket  # the C module: the launcher pays for nothing more

    addr = f"evlog-{env.get('EVLOG_RUN_ID') or os.urandom(8).hex()}-{os.getpid()}-{os.urandom(4).hex()}"
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    listener.bind("\0" + addr)
    listener.listen(128)
    return addr, listener


def spawn(listener: _socket.socket, env: dict, site_dir: str | None = None,
          told: int | None = None) -> tuple[int, int]:
    """Start the exporter process on ``listener``; returns the write end of its control pipe (close it,
    or exit, to end the exporter process) and its pid. ``told``: a pipe's write end, where the process
    writes LISTENING and ACCEPTED."""
    r, w = os.pipe()
    child_env = dict(env)
    if site_dir is None:
        site_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "observed", "site")
    path = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != site_dir]
    child_env["PYTHONPATH"] = os.pathsep.join(path)
    child_env.pop("EVLOG_OWNER_PID", None)
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        # its stdout is the program's original one only for a console exporter (OTEL_*_EXPORTER=console)
        out = [] if _console(child_env) else [(os.POSIX_SPAWN_DUP2, devnull, 1)]
        try:
            tell = [] if told is None else [(os.POSIX_SPAWN_DUP2, told, TOLD_FD)]
            pid = os.posix_spawn(sys.executable,
                                 [sys.executable, "-m", "evlog.exporter.process", *([TOLD_ARG] if tell else [])],
                                 child_env, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0), *out,
                                                          (os.POSIX_SPAWN_DUP2, listener.fileno(), LISTEN_FD),
                                                          (os.POSIX_SPAWN_DUP2, r, CONTROL_FD), *tell])
        finally:
            os.close(devnull)
    finally:
        os.close(r)
    return w, pid


def _console(env: dict) -> bool:
    """Does a signal go to the console exporter (which prints on stdout)?"""
    return any("console" in (env.get(f"OTEL_{s}_EXPORTER") or "").lower() for s in ("TRACES", "METRICS", "LOGS"))


def start(env: dict) -> tuple[str, int, int]:
    """``listen`` and ``spawn`` at once: address, control pipe, pid (a process without the launcher)."""
    addr, listener = listen(env)
    try:
        w, pid = spawn(listener, {**env, ENV: addr})
    finally:
        listener.close()
    return addr, w, pid


def kill(control: int, pid: int) -> None:
    """End the exporter process ``pid`` at once: one no process connected to, which holds nothing."""
    os.close(control)
    _kill(pid)


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def end(control: int, pid: int) -> bool:
    """Close the control pipe of the exporter process ``pid`` and wait for its flush: it bounds its own
    time (LINGER + EXIT_TIMEOUT); past that and a second more, it is killed (then True)."""
    import time

    os.close(control)
    deadline = time.monotonic() + LINGER + EXIT_TIMEOUT + 1.0
    pidfd = _pidfd(pid)  # readable when the process ends: the launcher's wait ends with it, not at a poll
    try:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return False
            except ChildProcessError:
                return False
            if pidfd is None:
                time.sleep(0.02)
            else:
                import select

                select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
    finally:
        if pidfd is not None:
            os.close(pidfd)
    _kill(pid)
    return True


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (Linux 5.3 and later), or None: then ``end`` polls."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
