"""An AsyncStore opened from a URL runs each operation whole on the sync path
(a2sql.handoff): SQLite on the event loop's thread unless it must wait for the
write lock, PostgreSQL in a thread per call. What that must not cost: a
blocked loop, a commit after cancellation, connections left after close.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import NullPool, create_engine, make_url, text

import a2sql
from a2sql import NewEvent

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
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticking = asyncio.create_task(ticker())
            try:
                raw.execute("begin immediate")
                call = asyncio.create_task(store.append("s", [NewEvent("t", 1, id="e1")]))
                await asyncio.sleep(0.5)
                assert not call.done()
                raw.execute("rollback")
                result = await asyncio.wait_for(call, DEADLINE_S)
            finally:
                ticking.cancel()
                raw.close()
            return ticks, result.events[0].index

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

    asyncio.run(use_and_drop())
    gc.collect()
    deadline = time.monotonic() + 10
    # The asyncio engine's connections go with the garbage collector; the sync
    # path's are closed by the store's finalizer.
    while server_connections(postgres_url, name) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.1)
    assert server_connections(postgres_url, name) == 0


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
