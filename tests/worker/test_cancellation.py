"""SPEC §7 cancellation as a worker sees it: a handler learns of ``cancel_session`` at its
next renewal (within a third of the lease), ``attempt.cancelled`` turns true, an
``AsyncWorker`` cancels the handler's task, and nothing the handler returns is
submitted. On both engines (the ``url`` fixture), with a real worker and real time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

import a2sql
from a2sql import AsyncStore, NewEvent, Store
from a2sql.testing import FakeClock
from a2sql.worker import AsyncAttempt, Attempt
from tests.worker.quick import quick
from tests.worker.test_async_worker import quick as quick_async

TTL_MS = 1_500  # renewals every 0.5 s
# A third of the lease, and room for a loaded machine to run the renewal.
LEARNS_WITHIN_S = TTL_MS / 3 / 1000 + 1.0
REASON = "the user hung up"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


def assert_cancelled(events: list[a2sql.StoredEvent], count: int) -> None:
    """The session has ``count`` events, every one processed by no attempt, with the reason."""
    assert len(events) == count
    for event in events:
        assert event.processed_at is not None, event
        assert (event.processed_by_attempt, event.last_error) == (None, REASON)


def transactional_runs(url: str, transactional: bool) -> None:
    """A transactional handler on SQLite holds the database's write lock while it runs
    (its writes and the completion commit together), so nothing else writes until it
    returns: not the cancel, not the renewal that would tell it. The cancel of such a
    handler is a PostgreSQL test; on SQLite it waits for the handler."""
    if transactional and url.startswith("sqlite"):
        pytest.skip("SQLite: a transactional handler holds the write lock the cancel needs")


@pytest.mark.parametrize("transactional", [False, True])
def test_a_sync_handler_sees_cancelled_and_its_result_is_dropped(
    url: str, store: Store, transactional: bool
) -> None:
    """The handler polls ``attempt.cancelled``; it turns true within a third of the lease
    after ``cancel_session``; what it returns is not submitted (``superseded``)."""
    transactional_runs(url, transactional)
    store.append("s", [NewEvent("call"), NewEvent("next")])
    started = threading.Event()
    learned: list[float] = []

    def handler(attempt: Attempt) -> list[NewEvent]:
        started.set()
        deadline = time.monotonic() + 30
        while not attempt.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        learned.append(time.monotonic())
        assert attempt.lost
        return [NewEvent("reply")]

    worker = quick(store, handler, ttl_ms=TTL_MS, batch=1, transactional=transactional)
    runner = threading.Thread(target=worker.run_session, args=("s",))
    runner.start()
    try:
        assert started.wait(10)
        cancelled_at = time.monotonic()
        assert store.cancel_session("s", reason=REASON).cancelled == 2
        runner.join(30)
        assert not runner.is_alive()
    finally:
        worker.stop()
        runner.join(30)
    assert learned and learned[0] - cancelled_at < LEARNS_WITHIN_S
    assert worker.outcomes == {"superseded": 1}
    assert_cancelled(store.read("s"), 2)


@pytest.mark.parametrize("transactional", [False, True])
def test_an_async_handler_is_cancelled_at_the_next_renewal(url: str, transactional: bool) -> None:
    """An ``AsyncWorker`` cancels the handler's task; the attempt is ``superseded`` and
    nothing it would have returned is appended."""
    transactional_runs(url, transactional)

    async def main() -> None:
        async with a2sql.create_async_store(url, migrate=True) as store:
            await body(store)

    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("call")])
        started = asyncio.Event()
        stopped: list[float] = []
        seen: list[bool] = []

        async def handler(attempt: AsyncAttempt) -> list[NewEvent]:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                stopped.append(time.monotonic())
                seen.append(attempt.cancelled)
                raise
            return [NewEvent("reply")]

        worker = quick_async(store, handler, ttl_ms=TTL_MS, transactional=transactional)
        serving = asyncio.create_task(worker.run_session("s"))
        await asyncio.wait_for(started.wait(), 10)
        cancelled_at = time.monotonic()
        assert (await store.cancel_session("s", reason=REASON)).cancelled == 1
        await asyncio.wait_for(serving, 30)
        assert stopped and stopped[0] - cancelled_at < LEARNS_WITHIN_S
        assert seen == [True]
        assert worker.outcomes == {"superseded": 1}
        assert_cancelled(await store.read("s"), 1)

    asyncio.run(main())


def test_a_skipped_event_cancels_its_handler_too(store: Store) -> None:
    """``skip_event`` on an event a handler runs stops that handler as a cancel does."""
    store.append("s", [NewEvent("call")])
    started = threading.Event()
    seen: list[bool] = []

    def handler(attempt: Attempt) -> None:
        started.set()
        deadline = time.monotonic() + 30
        while not attempt.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(attempt.cancelled)

    worker = quick(store, handler, ttl_ms=TTL_MS)
    runner = threading.Thread(target=worker.run_session, args=("s",))
    runner.start()
    try:
        assert started.wait(10)
        store.skip_event("s", index=1, reason=REASON)
        runner.join(30)
    finally:
        worker.stop()
        runner.join(30)
    assert seen == [True]
    assert worker.outcomes == {"superseded": 1}


def test_a_claim_taken_over_is_lost_but_not_cancelled(url: str) -> None:
    """``cancelled`` says the session's work was stopped, not that the claim was lost
    otherwise: a claim another worker took after it expired leaves it false."""
    clock = FakeClock()
    with a2sql.create_store(url, clock=clock, migrate=True) as timed:
        timed.append("t", [NewEvent("call")])
        seen: list[tuple[bool, bool]] = []

        def handler(attempt: Attempt) -> None:
            clock.advance(ms=TTL_MS)  # the lease ends...
            timed.claim_available("t", holder="other", ttl_ms=60_000)  # ...and it is taken
            deadline = time.monotonic() + 10
            while not attempt.lost and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append((attempt.lost, attempt.cancelled))

        worker = quick(timed, handler, ttl_ms=300)
        worker.run_session("t")
    assert seen == [(True, False)]
