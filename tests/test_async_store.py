"""What only AsyncStore has: cancellation, engines passed in, errors on open (SPEC §2, §4).

A cancelled call is made to be mid-transaction for certain: blocked on a lock
another connection holds, or suspended by an engine hook right before a
statement, after the call has already written in its transaction.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, make_url, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import create_async_engine

import a2sql
from a2sql import A2Error, AsyncStore, ErrorCode, NewEvent
from a2sql.backends.postgresql import SESSION_LOCK_CLASS
from a2sql.execution.engines import async_url, resolve_url
from a2sql.migrate import head_revision
from tests.holding import DEADLINE_S, wait_until_blocked_by
from tests.statement_gate import StatementGate, checked_out, connections_back


async def cancel(task: asyncio.Task[Any]) -> None:
    """Cancel a call and wait (boundedly) until it has unwound."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, DEADLINE_S)


async def claimed_event(store: AsyncStore, *, lane: str | None = None) -> None:
    """Session ``s``: event 1 claimed by ``w`` (attempt 1), and event 2 in the same lane."""
    await store.append(
        "s", [NewEvent("t", 1, id="e1", lane=lane), NewEvent("t", 2, id="e2", lane=lane)]
    )
    claim = await store.claim_available("s", holder="w", ttl_ms=60_000)
    assert [each.index for each in claim.events] == ([1] if lane else [1, 2])


async def assert_completion_left_nothing(store: AsyncStore) -> None:
    """Event 1 is exactly as claimed, nothing was appended, and completion still works."""
    first, second = await store.read("s")
    assert first.processed_at is None and first.processed_by_attempt is None
    assert first.returned_event_ids is None
    assert first.claim_holder == "w" and first.attempt_count == 1
    assert second.id == "e2"
    done = await store.complete_attempt("s", index=1, attempt=1, events=[NewEvent("r", id="r1")])
    assert done.outcome == "completed"
    assert [each.id for each in await store.read("s")] == ["e1", "e2", "r1"]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


# --- cancellation mid-transaction ---------------------------------------------------


def test_cancelled_complete_attempt_waiting_for_session_lock_writes_nothing(
    postgres_url: str, holder: Connection
) -> None:
    """Cancelling complete_attempt while it waits for the session's lock (another connection
    holds it) writes nothing; the store and its pool stay sound (SPEC §3: one transaction)."""

    async def scenario() -> None:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            await claimed_event(store)
            before = checked_out(store)
            holder.execute(
                text("select pg_advisory_xact_lock(:class, hashtext('s'))"),
                {"class": SESSION_LOCK_CLASS},
            )
            call = asyncio.create_task(
                store.complete_attempt("s", index=1, attempt=1, events=[NewEvent("r", id="r1")])
            )
            await wait_until_blocked_by(holder)
            await cancel(call)
            holder.rollback()
            # Sent from the loop, its connection returns once it has rolled back.
            await connections_back(store, before)
            await assert_completion_left_nothing(store)
            assert checked_out(store) == before

    run(scenario)


def test_cancelled_complete_attempt_after_marking_processed_writes_nothing(
    postgres_url: str, holder: Connection
) -> None:
    """Cancelling complete_attempt after it marked the event processed (blocked promoting
    the lane's next event, whose row another connection locks) rolls all of it back."""

    async def scenario() -> None:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            await claimed_event(store, lane="L")
            before = checked_out(store)
            holder.execute(
                text("select 1 from a2_events where session_id = 's' and idx = 2 for update")
            )
            call = asyncio.create_task(
                store.complete_attempt("s", index=1, attempt=1, events=[NewEvent("r", id="r1")])
            )
            await wait_until_blocked_by(holder)
            await cancel(call)
            holder.rollback()
            # Sent from the loop, its connection returns once it has rolled back.
            await connections_back(store, before)
            await assert_completion_left_nothing(store)
            second = (await store.read("s"))[1]
            assert second.claim_holder is None
            assert (await store.claim_available("s", holder="w", ttl_ms=1000)).events[0].index == 2

    run(scenario)


def test_cancelled_large_append_blocked_midway_writes_none_of_it(
    postgres_url: str, holder: Connection
) -> None:
    """Cancelling an append of 1500 events blocked on its last row (another transaction
    inserted that id, uncommitted) leaves none of the batch; the same batch appends after."""
    batch = [NewEvent("t", {"i": i}, id=f"big-{i}") for i in range(1500)]

    async def scenario() -> None:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            before = checked_out(store)
            holder.execute(
                text(
                    "insert into a2_events (session_id, idx, event_type, payload, event_id,"
                    " created_at) values ('other', 1, 't', 'null', 'big-1499', now())"
                )
            )
            call = asyncio.create_task(store.append("s", batch))
            await wait_until_blocked_by(holder)
            await cancel(call)
            holder.rollback()
            await connections_back(store, before)  # once the cancel request has landed
            assert await store.read("s") == []
            assert (await store.inspect.list_sessions()).sessions == []
            result = await store.append("s", batch)
            assert [each.index for each in result.events] == list(range(1, 1501))
            assert [each.id for each in await store.read("s")] == [e.id for e in batch]
            assert checked_out(store) == before

    run(scenario)


def test_cancelled_append_waiting_for_sqlite_write_lock_writes_nothing(tmp_path: Path) -> None:
    """Cancelling an append waiting for SQLite's write lock (a raw connection holds
    BEGIN IMMEDIATE) writes nothing once the lock is released; the store still works."""
    path = tmp_path / "a2.db"

    async def scenario() -> None:
        async with a2sql.create_async_store(f"sqlite:///{path}") as store:
            await store.append("s", [NewEvent("t", 0, id="e0")])
            before = checked_out(store)
            raw = sqlite3.connect(path, isolation_level=None)
            try:
                raw.execute("begin immediate")
                call = asyncio.create_task(
                    store.append("s", [NewEvent("t", i, id=f"e{i}") for i in range(1, 200)])
                )
                await asyncio.sleep(0.3)
                assert not call.done()
                call.cancel()
                await asyncio.sleep(0.1)
            finally:
                raw.execute("rollback")
                raw.close()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(call, DEADLINE_S)
            assert [each.id for each in await store.read("s")] == ["e0"]
            assert checked_out(store) == before
            await store.append("s", [NewEvent("t", 1, id="e1")])
            assert [each.id for each in await store.read("s")] == ["e0", "e1"]
            assert checked_out(store) == before

    run(scenario)


def test_cancelled_complete_attempt_suspended_before_its_insert_writes_nothing(url: str) -> None:
    """Cancelling complete_attempt suspended between marking the event processed and
    inserting the returned events leaves the event unprocessed and nothing appended.
    (The returned event has a lane: on PostgreSQL a completion whose returned events
    have none is one statement, a2sql.backends.postgresql.one_statement; the next test suspends
    that one.)"""

    async def scenario() -> None:
        async with a2sql.create_async_store(url, migrate=True) as store:
            await claimed_event(store, lane="L")
            before = checked_out(store)
            gate = StatementGate(
                store, lambda sql: sql.lstrip().startswith("insert into a2_events")
            )
            try:
                call = asyncio.create_task(
                    store.complete_attempt(
                        "s", index=1, attempt=1, events=[NewEvent("r", id="r1", lane="L")]
                    )
                )
                await asyncio.wait_for(gate.reached.wait(), DEADLINE_S)
                assert checked_out(store) == before + 1
                await cancel(call)
            finally:
                gate.remove()
            await connections_back(store, before)
            await assert_completion_left_nothing(store)
            assert checked_out(store) == before

    run(scenario)


def test_cancelled_fused_complete_attempt_writes_nothing(postgres_url: str) -> None:
    """Cancelling complete_attempt suspended at its one statement (PostgreSQL, returned
    events without a lane, a2sql.backends.postgresql.one_statement) leaves the event unprocessed
    and nothing
    appended."""

    async def scenario() -> None:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            await claimed_event(store, lane="L")
            before = checked_out(store)
            gate = StatementGate(store, lambda sql: sql.lstrip().startswith("with done as"))
            try:
                call = asyncio.create_task(
                    store.complete_attempt("s", index=1, attempt=1, events=[NewEvent("r", id="r1")])
                )
                await asyncio.wait_for(gate.reached.wait(), DEADLINE_S)
                await cancel(call)
            finally:
                gate.remove()
            await connections_back(store, before)
            await assert_completion_left_nothing(store)
            assert checked_out(store) == before

    run(scenario)


# --- engines passed in, errors on open ------------------------------------------


def test_async_engine_passed_in_is_left_open_after_close(url: str) -> None:
    """create_async_store(AsyncEngine): close() leaves the caller's engine open (SPEC §2)."""
    engine = create_async_engine(async_url(resolve_url(url)))

    async def scenario() -> None:
        pool = engine.sync_engine.pool
        try:
            async with engine.connect() as held:
                async with a2sql.create_async_store(engine, migrate=True) as store:
                    assert store.engine is engine
                    await store.append("s", [NewEvent("t", 1, id="e1")])
                assert engine.sync_engine.pool is pool, "the engine was disposed"
                assert (
                    await held.execute(text("select count(*) from a2_events"))
                ).scalar_one() == 1
            async with engine.connect() as fresh:
                assert (await fresh.execute(text("select 1"))).scalar_one() == 1
            assert engine.sync_engine.pool is pool
        finally:
            await engine.dispose()

    run(scenario)


def test_async_store_created_from_url_disposes_its_engine_on_close(url: str) -> None:
    """An AsyncStore that made its engine releases it on close(); later calls are
    STORE_CLOSED (the program's mistake, not a failed database)."""

    async def scenario() -> None:
        store = a2sql.create_async_store(url, migrate=True)
        await store.append("s", [NewEvent("t", 1, id="e1")])
        pool = store.engine.sync_engine.pool
        assert pool.checkedin() + pool.checkedout() >= 1
        await store.close()
        assert pool.checkedout() == 0, "a connection kept between calls was not given back"
        assert store.engine.sync_engine.pool is not pool or pool.checkedin() == 0
        with pytest.raises(A2Error) as raised:
            await store.read("s")
        assert raised.value.code == ErrorCode.STORE_CLOSED
        assert "closed" in raised.value.message

    run(scenario)


@pytest.mark.parametrize("opening", ["async with", "first call"])
def test_unmigrated_postgres_is_schema_mismatch_from_async_store(
    postgres_url: str, opening: str
) -> None:
    """create_async_store(unmigrated PostgreSQL, migrate=False) raises SCHEMA_MISMATCH naming
    the revisions and the command, on `async with` or at the first call (SPEC §2)."""

    async def scenario() -> None:
        store = a2sql.create_async_store(postgres_url, migrate=False)
        with pytest.raises(A2Error) as raised:
            if opening == "async with":
                async with store:
                    pass
            else:
                try:
                    await store.append("s", [NewEvent("t", 1)])
                finally:
                    await store.close()
        error = raised.value
        assert error.code == ErrorCode.SCHEMA_MISMATCH
        for mention in (head_revision(), "none", "a2sql migrate"):
            assert mention in error.message, error.message

    run(scenario)


def test_failed_async_with_opening_leaves_no_connection_open(url: str) -> None:
    """`async with create_async_store(...)` that fails (SCHEMA_MISMATCH) releases the engine
    it made, as create_store does: the caller never gets the store to close (SPEC §2)."""

    if url.startswith("sqlite"):
        sqlite3.connect(make_url(url).database).close()  # empty: no a2sql schema

    async def scenario() -> None:
        store = a2sql.create_async_store(url, migrate=False)
        with pytest.raises(A2Error) as raised:
            async with store:
                pass
        assert raised.value.code == ErrorCode.SCHEMA_MISMATCH
        pool = store.engine.sync_engine.pool
        assert (pool.checkedout(), pool.checkedin()) == (0, 0), "a connection was left open"

    run(scenario)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("opening", ["async with", "first call"])
def test_async_store_on_closed_port_is_store_unavailable(opening: str) -> None:
    """An AsyncStore on a PostgreSQL port nothing listens on raises STORE_UNAVAILABLE,
    the driver's error as __cause__ (SPEC §4)."""
    pytest.importorskip("psycopg")
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test?connect_timeout=5"

    async def scenario() -> None:
        store = a2sql.create_async_store(url)
        with pytest.raises(A2Error) as raised:
            if opening == "async with":
                async with store:
                    pass
            else:
                try:
                    await store.read("s")
                finally:
                    await store.close()
        error = raised.value
        assert error.code == ErrorCode.STORE_UNAVAILABLE, error
        cause = error.__cause__
        driver = cause.orig if isinstance(cause, sa_exc.DBAPIError) else cause
        assert type(driver).__module__.split(".")[0] == "psycopg", repr(driver)

    run(scenario)
