"""A headless Chromium driven over the DevTools protocol, for the viewer's tests.

``Browser()`` starts Debian's ``chromium`` with a fresh profile and
``--remote-debugging-port=0``, reads the websocket address it prints on
stderr, and opens one page. ``page.open(url)`` returns once the load event
has fired; ``page.js(expr)`` evaluates an expression and returns its value;
console messages, uncaught exceptions and log errors are collected in
``page.errors``.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

__all__ = ["CHROMIUM", "Browser"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--remote-debugging-port=0", "--window-size=1200,900",
)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, which write nothing, aside)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while being read
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _end_group(pgid: int, timeout: float = 10.0) -> None:
    """Kill what is left of chromium's process group and wait until none of it runs."""
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.02)  # polls the group's exit: nothing notifies a non-parent of it


class Browser:
    """A headless Chromium with one page; use as a context manager."""

    def __init__(self) -> None:
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed")
        self._profile = tempfile.TemporaryDirectory(prefix="ors-gym-chromium-")
        self._proc = subprocess.Popen(
            [CHROMIUM, *_FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,  # its own process group: close() ends its helpers too
        )
        assert self._proc.stderr is not None
        address = None
        for line in self._proc.stderr:  # blocks until chromium says where it listens
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                address = m.group(1)
                break
        if address is None:
            self.close()
            raise RuntimeError("chromium exited before opening its DevTools port")
        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(connect(address, max_size=None))
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self.events: list[dict[str, Any]] = []
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._send("Target.attachToTarget",
                                   {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def _send(self, method: str, params: dict[str, Any] | None = None,
              session: str | None = None) -> dict[str, Any]:
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        while True:
            reply = json.loads(self._ws.recv())
            if reply.get("id") == number:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self._event(reply)

    def _event(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        method, params = event.get("method"), event.get("params") or {}
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(f"console: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            self.errors.append(f"exception: {params.get('exceptionDetails')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')}")

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a DevTools command to the page; its result."""
        return self._send(method, params, self._session)

    def open(self, url: str) -> None:
        """Navigate to ``url`` and return once its load event has fired."""
        seen = len(self.events)
        self.send("Page.navigate", {"url": url})
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events[seen:]):
            self._event(json.loads(self._ws.recv()))

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression evaluated in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, full_page: bool = True) -> bytes:
        """The page as PNG bytes (the whole page, not just the viewport, by default)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        return base64.b64decode(self.send("Page.captureScreenshot", params)["data"])

    def close(self) -> None:
        """Close the connection, end chromium (the process this object started) and its profile."""
        stack = getattr(self, "_stack", None)
        if stack is not None:
            stack.close()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stderr is not None:
            self._proc.stderr.close()
        _end_group(self._proc.pid)  # helpers outlive the browser and still write the profile
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
