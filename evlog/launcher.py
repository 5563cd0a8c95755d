"""evlog-instrument COMMAND [ARGS...]: run COMMAND with evlog set up in it and in every Python child.

The launcher is a small supervisor and imports almost nothing (every run pays its start-up): it puts
evlog's sitecustomize first on PYTHONPATH, marks the run (EVLOG_RUN_ID) and its owner (the launched
process's pid, EVLOG_OWNER_PID), forks and execs COMMAND, forwards signals, passes the exit status
through and prints the summary. The owner, once it is a Python process, prepares the run (evlog/observed/run.py);
for a command that is not Python (a shell script, ...) the launcher prepares it itself.
"""
from __future__ import annotations

import _signal as signal  # the C module: "signal" would import enum for nothing here
import os
import sys

USAGE = """usage: evlog-instrument COMMAND [ARGS...]

Runs COMMAND (e.g. `python app.py`) with OpenTelemetry set up by evlog in it and in every Python
process it starts. With no OTEL_EXPORTER_OTLP_ENDPOINT and no OTEL_TRACES_EXPORTER, telemetry goes to
a run folder under ./evlog-runs/ (see `evlog view`). Configuration: OTEL_* and EVLOG_* variables,
and ./evlog.yaml or the file named by EVLOG_CONFIG.
"""
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "observed", "site")
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def service_from_command(argv: list[str]) -> str:
    """The script's name: `python app.py` -> app, `python -m pkg.mod` -> pkg.mod, `dask worker` -> dask."""
    exe = os.path.basename(argv[0])
    if not _python_name(exe):
        return exe
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("-m") and len(a) > 2:
            return a[2:]
        if a.startswith("-c"):
            return "python"
        if a in ("-W", "-X") and i + 1 < len(args):
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        base = os.path.basename(a)
        return (base[:-3] if base.endswith(".py") else base) or "python"
    return "python"


def _python_name(name: str) -> bool:
    version = name[6:] if name.startswith("python") else name[4:] if name.startswith("pypy") else None
    return version is not None and all(c.isdigit() or c == "." for c in version)


def _is_python(exe: str) -> bool:
    """A Python interpreter, or a script whose #! line names one (torchrun, dask, ...)."""
    if _python_name(os.path.basename(exe)):
        return True
    try:
        with open(exe, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def _which(cmd: str, path: str | None) -> str | None:
    if os.sep in cmd:
        return cmd if os.path.exists(cmd) else None
    for d in (path or os.defpath).split(os.pathsep):
        p = os.path.join(d or ".", cmd)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        print("evlog-instrument 0.1.0")
        return 0
    env = dict(os.environ)
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([SITE_DIR] + path)
    exe = _which(argv[0], env.get("PATH"))
    if exe is None:
        sys.stderr.write(f"evlog-instrument: {argv[0]}: command not found\n")
        return 127
    stats_file = None
    if not env.get("EVLOG_RUN_ID"):  # a nested evlog-instrument joins the outer run and says nothing
        run_id = os.urandom(16).hex()
        env["EVLOG_RUN_ID"] = run_id
        env.setdefault("EVLOG_SERVICE_NAME", service_from_command(argv))
        from evlog import stats

        stats_file = stats.new_file(run_id, os.environ.get("TMPDIR") or "/tmp")[0]  # its memfd stays open till exit
        env["EVLOG_STATS_FILE"] = stats_file
        if not _is_python(exe):
            _prepare_here(env)
    return _supervise(exe, argv, env, stats_file)


def _prepare_here(env: dict) -> None:
    """The command is not Python, so no owner process will prepare the run: do it here."""
    from evlog import config
    from evlog.observed import run

    run.prepare(config.load(env), env, env["EVLOG_SERVICE_NAME"])


def _in_foreground_of_a_terminal() -> bool:
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:
            continue
    return False


def _listen(env: dict):
    """The run's exporter socket (EVLOG_EXPORTER), bound before the program starts, so every process of
    the run finds it. None if it cannot be bound: processes then start their own."""
    try:
        from evlog.wire import endpoint as exporter

        addr, listener = exporter.listen(env)
        env[exporter.ENV] = addr
        return listener
    except Exception as exc:
        sys.stderr.write(f"evlog: no exporter socket ({exc}); each process starts its own exporter\n")
        return None


def _wait(pid: int, exporter: _Exporter | None) -> int:
    """The program's wait status, once it has exited; meanwhile, what the exporter process tells."""
    import select

    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    old_fd = signal.set_wakeup_fd(w)  # SIGCHLD wakes the select below: no polling, no latency at exit
    old_handler = signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        while exporter is not None and exporter.told is not None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            try:
                ready = select.select([r, exporter.told], [], [])[0]
            except (InterruptedError, KeyboardInterrupt):
                continue
            if r in ready:
                _drain(r)
            if exporter.told in ready:
                exporter.hear()
    finally:
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGCHLD, old_handler)
        os.close(r)
        os.close(w)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except (InterruptedError, KeyboardInterrupt):
            continue


def _drain(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 512):
                return
        except (BlockingIOError, InterruptedError):
            return


def _die_with(launcher: int) -> None:
    """In the child before exec: die by SIGKILL when the launcher dies (PR_SET_PDEATHSIG, kept across
    exec), as a program the launcher exec'd would die with it. If the launcher died before the setting
    took, the child is already an orphan: it dies now."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # not Linux: the program outlives a killed launcher, as before
        return
    if os.getppid() != launcher:
        os.kill(os.getpid(), signal.SIGKILL)


RELAY_WAIT = 2.0  # seconds the launcher waits for the console relay of a program killed by a signal


def _await_relay(stats_file: str) -> None:
    """The program died by a signal (SIGKILL, a crash), so nothing made it wait for its console relay:
    the relay may still hold its last lines, not yet handed to the run's exporter process. Wait
    (RELAY_WAIT at most) until the relay is gone."""
    import time

    from evlog import stats

    relays = [r["relay"] for r in stats.read_all(stats_file) if type(r.get("relay")) is int]
    deadline = time.monotonic() + RELAY_WAIT
    while relays and time.monotonic() < deadline:
        relays = [p for p in relays if _running(p)]
        if relays:
            time.sleep(0.01)


class _Exporter:
    """The run's exporter process, started with the program, so that its start-up (an interpreter and the
    OTel SDK) runs beside the program's, not after the program's last records.

    It tells the launcher, on a pipe, when it listens (endpoint.LISTENING) and when it accepts its first
    connection (endpoint.ACCEPTED). Until it listens, the launcher keeps the socket too: a connection
    waiting in its backlog then says a process of the run connected. Once it listens, the socket is its
    alone, so that processes of the run find no exporter once it is gone. A run none of whose processes
    connected ends it at once, unheard: it holds nothing (``end``)."""

    def __init__(self, listener, env: dict):
        self.listener = listener  # the launcher's copy, until the exporter process listens
        self.started = None  # (control pipe, pid)
        self.told = None  # read end of the pipe the exporter process tells on
        self.listening = self.connected = False
        r, w = os.pipe()
        try:
            from evlog.wire import endpoint as exporter

            self.started = exporter.spawn(listener, env, SITE_DIR, told=w)
            self.told = r
            os.set_blocking(r, False)
        except Exception as exc:
            os.close(r)
            self._close_listener()
            sys.stderr.write(f"evlog: the exporter process could not start ({exc}); task telemetry is lost\n")
        finally:
            os.close(w)

    def hear(self) -> None:
        """What the exporter process told; its end of the pipe closed once it has told all."""
        try:
            data = os.read(self.told, 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        from evlog.wire.endpoint import ACCEPTED, LISTENING

        if LISTENING in data:
            self.listening = True
            self._close_listener()
        if ACCEPTED in data:
            self.connected = True
        if not data:  # told all, or gone
            os.close(self.told)
            self.told = None
            self._close_listener()

    def end(self) -> bool:
        """Wait for the exporter process's flush (True if it had to be killed); or, when it has not
        listened yet and no process connected, end it at once."""
        from evlog.wire import endpoint as exporter

        if self.started is None:
            return False
        if self.told is not None:
            self.hear()
        try:
            if self.connected or self.listening or self._waiting():
                return exporter.end(*self.started)
            exporter.kill(*self.started)
            return False
        finally:
            self._close_listener()
            if self.told is not None:
                os.close(self.told)

    def _waiting(self) -> bool:
        """A connection waiting in the socket's backlog (the exporter process has not listened yet)?"""
        import select

        return self.listener is not None and bool(select.select([self.listener], [], [], 0)[0])

    def _close_listener(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _running(pid: int) -> bool:
    """Is ``pid`` running (not gone, not a zombie waiting for its new parent to reap it)?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _supervise(exe: str, argv: list[str], env: dict, stats_file: str | None) -> int:
    listener = _listen(env) if stats_file else None
    launcher = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: becomes COMMAND, and owns the run under its own pid
        _die_with(launcher)
        try:
            env["EVLOG_OWNER_PID"] = str(os.getpid())
            os.execve(exe, argv, env)
        except PermissionError:
            os.write(2, f"evlog-instrument: {argv[0]}: permission denied\n".encode())
            os._exit(126)
        except OSError as exc:
            os.write(2, f"evlog-instrument: {argv[0]}: {exc.strerror}\n".encode())
            os._exit(126)

    if listener is not None:  # the host as the program starts: the exporter process's run start sample
        from evlog.exporter import host_samples

        env[host_samples.START_ENV] = host_samples.encode(host_samples.now())  # the launcher's env only

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    # In a terminal's foreground group, Ctrl-C and Ctrl-\ already reach COMMAND: forwarding would double them.
    keyboard = (signal.SIGINT, signal.SIGQUIT) if _in_foreground_of_a_terminal() else ()
    for s in _FORWARDED:
        if s in keyboard:
            continue
        try:
            signal.signal(s, forward)
        except (OSError, ValueError):
            pass
    exporter = _Exporter(listener, env) if listener is not None else None
    code = os.waitstatus_to_exitcode(_wait(pid, exporter))
    if code < 0 and stats_file:
        _await_relay(stats_file)
    exporter_killed = exporter.end() if exporter is not None else False
    if stats_file:
        try:
            from evlog.observed import run

            sys.stderr.write(run.summary(stats_file, -code if code < 0 else None, exporter_killed))
        except Exception as exc:
            sys.stderr.write(f"evlog: no summary ({exc})\n")
        if not stats_file.startswith("/proc/"):  # a memfd goes with the launcher
            try:
                os.unlink(stats_file)
            except OSError:
                pass
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
