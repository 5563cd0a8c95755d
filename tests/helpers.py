"""Helpers for tests: run programs under evlog-instrument, wait for what they do, read a run folder back as
flat rows, parse a run folder's line with the stock protobuf JSON parser; `evlog serve` and `evlog view`
run as a user runs them, and the headless chromium that opens their dashboard; the programs several test
modules run. (Shared pytest fixtures are in conftest.py.)"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

PYTHON = sys.executable


def evlog_env(extra: dict | None = None, **kw) -> dict:
    """A clean environment for a child run: no stray OTEL_*/EVLOG_* from the developer's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    env.update({k: str(v) for k, v in kw.items()})
    return env


def evlog_cli(*args: str, cwd: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m evlog.cli *args`` (evlog report, view, ...), its output captured."""
    return subprocess.run([PYTHON, "-m", "evlog.cli", *args], capture_output=True, timeout=timeout, env=evlog_env(),
                          cwd=cwd)


def run_instrumented(code: str | list[str], env: dict | None = None, timeout: float = 120, cwd: str | None = None,
                     check: bool = False, stdin=None) -> subprocess.CompletedProcess:
    """Run ``python -c code`` (or a full argv list) under evlog-instrument; capture its output."""
    if isinstance(code, str):
        argv = [PYTHON, "-c", textwrap.dedent(code)]
    else:
        argv = list(code)
    cmd = [PYTHON, "-m", "evlog.launcher"] + argv
    with subprocess.Popen(cmd, env=env if env is not None else evlog_env(), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                          start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the program and all its children, not only the launcher
            p.communicate()
            raise
    proc = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout.decode(errors='replace')}\n"
                             f"stderr:\n{proc.stderr.decode(errors='replace')}")
    return proc


def start_instrumented(cmd: list[str], env: dict, log) -> subprocess.Popen:
    """Start ``cmd`` (e.g. a `dask scheduler`) under evlog-instrument in a session of its own, its output to ``log``."""
    return subprocess.Popen([PYTHON, "-m", "evlog.launcher"] + cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_processes(procs: list, timeout: float = 30) -> None:
    """SIGTERM each (a launcher passes it on), then wait; a session still there after ``timeout`` is killed."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def without_run_folder_notice(err: str) -> str:
    """stderr without the line evlog.configure() prints to say where its run folder is."""
    return "".join(line for line in err.splitlines(True)
                   if not line.startswith("evlog: writing telemetry to the run folder "))


def run_app(tmp, app: str, timeout: float = 240, **env) -> tuple[subprocess.CompletedProcess, str]:
    """Write ``app`` as ``tmp/app.py`` and run it under evlog-instrument (in ``tmp``, its run folder
    ``tmp/run``, ``env`` added); it must succeed. Returns the process and the run folder."""
    (tmp / "app.py").write_text(app)
    folder = tmp / "run"
    proc = run_instrumented([PYTHON, str(tmp / "app.py")], env=evlog_env(EVLOG_RUN_DIR=str(folder), **env),
                            cwd=str(tmp), timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return proc, str(folder)


def wait_until(fn, timeout: float = 30.0, what: str | Callable[[], str] = "", interval: float = 0.1):
    """Poll ``fn()`` every ``interval`` s until it returns something truthy (returned), for ``timeout`` s at
    most; then fail naming ``what`` was awaited (a string, or a callable giving one then) and ``fn``'s last value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    what = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout} s" + (f" waiting for {what}" if what else "") + f"; last {last!r}")


def run_files(path, signal: str = "") -> list[str]:
    """A run folder's files of ``signal`` (traces, logs, metrics; all when empty): ``*.jsonl.gz`` as the
    exporter process writes them, and ``*.jsonl`` as other writers (and older runs) do; sorted."""
    names = glob.glob(os.path.join(str(path), f"{signal}*.jsonl")) + glob.glob(os.path.join(str(path), f"{signal}*.jsonl.gz"))
    return sorted(names)


def run_file_lines(path) -> list[bytes]:
    """The lines of one run-folder file (gzip'd or not), each with its newline; a gzip file must be whole."""
    import gzip

    with open(path, "rb") as f:
        data = f.read()
    if str(path).endswith(".gz"):
        data = gzip.decompress(data)
    return data.splitlines(keepends=True)


def span_lines(path) -> list[bytes]:
    """A run folder's traces file as OTLP/JSON lines of one span each, each with its newline: cut at lines,
    as a plain file a writer is still appending to, it can end inside a computation (the exporter's own
    lines hold whole batches, and cuts between batches alone may fall between computations)."""
    import json

    return [json.dumps({"resourceSpans": [{**rs, "scopeSpans": [{**ss, "spans": [span]}]}]}).encode() + b"\n"
            for line in run_file_lines(path) for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"] for span in ss["spans"]]


def read_run_folder(path: str) -> dict:
    """{"spans": [...], "logs": [...], "metrics": [...]} decoded from every line of a run folder's files."""
    from evlog.data import otlp_decode

    out = {"spans": [], "logs": [], "metrics": []}
    for sig, key, fn in (("traces", "spans", otlp_decode.decode_spans), ("logs", "logs", otlp_decode.decode_logs),
                            ("metrics", "metrics", otlp_decode.decode_metrics)):
        for f in run_files(path, sig):
            for line in run_file_lines(f):
                out[key].extend(fn(json.loads(line)))
    return out


ID_BYTES = {"trace_id": 16, "span_id": 8, "parent_span_id": 8}  # OTLP's id fields and their lengths


def is_repeated(field) -> bool:
    """A protobuf field descriptor's repeatedness, on every protobuf version pyproject allows."""
    is_rep = getattr(field, "is_repeated", None)  # protobuf >= 5; `label` is gone in 7
    return is_rep if is_rep is not None else field.label == field.LABEL_REPEATED


def hex_ids_to_base64(obj, descriptor):
    """What the otlpjsonfile receiver's unmarshaler accepts and the plain protobuf JSON mapping does not:
    hex trace/span ids. Turn them into the mapping's base64 so json_format.Parse can read the line."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    fields = {f.json_name: f for f in descriptor.fields}
    out = {}
    for key, value in obj.items():
        field = fields[key]
        if field.type == FD.TYPE_MESSAGE:
            if is_repeated(field):
                value = [hex_ids_to_base64(v, field.message_type) for v in value]
            else:
                value = hex_ids_to_base64(value, field.message_type)
        elif field.type == FD.TYPE_BYTES and field.name in ID_BYTES:
            value = base64.b64encode(bytes.fromhex(value)).decode()
        out[key] = value
    return out


def gzip_members(lines: list[bytes], per: int = 3, cut: bool = True) -> list[bytes]:
    """gzip members of ``per`` lines each, as a run folder's writer makes one per flush; with ``cut``, the
    second member ends in the middle of a line, whose rest opens the third."""
    import gzip

    data = [b"".join(lines[i:i + per]) for i in range(0, len(lines), per)]
    if cut and len(data) >= 3:
        half = len(data[1]) - 10
        data[1], data[2] = data[1][:half], data[1][half:] + data[2]
    return [gzip.compress(d, compresslevel=1, mtime=0) for d in data]


def gzip_run_folder(src: str, dst: str, per: int = 3, cut: bool = True) -> dict[str, list[bytes]]:
    """Each ``*.jsonl`` of ``src`` as ``dst/<name>.gz`` in members (gzip_members); returns {gz path: members}."""
    os.makedirs(dst, exist_ok=True)
    out = {}
    for path in sorted(glob.glob(os.path.join(src, "*.jsonl"))):
        with open(path, "rb") as f:
            members = gzip_members(f.readlines(), per, cut)
        target = os.path.join(dst, os.path.basename(path) + ".gz")
        with open(target, "wb") as f:
            f.write(b"".join(members))
        out[target] = members
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_scheduler_file(path: str, scheduler: subprocess.Popen, log, timeout: float = 60) -> None:
    """Wait until a `dask scheduler` started with ``--scheduler-file path`` has written it; fail with its
    ``log`` (a path) if it exits first."""
    def written():
        assert scheduler.poll() is None, open(log, errors="replace").read()
        return os.path.exists(path)

    wait_until(written, timeout, f"the scheduler file {path}")


# ---------------------------------------------------------------------------------------------
# `evlog serve` and `evlog view`, as a user runs them


class Serve:
    """`python -m evlog.cli serve` on free loopback ports; stopped with SIGTERM."""

    def __init__(self, db: str, *extra: str, grpc: int | None = None, http: int | None = None):
        self.db = db
        self.grpc = grpc or free_port()
        self.http = http or free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evlog.cli", "serve", "--db", db, "--grpc-port", str(self.grpc),
             "--http-port", str(self.http), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"evlog serve exited: {self.out} {self.proc.stderr.read()}")
            self.out.append(line)
            if "dashboard at" in line:
                self.url = re.search(r"(http://\S+/)", line).group(1)
                return
        self.proc.kill()
        raise AssertionError("evlog serve did not start in 60 s")

    def get(self, path: str, headers: dict | None = None):
        req = urllib.request.Request(self.url + path, headers=headers or {})
        with urllib.request.urlopen(req, timeout=15) as r:
            return json.loads(r.read())

    def post(self, path: str, body: bytes, ctype: str) -> tuple[int, bytes]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", data=body, method="POST",
                                     headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait(self, pred, timeout: float = 30.0, what: str = ""):
        return wait_until(pred, timeout, what, interval=0.05)

    def spans(self) -> int:
        return self.get("api/overview")["summary"]["spans"]

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                out, err = self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate(timeout=10)
                raise AssertionError("evlog serve did not stop on SIGTERM")
            self.out.append(out)
            assert self.proc.returncode == 0, err
        return "".join(self.out)


class ServeProcess:
    """`python -m evlog.cli serve` on free loopback ports with its own --db; stderr kept in a file.

    ``stop()`` sends SIGTERM and returns (stdout, stderr); it fails the test if the server had died,
    did not stop, or exited with an error.
    """

    def __init__(self, tmp_path, *extra: str):
        self.db = str(tmp_path / "evlog.sqlite")
        self.grpc = free_port()
        self.http = free_port()
        self._err_path = tmp_path / "serve.stderr"
        self._err = open(self._err_path, "wb")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "evlog.cli", "serve", "--db", self.db, "--grpc-port", str(self.grpc),
             "--http-port", str(self.http), *extra],
            stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL, text=True)
        self.out: list[str] = []
        self.url = f"http://127.0.0.1:{self.http}/"
        timer = threading.Timer(90, self.proc.kill)  # bounds the readline below
        timer.start()
        try:
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    raise AssertionError(f"evlog serve exited before it was ready: {self.out} {self.stderr()}")
                self.out.append(line)
                if "dashboard at" in line:
                    break
        finally:
            timer.cancel()

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http}"

    def stderr(self) -> str:
        return self._err_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def get(self, path: str, timeout: float = 30) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            assert r.status == 200, (path, r.status)
            return json.loads(r.read())

    def overview(self) -> dict:
        return self.get("api/overview")

    def wait_for(self, pred, timeout: float = 60.0, what: str = ""):
        """Poll the server until ``pred(overview)`` is truthy (bounded); returns its value."""
        last = [{}]

        def got():
            last[0] = self.overview()
            return pred(last[0])

        return wait_until(got, timeout, lambda: f"{what} in evlog serve; last overview "
                          f"{json.dumps(last[0].get('summary'))} {json.dumps(last[0].get('receiver'))}")

    def stop(self) -> tuple[str, str]:
        try:
            assert self.alive(), f"evlog serve died: exit {self.proc.returncode}\n{self.stderr()}"
            self.proc.send_signal(signal.SIGTERM)
            try:
                out, _ = self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate(timeout=30)
                raise AssertionError("evlog serve did not stop on SIGTERM") from None
            assert self.proc.returncode == 0, f"evlog serve exited {self.proc.returncode}\n{self.stderr()}"
            return "".join(self.out) + out, self.stderr()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)
            self._err.close()


def start_view(path: str, *extra: str):
    """`python -m evlog.cli view path *extra`, once it says where its dashboard is: (process, URL)."""
    proc = subprocess.Popen([sys.executable, "-m", "evlog.cli", "view", path, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"dashboard at (http://\S+/)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise AssertionError(f"evlog view did not start: {lines} {proc.stderr.read()}")


def stop_view(proc) -> str:
    """SIGINT, as Ctrl+C; it must stop, with exit code 0. Returns its stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError("evlog view did not stop on SIGINT")
    assert proc.returncode == 0, err
    return err


@contextlib.contextmanager
def viewed(tmp, app: str, **env: str):
    """The run folder of ``app`` run under evlog-instrument (``env``: settings), shown by `evlog view`: its URL."""
    _proc, folder = run_app(tmp, app, **env)
    proc, url = start_view(folder, "--no-follow")
    try:
        yield url
    finally:
        stop_view(proc)


# ---------------------------------------------------------------------------------------------
# the dashboard in a real browser: Debian's headless chromium, driven over the Chrome DevTools protocol
# (a websocket, through aiohttp, which the viewer already needs: no driver, no extra package)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
#: the marks of a module of browser tests: skipped where chromium is not installed
NEEDS_CHROMIUM = [
    pytest.mark.browser, pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium (apt-get install chromium)"),
]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,2000",
]


class Chromium:
    """A headless chromium process; its DevTools port is ``port``. Pages (Browser) open in it, each in a
    browser context of its own."""

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="evlog-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            self.port = self._devtools_port()
        except BaseException:
            self.close()
            raise

    def _devtools_port(self) -> int:
        path = os.path.join(self.profile, "DevToolsActivePort")

        def port():
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            try:
                with open(path) as f:
                    first = f.readline().strip()
            except OSError:
                return None
            return int(first) if first else None

        return wait_until(port, self.timeout, "chromium's DevTools port", interval=0.05)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)


class Browser:
    """One page of a headless chromium, driven synchronously over the DevTools protocol: a page of
    ``chromium`` (a shared Chromium) in a browser context of its own (its own cookies, storage and cache:
    what another page did is not seen), or of a chromium of its own when none is given."""

    def __init__(self, timeout: float = 30.0, chromium: Chromium | None = None):
        self.timeout = timeout
        self.chromium = chromium
        self.own = chromium is None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._id = 0
        self._pending: dict[int, asyncio.Future] = {}
        self.console: list[str] = []
        self.context = self.target = None
        try:
            if self.chromium is None:
                self.chromium = Chromium(timeout)
            self._call(self._connect(self.chromium.port))
            self.cmd("Page.enable")
            self.cmd("Runtime.enable")
        except BaseException:
            self.close()
            raise

    async def _browser_cmd(self, method: str, **params) -> dict:
        """One command to the browser itself (not the page), over its own websocket."""
        async with self.session.get(f"http://127.0.0.1:{self.chromium.port}/json/version") as r:
            url = (await r.json())["webSocketDebuggerUrl"]
        async with self.session.ws_connect(url, max_msg_size=0) as ws:
            await ws.send_str(json.dumps({"id": 1, "method": method, "params": params}))
            async for msg in ws:
                data = json.loads(msg.data)
                if data.get("id") == 1:
                    if "error" in data:
                        raise RuntimeError(f"{method}: {data['error']}")
                    return data.get("result", {})
        raise RuntimeError(f"{method}: chromium closed the connection")

    async def _connect(self, port: int) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession()
        self.context = (await self._browser_cmd("Target.createBrowserContext"))["browserContextId"]
        self.target = (await self._browser_cmd("Target.createTarget", url="about:blank", browserContextId=self.context))["targetId"]
        self.ws = await self.session.ws_connect(f"ws://127.0.0.1:{port}/devtools/page/{self.target}", max_msg_size=0)
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            fut = self._pending.pop(data.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                args = data["params"]["args"]
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
            elif data.get("method") == "Runtime.exceptionThrown":
                self.console.append("EXCEPTION " + json.dumps(data["params"]["exceptionDetails"])[:500])

    async def _send(self, method: str, params: dict) -> dict:
        self._id += 1
        fut = self.loop.create_future()
        self._pending[self._id] = fut
        await self.ws.send_str(json.dumps({"id": self._id, "method": method, "params": params}))
        return await asyncio.wait_for(fut, self.timeout)

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout + 5)

    def cmd(self, method: str, **params) -> dict:
        r = self._call(self._send(method, params))
        if "error" in r:
            raise RuntimeError(f"{method}: {r['error']}")
        return r.get("result", {})

    def goto(self, url: str) -> None:
        self.cmd("Page.navigate", url=url)

    def js(self, expression: str):
        r = self.cmd("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JS error in {expression!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_js(self, expression: str, timeout: float = 30.0, what: str = ""):
        """Poll a JS expression until truthy (bounded); returns its value."""
        last = [None]

        def value():
            try:
                last[0] = self.js(expression)
            except RuntimeError as e:  # e.g. what it reads is not on the page yet
                last[0] = e
                return None
            return last[0]

        return wait_until(value, timeout, lambda: f"{what or expression} (last {last[0]!r}; "
                          f"console: {self.console[-10:]})")

    def click(self, x: float, y: float) -> None:
        """A real mouse click at page coordinates (viewport)."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.cmd("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: str) -> None:
        data = self.cmd("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    async def _disconnect(self) -> None:
        if hasattr(self, "ws"):
            await self.ws.close()
        if hasattr(self, "session"):
            try:
                if self.target and self.chromium.alive():
                    await self._browser_cmd("Target.closeTarget", targetId=self.target)
                if self.context and self.chromium.alive():
                    await self._browser_cmd("Target.disposeBrowserContext", browserContextId=self.context)
            finally:
                await self.session.close()

    def close(self) -> None:
        try:
            self._call(self._disconnect())
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if self.own and self.chromium is not None:
            self.chromium.close()


def element_center(browser, selector: str) -> dict:
    """{x, y} of the element's middle, once scrolled into view and two frames drawn: a mouse event sent
    right after a scroll can be hit-tested against the old scroll position and get lost."""
    return browser.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                      "e.scrollIntoView({block: 'center', inline: 'center'}); "
                      "return new Promise(ok => requestAnimationFrame(() => requestAnimationFrame(() => {"
                      "const r = e.getBoundingClientRect(); ok({x: r.left + r.width / 2, y: r.top + r.height / 2}); }))); })()")


def click_element(browser, selector: str) -> None:
    """A real click in the middle of the element (see element_center)."""
    c = element_center(browser, selector)
    browser.click(c["x"], c["y"])


def open_page(browser, url: str) -> None:
    """Open the dashboard at ``url``; wait for its first refresh and its first Gantt bars."""
    browser.goto(url)
    browser.wait_js("document.body.getAttribute('data-refreshes') >= 1", what="the first refresh")
    browser.wait_js("+document.getElementById('gantt').getAttribute('data-bars') > 0", what="Gantt bars")


def click_bar(browser, where: str) -> None:
    """Click the middle of the first Gantt bar for which the JS expression ``where`` (of b) holds."""
    i = browser.js(f"EV.gantt.data.bars.findIndex(b => {where})")
    assert i >= 0, where
    # after the scroll, two frames drawn: a mouse event sent at once can be hit-tested at the old position
    c = browser.js(f"document.getElementById('gantt').scrollIntoView({{block: 'center'}}); new Promise(ok => "
                   f"requestAnimationFrame(() => requestAnimationFrame(() => ok(EV.gantt.barCenter({i})))))")
    browser.click(c["x"], c["y"])


def shoot(browser, selectors: list[str], path: str) -> None:
    """A screenshot of the page from the top of the first element to the bottom of the last."""
    r = browser.js(f"""(() => {{ const a = document.querySelector({json.dumps(selectors[0])}).getBoundingClientRect(),
        b = document.querySelector({json.dumps(selectors[-1])}).getBoundingClientRect();
        return {{x: 0, y: a.top + scrollY - 6, width: document.documentElement.clientWidth,
                 height: b.bottom - a.top + 12, scale: 1}}; }})()""")
    data = browser.cmd("Page.captureScreenshot", format="png", clip=r, captureBeyondViewport=True)["data"]
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
    docs = os.environ.get("EVLOG_DOCS_SCREENSHOTS")  # docs/dashboard.md's pictures, taken again when set
    if docs and os.path.basename(path).startswith("dashboard-"):
        shutil.copy(path, os.path.join(docs, os.path.basename(path)))


def no_exceptions(browser) -> None:
    """The page threw no script error."""
    assert not [m for m in browser.console if m.startswith("EXCEPTION")], browser.console


# ---------------------------------------------------------------------------------------------
# programs that several test modules run

# `evlog report`'s graphs whose answers are known: a chain of 0.4 s tasks and a final task are the critical
# path, `work-17` the straggler, `boom-0` fails with ValueError, consume-* read an input held on the other
# worker (tests/test_report.py, the dashboard's report panel in tests/test_dashboard_gantt.py)
REPORT_APP = r'''
import json
import time

import dask
from distributed import Client, LocalCluster


def chain(x, d):
    time.sleep(d)
    return x + 1


def short(i):
    time.sleep(0.01)
    return i


def final(*xs):
    return sum(xs)


def work(i):
    time.sleep(0.6 if i == 17 else 0.03)
    return i


def boom(x):
    raise ValueError(f"bad input {x}")


def consume(data):
    return len(data)


if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        # 1. a chain of long tasks beside many short ones, all feeding one final task
        c = 0
        for i in range(4):
            c = dask.delayed(chain)(c, 0.4, dask_key_name=f"chain-{i}")
        shorts = [dask.delayed(short)(i, dask_key_name=f"short-{i}") for i in range(30)]
        print(dask.delayed(final)(c, *shorts, dask_key_name="final-0").compute())
        # 2. one task of 40 twenty times slower than the others
        print(sum(client.gather(client.map(work, range(40), key=[f"work-{i}" for i in range(40)]))))
        # 3. a failing task
        try:
            client.submit(boom, 42, key="boom-0").result()
        except ValueError as e:
            print("failed:", e)
        # 4. the input on one worker, the tasks restricted to the other
        a, b = sorted(client.scheduler_info()["workers"])
        data = client.scatter([b"x" * 20_000_000], workers=[a])[0]
        futs = [client.submit(consume, data, key=f"consume-{i}", workers=[b], allow_other_workers=False)
                for i in range(2)]
        print(sum(client.gather(futs)))
        print(json.dumps({"holder": a, "consumer": b}), flush=True)
        for step in range(5):
            print(json.dumps({"epoch": step, "loss": 1.0 / (step + 1)}), flush=True)
'''

# the task profile's program: tasks.py (PROFILE_TASKS, on the PYTHONPATH) with one hot function per prefix, and
# a Dask run of them (tests/test_profile.py, the flame graphs in tests/test_dashboard_profile.py)
PROFILE_TASKS = r'''
def slow_parse_inner(text):
    total = 0
    for _ in range(1000):
        for ch in text:
            total += ord(ch) % 7
    return total


def parse(i):
    return slow_parse_inner("x" * 3000 + str(i))


def crunch_numbers(n):
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1000003
    return acc


def crunch(i):
    return crunch_numbers(2_000_000 + i)
'''

PROFILE_DASK_APP = r'''
import json, os, sys, threading
from distributed import Client, LocalCluster
from tasks import crunch, parse

def threads():
    return sorted(t.name for t in threading.enumerate())

def own_samples():
    from evlog.observed import profiler
    return profiler.stats().get("samples", 0)

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
        a = client.gather(client.map(parse, range(n)))
        b = client.gather(client.map(crunch, range(n)))
        workers = client.run(threads)
        print(json.dumps({"parse": len(a), "crunch": len(b), "worker_threads": list(workers.values()),
                          "worker_pids": list(client.run(os.getpid).values()), "own_threads": threads(),
                          "own_samples": own_samples()}), flush=True)
'''
