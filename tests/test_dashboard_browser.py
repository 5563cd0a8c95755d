"""The dashboard in a real browser: Debian's headless chromium, driven over the Chrome DevTools
protocol (a websocket, through aiohttp, which the viewer already needs: no driver, no extra package).

A real Dask run under evlog-instrument exports to `evlog serve`; the page must show Gantt bars and
line plots, a click on a bar must show that task's story, new data must arrive live, and the page
must reconnect by itself when the server restarts. A 100,000-span run folder must render (aggregated,
saying so). Marked browser and slow: CI installs chromium (.ci/run); here it is skipped without it.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,2000",
]


class Browser:
    """A headless chromium and one page, driven synchronously over the DevTools protocol."""

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="evlog-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._id = 0
        self._pending: dict[int, asyncio.Future] = {}
        self.console: list[str] = []
        try:
            port = self._devtools_port()
            self._call(self._connect(port))
            self.cmd("Page.enable")
            self.cmd("Runtime.enable")
        except BaseException:
            self.close()
            raise

    def _devtools_port(self) -> int:
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            try:
                with open(path) as f:
                    first = f.readline().strip()
                if first:
                    return int(first)
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    async def _connect(self, port: int) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession()
        deadline = time.monotonic() + self.timeout
        while True:
            async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
                pages = [t for t in await r.json() if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            fut = self._pending.pop(data.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in data["params"]["args"]))
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
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.js(expression)
            except RuntimeError as e:
                last = e
            if last and not isinstance(last, Exception):
                return last
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what or expression}: last {last!r}; console: {self.console[-10:]}")

    def click(self, x: float, y: float) -> None:
        """A real mouse click at page coordinates (viewport)."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.cmd("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: str) -> None:
        data = self.cmd("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            if hasattr(self, "ws"):
                self._call(self.ws.close())
                self._call(self.session.close())
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)
