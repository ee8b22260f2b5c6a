"""An ``AsyncStore`` on SQLite runs its transactions on the event loop's own thread
(a2sql.execution.threads), where a call could complete without ever suspending: a task looping
on it would starve every other task, timer and signal handler of the loop. Every
call lets the loop run at least once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import a2sql
from a2sql import AsyncStore, ClaimRef, Completion, NewEvent

DEADLINE_S = 60


def operations(store: AsyncStore) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """One of each kind of call, in an order where each finds what it needs."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    claims: list[ClaimRef] = []

    async def claim() -> None:
        result = await store.claim_available("s", holder="w", ttl_ms=60_000, limit=2)
        claims.extend(ClaimRef(e.index, e.attempt_count) for e in result.events)

    async def complete() -> None:
        first = claims.pop(0)
        await store.complete_attempt("s", index=first.index, attempt=first.attempt, events=[])

    async def release() -> None:
        await store.release_claims("s", holder="w", claims=claims)

    return [
        ("append", lambda: store.append("s", [NewEvent("t", n) for n in range(3)])),
        ("append a replay", lambda: store.append("r", [NewEvent("t", 0, id="same")])),
        ("read", lambda: store.read("s")),
        ("claim_available", claim),
        ("renew_claims", lambda: store.renew_claims("s", holder="w", claims=claims, ttl_ms=1)),
        ("complete_attempt", complete),
        ("release_claims", release),
        ("release_claims of nothing", lambda: store.release_claims("s", holder="w", claims=[])),
        ("complete_attempts of nothing", lambda: store.complete_attempts("s", [])),
        ("claim_next", lambda: store.claim_next(holder="w", ttl_ms=60_000)),
        ("claim_next finding nothing", lambda: store.claim_next(holder="w", ttl_ms=1, prefix="x")),
        ("complete_attempts", lambda: store.complete_attempts("s", [Completion(9, 1)])),
        ("read_state", lambda: store.read_state("s", "r")),
        ("put_snapshot", lambda: store.put_snapshot("s", "r", 1, {"n": 1})),
        (
            "presence.set",
            lambda: store.presence.set("ns", "p", {"f": 1}, at=at, seen=1, ttl_ms=60_000),
        ),
        (
            "presence.set of nothing",
            lambda: store.presence.set("ns", "p", {}, at=at, seen=1, ttl_ms=1),
        ),
        ("presence.read", lambda: store.presence.read("ns")),
        ("inspect.totals", lambda: store.inspect.totals()),
        ("inspect.session", lambda: store.inspect.session("s")),
        ("delete_session", lambda: store.delete_session("r")),
    ]


def test_every_sqlite_call_lets_the_loop_run(tmp_path: Path) -> None:
    """Before each kind of call a callback is scheduled on the loop: it has run when the
    call returns, whatever the call did (wrote, read, found nothing, failed)."""
    url = f"sqlite:///{tmp_path / 'a2.db'}"

    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        starved: list[str] = []
        async with a2sql.create_async_store(url, migrate=True) as store:
            for name, call in operations(store):
                ran: list[bool] = []
                loop.call_soon(ran.append, True)
                # complete_attempts of an event never claimed fails: still a call.
                with contextlib.suppress(a2sql.A2Error):
                    await call()
                if not ran:
                    starved.append(name)
        return starved

    assert asyncio.run(scenario()) == []


def test_a_task_looping_on_sqlite_calls_leaves_a_ticker_and_timers_running(
    tmp_path: Path,
) -> None:
    """A task appends and reads in a loop that awaits nothing else: a ticker task
    (``sleep(0)``) runs during each of its calls, and a timer due before a call has
    run by the end of the next one (the loop takes due timers after the callbacks
    already ready, the caller's among them)."""
    url = f"sqlite:///{tmp_path / 'a2.db'}"
    calls = 200

    async def scenario() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        async with a2sql.create_async_store(url, migrate=True) as store:
            await store.append("s", [NewEvent("t", 0)])
            task = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            between: list[int] = []
            timers_late = 0
            for n in range(calls):
                fired: list[bool] = []
                loop.call_later(0, fired.append, True)
                before = ticks
                await store.append("s", [NewEvent("t", n)])
                between.append(ticks - before)
                before = ticks
                await store.read("s", after_index=n)
                between.append(ticks - before)
                timers_late += not fired
            task.cancel()
        return between, timers_late

    between, timers_late = asyncio.run(scenario())
    assert between.count(0) == 0, (
        f"the ticker did not run across {between.count(0)} of {2 * calls} calls"
    )
    assert timers_late == 0, f"a due timer waited past {timers_late} of {calls} pairs of calls"


ASYNC_APP = textwrap.dedent(
    """
    async def noop(attempt):
        return None
    """
)

BACKLOG_SESSIONS = 200
BACKLOG_PER_SESSION = 100


@pytest.fixture
def backlog_url(tmp_path: Path) -> str:
    """A SQLite file with a backlog of 20,000 events a worker takes a while to drain."""
    url = f"sqlite:///{tmp_path / 'a2.db'}"
    with a2sql.create_store(url, migrate=True) as store:
        for n in range(BACKLOG_SESSIONS):
            store.append(f"b-{n:03d}", [NewEvent("t", i) for i in range(BACKLOG_PER_SESSION)])
    return url


@pytest.fixture
def worker_process(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)


def processed(url: str) -> int:
    connection = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        query = "select count(*) from a2_events where processed_at is not null"
        return int(connection.execute(query).fetchone()[0])
    finally:
        connection.close()


def test_sigterm_stops_an_async_sqlite_worker_with_a_backlog(
    tmp_path: Path, backlog_url: str, worker_process: list[subprocess.Popen[str]]
) -> None:
    """`a2sql worker` with a coroutine handler that never awaits (an ``AsyncWorker``,
    its SIGTERM handler added with ``loop.add_signal_handler``) is sent SIGTERM once it
    has begun on a backlog of 20,000 events: it stops with most of the backlog left,
    rather than when the backlog is drained."""
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(ASYNC_APP)
    command = [sys.executable, "-m", "a2sql.cli", "worker", "app:noop", "--url", backlog_url]
    process = subprocess.Popen(
        [*command, "--batch", "10"],
        cwd=app_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    worker_process.append(process)
    deadline = time.monotonic() + DEADLINE_S
    while processed(backlog_url) < 100:
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the worker never began"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=DEADLINE_S)
    assert process.returncode == 0, err[-3000:]
    total = BACKLOG_SESSIONS * BACKLOG_PER_SESSION
    done = processed(backlog_url)
    assert done < total / 2, f"the worker stopped after {done} of {total} events"
