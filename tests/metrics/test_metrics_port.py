"""``a2sql worker --metrics-port``: a real worker process serving its metrics and the
store's gauges over HTTP, stopped by its PID; on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import a2sql
from a2sql import NewEvent, Store
from tests.cli.conftest import run_a2sql

APP = textwrap.dedent(
    """
    def handle(attempt):
        if attempt.event.type == "boom":
            raise ValueError("boom")


    async def ahandle(attempt):
        handle(attempt)
    """
)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65536:
            continue
        try:
            for port in range(first + 1, first + count):
                with socket.socket() as taken:
                    taken.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise AssertionError("no free ports")


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        body = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def scrape_until(
    port: int, process: subprocess.Popen[str], done: tuple[str, dict[str, str]]
) -> Samples:
    """Scrape until the sample ``done`` is there (the server starting, the worker catching
    up); fail if the worker exits meanwhile."""
    name, labels = done
    key = (name, tuple(sorted(labels.items())))
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, process.communicate()[1]
        try:
            found = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            found = {}
        if key in found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def settled(store: Store) -> bool:
    """``m-1`` processed; ``m-2``'s head (a dead letter) too, the one behind it blocked."""
    boom, _behind = store.read("m-2")
    return boom.failed_at is not None and all(e.processed_at for e in store.read("m-1"))


def start_worker(url: str, handler: str, cwd: Path, *more: str) -> subprocess.Popen[str]:
    (cwd / "app.py").write_text(APP)
    command = [sys.executable, "-m", "a2sql.cli", "worker", handler, "--url", url]
    return subprocess.Popen(
        [*command, "--prefix", "m-", "--max-failures", "1", "--poll-interval", "0.1", *more],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM to the worker's PID; its stderr once it exited 0."""
    os.kill(process.pid, signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return err


def refused(port: int) -> bool:
    try:
        scrape(port)
    except (urllib.error.URLError, ConnectionError):
        return True
    return False


@pytest.mark.parametrize("handler", ["app:handle", "app:ahandle"])
def test_a_worker_serves_its_metrics_and_the_store_gauges(
    url: str, tmp_path: Path, handler: str
) -> None:
    port = free_ports(1)
    with a2sql.create_store(url, migrate=True) as store:
        store.append("m-1", [NewEvent("ok"), NewEvent("ok")])
        store.append("m-2", [NewEvent("boom", lane="L"), NewEvent("ok", lane="L")])
        store.append("other", [NewEvent("ok")])  # not under the worker's prefix
        process = start_worker(url, handler, tmp_path, "--metrics-port", str(port))
        try:
            deadline = time.monotonic() + 30
            while not settled(store) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert settled(store)
            done = ("a2sql_worker_events_handled_total", {"type": "ok", "outcome": "completed"})
            found = scrape_until(port, process, done)
            err = stop(process)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert f"metrics on http://127.0.0.1:{port}/metrics" in err

    def value(name: str, **labels: str) -> float | None:
        return found.get((name, tuple(sorted(labels.items()))))

    assert value("a2sql_worker_events_handled_total", type="ok", outcome="completed") == 2
    assert value("a2sql_worker_events_handled_total", type="boom", outcome="dead_lettered") == 1
    assert value("a2sql_worker_handler_duration_seconds_count", type="ok") == 2
    assert value("a2sql_worker_claim_latency_seconds_count", type="boom") == 1
    # The store's gauges under the worker's prefix, read after the work settled: the
    # dead letter blocks its lane (one event waits behind it), nothing else is left.
    assert value("a2sql_store_dead_letters", prefix="m-") == 1
    assert value("a2sql_store_blocked_lanes", prefix="m-") == 1
    assert value("a2sql_store_ready_events", prefix="m-") == 0
    assert value("a2sql_store_oldest_ready_age_seconds", prefix="m-") == 0
    assert value("a2sql_store_claimed_events", prefix="m-") == 0
    assert value("process_resident_memory_bytes") is not None
    assert refused(port)  # stopped with the worker


def test_a_pool_serves_one_port_per_child_and_the_gauges_once(url: str, tmp_path: Path) -> None:
    port = free_ports(2)
    with a2sql.create_store(url, migrate=True) as store:
        store.append("m-1", [NewEvent("ok")])
        process = start_worker(
            url, "app:handle", tmp_path, "--processes", "2", "--metrics-port", str(port)
        )
        try:
            done = ("a2sql_store_ready_events", {"prefix": "m-"})
            first = scrape_until(port, process, done)
            second = scrape_until(port + 1, process, ("process_open_fds", {}))
            stop(process)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert ("a2sql_store_ready_events", (("prefix", "m-"),)) in first
    assert ("process_open_fds", ()) in second
    assert not any(name.startswith("a2sql_store_") for name, _ in second)
    assert refused(port) and refused(port + 1)


def test_a_port_taken_is_one_line_and_exit_2(url: str, tmp_path: Path) -> None:
    a2sql.create_store(url, migrate=True).close()
    (tmp_path / "app.py").write_text(APP)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = run_a2sql(
            "worker", "app:handle", "--url", url, "--metrics-port", str(port), cwd=tmp_path
        )
    assert ran.code == 2  # INVALID_ARGUMENT, as a bad option
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in ran.err
    assert "Traceback" not in ran.err


def test_a_pool_needs_a_port_for_each_process(tmp_path: Path) -> None:
    ran = run_a2sql(
        "worker", "app:handle", "--processes", "2", "--metrics-port", "65535", cwd=tmp_path
    )
    assert ran.code == 2
    assert "65535 leaves no port for each of 2 processes" in ran.err
