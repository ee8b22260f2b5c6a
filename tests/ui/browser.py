"""What the browser tests share: where Chromium is, how it is started, an ASGI app
served under uvicorn in a thread, and skipping (failing under ``CI=true``) for want
of any of them. The fixtures are in tests/ui/conftest.py."""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from types import ModuleType
from typing import Any

import pytest

from tests.plugin import in_ci

# Headless and quiet: no sandbox (CI runs as root), no GPU, and nothing that reaches
# out to the network on its own (updates, sync, QUIC probes, first-run pages).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
VIEWPORT = {"width": 1280, "height": 800}
# Playwright's waits (a locator's click, an expect) give up after this many ms.
TIMEOUT_MS = 10_000


def unavailable(reason: str) -> None:
    """Skip for want of a browser, saying why; under ``CI=true`` fail instead."""
    if in_ci():
        pytest.fail(f"the browser tests must run in CI (CI=true) but {reason}", pytrace=False)
    pytest.skip(reason)


def chromium_path() -> str | None:
    """Debian's Chromium: ``A2SQL_CHROMIUM``, else ``chromium`` on PATH, else None."""
    given = os.environ.get("A2SQL_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium", path="/usr/bin")


def require(module: str, extra: str = "dev") -> ModuleType:
    """Import ``module``, or skip (fail under ``CI=true``) naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        unavailable(f"{module} is not installed ({error}): pip install -e '.[{extra}]'")
        raise AssertionError("unreachable") from error


class ServedApp:
    """An ASGI app under uvicorn in a thread of its own, on a socket bound here."""

    def __init__(self, app: Any, **config: Any) -> None:
        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        host, port = self.socket.getsockname()[:2]
        self.base_url = f"http://{host}:{port}"
        settings: dict[str, Any] = {
            "log_config": None,  # leave the test process's logging as it is
            "log_level": "warning",
            "access_log": False,
            "lifespan": "auto",
            # Open streams (server-sent events) are cut after this long at shutdown.
            "timeout_graceful_shutdown": 1,
            **config,
        }
        self.server = uvicorn.Server(uvicorn.Config(app, **settings))
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"uvicorn {port}", daemon=True)

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.socket])
        except BaseException as error:  # reported by start() or stop()
            self.error = error

    def start(self, timeout: float = 10.0) -> str:
        """Start serving; return the base URL once a request gets an answer."""
        self.thread.start()
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None or not self.thread.is_alive():
                raise RuntimeError(f"uvicorn did not start: {self.error!r}")
            if self.server.started and self._answers():
                return self.base_url
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn at {self.base_url} did not answer in {timeout} s")
            time.sleep(0.02)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/", timeout=2):
                return True
        except urllib.error.HTTPError:  # any status is an answer
            return True
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(timeout)
        self.socket.close()
        if self.thread.is_alive():
            raise RuntimeError(f"uvicorn at {self.base_url} did not stop in {2 * timeout} s")
        if self.error is not None:
            raise RuntimeError(f"uvicorn at {self.base_url} failed: {self.error!r}")
