"""An AsyncStore opened from a URL runs each operation whole on the sync path
(a2sql.execution.threads): SQLite on the event loop's thread unless it must wait for the
write lock, PostgreSQL in a thread per call. What that must not cost: a
blocked loop, a commit after cancellation, connections left after close.
"""

from __future__ import annotations

import asyncio
import gc
import random
import sqlite3
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, NullPool, create_engine, make_url, text
from sqlalchemy.exc import SAWarning
from sqlalchemy.ext.asyncio import create_async_engine

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent
from tests.holding import ticking

DEADLINE_S = 20


def test_a_sqlite_write_waiting_for_the_lock_leaves_the_loop_running(tmp_path: Path) -> None:
    """Another process's writer holds SQLite's write lock for half a second: the append
    waits for it in a thread while the loop goes on (a ticker keeps ticking), then
    succeeds. Run inline with the store's busy timeout, it would freeze the loop."""
    path = tmp_path / "a2.db"

    async def scenario() -> tuple[int, int]:
        async with a2sql.create_async_store(f"sqlite:///{path}") as store:
            await store.append("s", [NewEvent("t", 0, id="e0")])
            raw = sqlite3.connect(path, isolation_level=None)
            try:
                async with ticking() as ticks:
                    raw.execute("begin immediate")
                    call = asyncio.create_task(store.append("s", [NewEvent("t", 1, id="e1")]))
                    await asyncio.sleep(0.5)
                    assert not call.done()
                    raw.execute("rollback")
                    result = await asyncio.wait_for(call, DEADLINE_S)
            finally:
                raw.close()
            return ticks.count, result.events[0].index

    ticks, index = asyncio.run(scenario())
    assert index == 2
    assert ticks >= 20, f"the loop ticked {ticks} times in 0.5 s"


def application_name_url(postgres_url: str) -> tuple[str, str]:
    name = f"a2h_{uuid.uuid4().hex[:10]}"
    return make_url(postgres_url).update_query_dict({"application_name": name}).render_as_string(
        hide_password=False
    ), name


def server_connections(postgres_url: str, name: str) -> int:
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    text("select count(*) from pg_stat_activity where application_name = :n"),
                    {"n": name},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def test_closing_an_async_store_closes_its_sync_paths_connections(postgres_url: str) -> None:
    """Eight concurrent tasks use several of the sync path's connections; close() ends
    every one of them on the server."""
    url, name = application_name_url(postgres_url)

    async def scenario() -> int:
        async with a2sql.create_async_store(url, migrate=True) as store:

            async def task(number: int) -> None:
                for n in range(10):
                    await store.append(f"s{number}", [NewEvent("t", n)])

            await asyncio.gather(*(task(number) for number in range(8)))
            during = server_connections(postgres_url, name)
        return during

    assert asyncio.run(scenario()) > 1
    deadline = time.monotonic() + 10
    while server_connections(postgres_url, name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_connections(postgres_url, name) == 0


def test_a_dropped_async_store_releases_its_sync_paths_connections(postgres_url: str) -> None:
    url, name = application_name_url(postgres_url)

    async def use_and_drop() -> None:
        store = a2sql.create_async_store(url, migrate=True)
        await store.append("s", [NewEvent("t")])
        assert server_connections(postgres_url, name) >= 1

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        asyncio.run(use_and_drop())
        gc.collect()
        deadline = time.monotonic() + 10
        # The asyncio engine's connections go with the garbage collector; the sync
        # path's, and those kept for calls from the loop, are closed by the store's
        # finalizer.
        while server_connections(postgres_url, name) and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.1)
    assert server_connections(postgres_url, name) == 0
    # Not reported as connections never given back to the pool.
    assert [str(w.message) for w in warned if issubclass(w.category, SAWarning)] == []


@pytest.mark.parametrize("engine_kind", ["sqlite", "postgres"])
def test_many_tasks_on_many_sessions_lose_and_double_nothing(
    engine_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Sixteen tasks of one AsyncStore, each appending, claiming and completing on a
    session of its own: every event is processed once."""
    if engine_kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'a2.db'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))

    async def scenario() -> list[int]:
        async with a2sql.create_async_store(url, migrate=True) as store:

            async def task(number: int) -> None:
                session = f"s{number}"
                for n in range(20):
                    await store.append(session, [NewEvent("t", n, id=f"{session}/{n}")])
                    claim = await store.claim_available(session, holder="w", ttl_ms=60_000)
                    for event in claim.events:
                        done = await store.complete_attempt(
                            session, index=event.index, attempt=event.attempt_count, events=[]
                        )
                        assert done.outcome == "completed"

            await asyncio.gather(*(task(number) for number in range(16)))
            return [
                sum(1 for e in await store.read(f"s{number}") if e.processed_at is not None)
                for number in range(16)
            ]

    assert asyncio.run(scenario()) == [20] * 16


@pytest.mark.parametrize("path", ["sync path", "asyncio engine"])
@pytest.mark.parametrize("engine_kind", ["sqlite", "postgres"])
def test_a_cancelled_call_raises_cancelled_only_when_nothing_was_committed(
    engine_kind: str, path: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Appends cancelled after 0 to 4 ms: each either raises CancelledError and left
    nothing, or returns its result and committed. Before, about one in twenty raised
    CancelledError and was committed anyway (cancelled while it committed), on the sync
    path and, with an AsyncEngine passed in, on the asyncio engine alike. On PostgreSQL
    every other append has a lane: from a URL, those are handed to a thread that commits
    at the end, the others sent whole from the loop, where the server's answer to the
    cancel decides (a2sql.execution.onloop)."""
    if engine_kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'a2.db'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    rng = random.Random(7)

    async def scenario() -> tuple[list[str], int]:
        wrong = []
        cancelled = 0
        engine = None
        if path == "asyncio engine":
            driver = "sqlite+aiosqlite" if engine_kind == "sqlite" else "postgresql+psycopg"
            engine = create_async_engine(make_url(url).set(drivername=driver))
        async with a2sql.create_async_store(engine or url, migrate=True) as store:
            for n in range(150):
                lane = "L" if n % 2 else None
                task = asyncio.create_task(
                    store.append(f"c{n}", [NewEvent("t", n, id=f"e{n}", lane=lane)])
                )
                await asyncio.sleep(rng.uniform(0, 0.004))
                task.cancel()
                try:
                    await task
                    committed_expected = True
                except asyncio.CancelledError:
                    committed_expected = False
                    cancelled += 1
                await asyncio.sleep(0.01)  # a rolled-back thread has finished
                found = [e.id for e in await store.read(f"c{n}")]
                if found != ([f"e{n}"] if committed_expected else []):
                    wrong.append(f"c{n}: returned={committed_expected}, stored={found}")
        if engine is not None:
            await engine.dispose()
        return wrong, cancelled

    wrong, cancelled = asyncio.run(scenario())
    assert wrong == []
    if engine_kind == "postgres":
        assert cancelled > 0  # the race was run, not only calls that had finished


async def appends_waiting_for(
    holder_store: a2sql.Store, connection: Connection, store: a2sql.AsyncStore, count: int
) -> list[asyncio.Task[Any]]:
    """``count`` appends to session "s", which ``holder_store``'s transaction on
    ``connection`` holds: started, and waiting for it."""
    holder_store.using(connection).append("s", [NewEvent("t", id="held")])
    calls = [
        asyncio.create_task(store.append("s", [NewEvent("t", n, id=f"w{n}")])) for n in range(count)
    ]
    await asyncio.sleep(0.5)
    return calls


def test_closing_with_calls_queued_fails_them_with_store_closed(postgres_url: str) -> None:
    """Twenty appends wait for a session another transaction holds (fifteen sent from the
    loop on connections of its pool, five waiting for one); the store is closed: the
    server cancels the waits, and those calls fail with STORE_CLOSED, not a bare
    CancelledError nobody asked for, nor the lock timeout."""
    holder_store = a2sql.create_store(postgres_url, migrate=True)

    async def scenario() -> list[object]:
        store = a2sql.create_async_store(postgres_url, migrate=False)
        await store.ensure_schema()
        with holder_store.begin() as connection:
            calls = await appends_waiting_for(holder_store, connection, store, 20)
            await store.close()
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 30)

    try:
        outcomes = asyncio.run(scenario())
    finally:
        holder_store.close()
    closed = [o for o in outcomes if isinstance(o, A2Error)]
    assert not any(isinstance(o, BaseException) and not isinstance(o, A2Error) for o in outcomes), (
        outcomes
    )
    assert closed and all(o.code is ErrorCode.STORE_CLOSED for o in closed), closed


def test_cancelled_calls_waiting_for_a_lock_free_their_threads_at_once(
    postgres_url: str,
) -> None:
    """Fifteen appends wait for a session another transaction holds, every thread of the
    store busy; all are cancelled: their lock waits are cancelled on the server, so an
    append to another session runs at once. Before, it waited for the lock timeout."""
    holder_store = a2sql.create_store(postgres_url, migrate=True)

    async def scenario() -> float:
        async with a2sql.create_async_store(
            postgres_url, migrate=False, lock_timeout_ms=20_000
        ) as store:
            with holder_store.begin() as connection:
                calls = await appends_waiting_for(holder_store, connection, store, 15)
                for call in calls:
                    call.cancel()
                outcomes = await asyncio.gather(*calls, return_exceptions=True)
                assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
                began = time.monotonic()
                await asyncio.wait_for(store.append("other", [NewEvent("t")]), DEADLINE_S)
                took = time.monotonic() - began
            assert [e.id for e in await store.read("s")] == ["held"]
        return took

    try:
        took = asyncio.run(scenario())
    finally:
        holder_store.close()
    assert took < 5, f"the unrelated append waited {took:.1f} s"
