"""``a2sql ui`` as a process: it serves the pages on the port it is given and logs each
action done on stderr."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import a2sql
from bench.ui import free_port
from tests.ui.scenery import populate


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        body: bytes = answer.read()
        return body.decode()


def test_a2sql_ui_serves_and_logs_each_action(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    with a2sql.create_store(url, migrate=True) as store:
        populate(store)
    port = free_port()
    command = [sys.executable, "-m", "a2sql.cli", "ui", "--url", url, "--port", str(port)]
    server = subprocess.Popen([*command, "--allow-actions"], stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                page = _get(base + "/dead-letters")
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "a2sql ui did not answer"
                time.sleep(0.2)
        token = re.search(r'name="csrf" value="([^"]+)"', page)
        assert token
        form = {"session_id": "chat/1", "index": "2", "csrf": token.group(1)}
        request = urllib.request.Request(
            base + "/actions/retry", data=urllib.parse.urlencode(form).encode()
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert "retry chat/1 #2: requeued" in answer.read().decode()
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/ (actions allowed)" in stderr
    assert "a2sql ui: retry by 127.0.0.1: retry chat/1 #2: requeued" in stderr, stderr
    with a2sql.create_store(url) as store:
        assert store.read("chat/1")[1].failed_at is None
