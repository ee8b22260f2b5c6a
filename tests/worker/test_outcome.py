"""Compute, then commit: a handler returns ``Outcome(events, write=fn)``; ``fn`` runs in
the completion's short transaction, and commits with it or not at all.

Every test runs on a SQLite file and on PostgreSQL, with real stores; the database is
the witness.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Column, Connection, Integer, MetaData, String, Table, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

import a2sql
from a2sql import A2Error, AsyncStore, ErrorCode, NewEvent, Store
from a2sql.testing import FakeClock
from a2sql.worker import AsyncAttempt, AsyncWorker, Attempt, Backoff, Outcome
from tests.worker.quick import quick

app = MetaData()
usage = Table(
    "app_usage",
    app,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(255), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
)


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        app.create_all(opened.engine)
        yield opened


def rows(store: Store) -> list[tuple[str, int, int]]:
    with store.engine.connect() as connection:
        query = select(usage.c.session_id, usage.c.idx, usage.c.attempt).order_by(usage.c.id)
        return [tuple(row) for row in connection.execute(query)]  # type: ignore[misc]


def recorder(attempt: Attempt | AsyncAttempt) -> Any:
    """A ``write`` inserting one usage row for this attempt."""

    def write(connection: Connection) -> None:
        connection.execute(
            insert(usage).values(
                session_id=attempt.session_id, idx=attempt.event.index, attempt=attempt.number
            )
        )

    return write


def test_writes_commit_with_the_completion_and_the_handler_holds_no_lock(
    store: Store, url: str
) -> None:
    """While the handler computes, another writer commits at once (no transaction is
    open, on SQLite no write lock held); then the row and the completion commit."""
    store.append("s", [NewEvent("ask")])
    appended_meanwhile: list[int] = []

    def handler(attempt: Attempt) -> Outcome:
        # With the worker's transaction open, this would wait on SQLite's lock.
        with a2sql.create_store(url) as other:
            appended_meanwhile.append(other.append("other", [NewEvent("x")]).events[0].index)
        return Outcome([NewEvent("reply", {"text": "hi"}, settled=True)], write=recorder(attempt))

    worker = quick(store, handler)
    assert worker.run_session("s") == "settled"
    assert appended_meanwhile == [1]
    assert rows(store) == [("s", 1, 1)]
    ask, reply = store.read("s")
    assert ask.processed_by_attempt == 1 and ask.returned_event_ids == [reply.id]
    assert worker.outcomes == {"completed": 1}


def test_a_write_that_raises_fails_the_attempt_and_leaves_nothing(store: Store) -> None:
    """The first write raises: no row, the attempt failed; the retry's row is the only one."""
    store.append("s", [NewEvent("ask")])
    writes: list[int] = []

    def handler(attempt: Attempt) -> Outcome:
        inner = recorder(attempt)

        def write(connection: Connection) -> None:
            writes.append(attempt.number)
            inner(connection)
            if attempt.number == 1:
                raise RuntimeError("the app's write refused")

        return Outcome([NewEvent("reply", settled=True)], write=write)

    worker = quick(store, handler)
    assert worker.run_session("s") == "settled"
    assert writes == [1, 2]
    assert rows(store) == [("s", 1, 2)]
    [ask, _reply] = store.read("s")
    assert ask.processed_by_attempt == 2 and ask.failure_count == 1
    assert "the app's write refused" in (ask.last_error or "")
    assert worker.outcomes == {"failed": 1, "completed": 1}


def test_a_superseded_completion_rolls_the_write_back(url: str) -> None:
    """The claim runs out while the handler computes and another worker completes the
    event: the stale attempt's write is rolled back, never retried."""
    clock = FakeClock()
    with a2sql.create_store(url, clock=clock, migrate=True) as store:
        app.create_all(store.engine)
        store.append("s", [NewEvent("ask")])
        writes: list[int] = []

        def stale(attempt: Attempt) -> Outcome:
            clock.advance(seconds=60)  # the lease is long gone
            other = store.claim_available("s", holder="other", ttl_ms=30_000)
            [event] = other.events
            store.complete_attempt("s", index=1, attempt=event.attempt_count, events=[])
            inner = recorder(attempt)

            def write(connection: Connection) -> None:
                writes.append(attempt.number)
                inner(connection)

            return Outcome([NewEvent("late", settled=True)], write=write)

        worker = quick(store, stale, ttl_ms=1_000)
        worker.run_session("s")
        assert writes in ([], [1])  # the loss may be seen before or at the completion
        assert rows(store) == []
        assert [e.type for e in store.read("s")] == ["ask"]
        assert worker.outcomes == {"superseded": 1}


def test_a_lost_commit_reply_is_read_back_and_the_write_not_run_again(store: Store) -> None:
    """The commit happened, its reply was lost: the event read back says completed."""
    store.append("s", [NewEvent("ask")])
    writes: list[int] = []
    real_begin = store.begin
    lost: list[bool] = []

    @contextmanager
    def begin() -> Iterator[Any]:
        with real_begin() as connection:
            yield connection
        if not lost:
            lost.append(True)
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "connection lost (injected after commit)")

    store.begin = begin  # type: ignore[method-assign]

    def handler(attempt: Attempt) -> Outcome:
        inner = recorder(attempt)

        def write(connection: Connection) -> None:
            writes.append(attempt.number)
            inner(connection)

        return Outcome([NewEvent("reply", settled=True)], write=write)

    worker = quick(store, handler)
    assert worker.run_session("s") == "settled"
    assert lost == [True] and writes == [1]
    assert rows(store) == [("s", 1, 1)]
    assert worker.outcomes == {"completed": 1}


def test_a_transaction_lost_before_its_commit_runs_the_write_again_not_the_handler(
    store: Store,
) -> None:
    """Nothing committed: the write (and completion) run again; the handler ran once."""
    store.append("s", [NewEvent("ask")])
    computed: list[int] = []
    writes: list[int] = []

    def handler(attempt: Attempt) -> Outcome:
        computed.append(attempt.number)
        inner = recorder(attempt)

        def write(connection: Connection) -> None:
            writes.append(attempt.number)
            inner(connection)
            if len(writes) == 1:
                # An outage inside the transaction, after the app's row: rolled back.
                raise_in_store.append(True)

        return Outcome([NewEvent("reply", settled=True)], write=write)

    raise_in_store: list[bool] = []
    real_using = store.using

    def using(connection: Any) -> Any:
        if len(raise_in_store) == 1:
            raise_in_store.append(True)
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "connection lost (injected before commit)")
        return real_using(connection)

    store.using = using  # type: ignore[method-assign]
    worker = quick(store, handler)
    assert worker.run_session("s") == "settled"
    assert computed == [1] and writes == [1, 1]
    assert rows(store) == [("s", 1, 1)]
    assert worker.outcomes == {"completed": 1}


def test_an_outcome_without_write_completes_as_a_list_would(store: Store) -> None:
    store.append("s", [NewEvent("ask")])
    worker = quick(store, lambda attempt: Outcome([NewEvent("reply", settled=True)]))
    assert worker.run_session("s") == "settled"
    assert [e.type for e in store.read("s")] == ["ask", "reply"]


@pytest.mark.parametrize(
    "returned",
    [
        Outcome(write="not callable"),  # type: ignore[arg-type]
        Outcome(events=NewEvent("t")),  # type: ignore[arg-type]
        Outcome(write=lambda connection: asyncio.sleep(0)),
    ],
    ids=["write-not-callable", "events-not-a-sequence", "coroutine-write-on-a-sync-worker"],
)
def test_a_malformed_outcome_fails_the_attempt(store: Store, returned: Outcome) -> None:
    store.append("s", [NewEvent("ask")])
    worker = quick(store, lambda attempt: returned, max_failures=1)
    worker.run_session("s")
    [ask] = store.read("s")
    assert ask.failed_at is not None and "TypeError" in (ask.last_error or "")
    assert rows(store) == []


def test_transactional_handlers_may_return_an_outcome_too(store: Store) -> None:
    """transactional=True with an Outcome: its write runs in the same transaction."""
    store.append("s", [NewEvent("ask")])

    def handler(attempt: Attempt) -> Outcome:
        assert attempt.connection is not None
        return Outcome([NewEvent("reply", settled=True)], write=recorder(attempt))

    assert quick(store, handler, transactional=True).run_session("s") == "settled"
    assert rows(store) == [("s", 1, 1)]


def test_presence_from_a_transactional_handler_does_not_wait_on_its_own_lock(
    store: Store,
) -> None:
    """attempt.presence goes through the handler's transaction: on SQLite it returns at
    once (store.presence would wait on the handler's own write lock), and the value is
    seen once the completion commits."""
    store.append("s", [NewEvent("ask")])
    seen_inside: list[bool] = []

    def handler(attempt: Attempt) -> None:
        done = threading.Event()

        def typing() -> None:
            attempt.presence.set("s", "assistant", {"typing": True}, ttl_ms=60_000)
            done.set()

        # In this thread: the handler's connection is not shared across threads.
        typing()
        seen_inside.append(done.is_set())

    worker = quick(store, handler, transactional=True)
    assert worker.run_session("s") == "settled"
    assert seen_inside == [True]
    [entry] = store.presence.read("s")
    assert (entry.participant, entry.field, entry.value) == ("assistant", "typing", True)


# --- AsyncWorker -------------------------------------------------------------------


def run_async(url: str, body: Any) -> Any:
    async def main() -> Any:
        async with a2sql.create_async_store(url, migrate=True) as store:
            async with store.engine.begin() as connection:
                await connection.run_sync(app.create_all)
            return await body(store)

    return asyncio.run(main())


def async_recorder(attempt: AsyncAttempt) -> Any:
    async def write(connection: AsyncConnection) -> None:
        await connection.execute(
            insert(usage).values(
                session_id=attempt.session_id, idx=attempt.event.index, attempt=attempt.number
            )
        )

    return write


def test_async_write_commits_with_the_completion_or_not_at_all(url: str) -> None:
    """A coroutine write: the first raises (rolled back, attempt failed), the second
    commits with the completion."""

    async def body(store: AsyncStore) -> AsyncWorker:
        await store.append("s", [NewEvent("ask")])

        async def handler(attempt: AsyncAttempt) -> Outcome:
            await asyncio.sleep(0.01)  # the model call, outside any transaction
            inner = async_recorder(attempt)

            async def write(connection: AsyncConnection) -> None:
                await inner(connection)
                if attempt.number == 1:
                    raise RuntimeError("refused")

            return Outcome([NewEvent("reply", settled=True)], write=write)

        worker = AsyncWorker(store, handler, poll_interval=0.05, backoff=Backoff.none())
        assert await worker.run_session("s") == "settled"
        return worker

    worker = run_async(url, body)
    with a2sql.create_store(url) as store:
        assert rows(store) == [("s", 1, 2)]
        ask, reply = store.read("s")
        assert ask.processed_by_attempt == 2 and ask.returned_event_ids == [reply.id]
    assert worker.outcomes == {"failed": 1, "completed": 1}


def test_async_presence_from_a_transactional_handler(url: str) -> None:
    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("ask")])

        async def handler(attempt: AsyncAttempt) -> None:
            await asyncio.wait_for(
                attempt.presence.set("s", "assistant", {"typing": True}, ttl_ms=60_000), timeout=5
            )

        worker = AsyncWorker(store, handler, transactional=True, poll_interval=0.05)
        assert await worker.run_session("s") == "settled"
        [entry] = await store.presence.read("s")
        assert (entry.participant, entry.field, entry.value) == ("assistant", "typing", True)

    run_async(url, body)
