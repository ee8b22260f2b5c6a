"""AsyncWorker: the same decisions as Worker, with coroutine handlers on an AsyncStore."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select

import a2sql
from a2sql import A2Error, AsyncStore, ErrorCode, EventCause, NewEvent
from a2sql.testing import FakeClock
from a2sql.worker import AsyncAttempt, AsyncWorker, Backoff

T = TypeVar("T")

app = MetaData()
handled = Table(
    "app_handled_async",
    app,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(255), nullable=False),
    Column("idx", Integer, nullable=False),
)


@pytest.fixture
def run(url: str) -> Iterator[Callable[..., Any]]:
    """Run ``body(store)`` on a fresh AsyncStore of the test's database."""

    def go(body: Callable[[AsyncStore], Awaitable[T]], **options: Any) -> T:
        async def main() -> T:
            async with a2sql.create_async_store(url, migrate=True, **options) as store:
                async with store.engine.begin() as connection:
                    await connection.run_sync(app.create_all)
                return await body(store)

        return asyncio.run(main())

    yield go


def quick(store: AsyncStore, handler: Any, **settings: Any) -> AsyncWorker:
    settings.setdefault("poll_interval", 0.05)
    settings.setdefault("backoff", Backoff.none())
    return AsyncWorker(store, handler, **settings)


def test_async_chain_settles_with_the_right_causes(run: Callable[..., Any]) -> None:
    """A returns B, B returns a settled C; run(until_idle=True) drains the session."""

    async def handler(attempt: AsyncAttempt) -> list[NewEvent] | None:
        await asyncio.sleep(0)
        if attempt.event.type == "A":
            return [NewEvent("B")]
        return [NewEvent("C", settled=True)]

    async def body(store: AsyncStore) -> None:
        await store.append("chain", [NewEvent("A")])
        worker = quick(store, handler)
        await worker.run(until_idle=True)
        a, b, c = await store.read("chain")
        assert b.cause == EventCause(a.index, 1) and c.cause == EventCause(b.index, 1)
        assert worker.outcomes == {"completed": 2}

    run(body)


def test_async_failures_back_off_then_dead_letter(run: Callable[..., Any]) -> None:
    """Failures wait out the backoff by the store's clock, then dead-letter."""
    clock = FakeClock()

    async def handler(attempt: AsyncAttempt) -> None:
        raise ValueError("no")

    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("bad", lane="L"), NewEvent("next", lane="L")])
        worker = quick(store, handler, backoff=Backoff(base_ms=500, jitter=0), max_failures=2)
        assert await worker.run_session("s") == "idle"
        [bad, _] = await store.read("s")
        assert bad.claim_expires_at == clock.now() + timedelta(milliseconds=500)
        clock.advance(ms=500)
        assert await worker.run_session("s") == "settled"
        [bad, after] = await store.read("s")
        assert bad.failed_at is not None and after.attempt_count == 0
        assert "ValueError: no" in (bad.last_error or "")
        assert worker.outcomes == {"failed": 1, "dead_lettered": 1}

    run(body, clock=clock)


def test_async_transactional_rows_commit_with_the_completion_or_not_at_all(
    run: Callable[..., Any],
) -> None:
    """The handler's row commits with its completion; a failing handler leaves none."""

    async def handler(attempt: AsyncAttempt) -> None:
        assert attempt.connection is not None
        await attempt.connection.execute(
            insert(handled).values(session_id=attempt.session_id, idx=attempt.event.index)
        )
        if attempt.event.type == "bad":
            raise RuntimeError("after the write")

    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("good"), NewEvent("bad")])
        worker = quick(store, handler, transactional=True, max_failures=1)
        assert await worker.run_session("s") == "settled"
        async with store.engine.connect() as connection:
            found = (await connection.execute(select(handled.c.idx))).scalars().all()
        assert found == [1]
        good, bad = await store.read("s")
        assert good.processed_by_attempt == 1 and bad.failed_at is not None

    run(body)


def lose_first_reply(store: AsyncStore, method: str) -> list[Any]:
    """``store.<method>`` commits, and its first reply is lost (STORE_UNAVAILABLE), as a
    dropped connection would lose it; the results it committed, in order."""
    real = getattr(store, method)
    results: list[Any] = []

    async def after_commit(*args: Any, **kwargs: Any) -> Any:
        results.append(await real(*args, **kwargs))
        if len(results) == 1:
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "lost (injected after commit)")
        return results[-1]

    setattr(store, method, after_commit)
    return results


def test_async_lost_reply_after_commit_replays(run: Callable[..., Any]) -> None:
    """A completion whose reply is lost is retried with the same ids: a replay."""

    async def handler(attempt: AsyncAttempt) -> list[NewEvent]:
        return [NewEvent("child", settled=True)]

    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("t")])
        results = lose_first_reply(store, "complete_attempt")
        worker = quick(store, handler)
        assert await worker.run_session("s") == "settled"
        assert [e.id for e in results[0].events] == [e.id for e in results[1].events]
        assert len(await store.read("s")) == 2

    run(body)


def test_async_claim_whose_reply_was_lost_is_taken_back(run: Callable[..., Any]) -> None:
    """run_session: the worker's own claims from a lost claim reply are served now."""

    async def handler(attempt: AsyncAttempt) -> None:
        return None

    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("t")])
        lose_first_reply(store, "claim_available")
        worker = quick(store, handler, ttl_ms=60_000)
        assert await worker.run_session("s") == "settled"
        [event] = await store.read("s")
        assert event.processed_by_attempt == 1
        assert worker.outcomes == {"completed": 1}

    run(body)


def test_async_stop_releases_what_was_not_handled(run: Callable[..., Any]) -> None:
    """stop() during a batch: the running handler finishes, the rest is released."""

    async def body(store: AsyncStore) -> None:
        began = asyncio.Event()

        async def handler(attempt: AsyncAttempt) -> None:
            began.set()
            await asyncio.sleep(0.2)

        await store.append("s", [NewEvent("t") for _ in range(3)])
        worker = quick(store, handler, ttl_ms=60_000)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(began.wait(), 10)
        worker.stop()
        await asyncio.wait_for(task, 10)
        first, *rest = await store.read("s")
        assert first.processed_by_attempt == 1
        assert all(e.claim_holder is None and e.processed_at is None for e in rest)
        assert worker.outcomes == {"completed": 1, "released": 2}

    run(body)


def test_async_idle_worker_wakes_on_an_append_in_the_process(run: Callable[..., Any]) -> None:
    """An idle run() with a 30 s poll wakes at once when work is appended."""

    async def body(store: AsyncStore) -> None:
        done = asyncio.Event()

        async def handler(attempt: AsyncAttempt) -> None:
            done.set()

        worker = AsyncWorker(store, handler, poll_interval=30)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        await store.append("s", [NewEvent("t")])
        await asyncio.wait_for(done.wait(), 10)
        worker.stop()
        await asyncio.wait_for(task, 10)

    run(body)


def test_async_reduce_folds_and_snapshots(run: Callable[..., Any]) -> None:
    """reduce_async folds read_state and stores a snapshot every N events."""

    def count(state: Any, event: a2sql.Event) -> Any:
        return {"n": state["n"] + 1, "last": event.index}

    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("t", settled=True) for _ in range(5)])
        state = await a2sql.reduce_async(store, "s", "count", count, {"n": 0}, snapshot_every=3)
        assert state == {"n": 5, "last": 5}
        [info] = await store.inspect.list_snapshots("s")
        assert info.index == 5

    run(body)


def test_async_handler_error_with_a_nul_or_a_lone_surrogate_is_recorded_escaped(
    run: Callable[..., Any],
) -> None:
    """Texts the store refuses (NUL, lone surrogate) are escaped; the worker goes on."""
    undecodable = b"\xff".decode("utf-8", "surrogateescape")

    async def handler(attempt: AsyncAttempt) -> None:
        if attempt.event.type == "nul":
            raise ValueError("a\x00b")
        if attempt.event.type == "surrogate":
            raise OSError(2, "No such file", undecodable)

    async def body(store: AsyncStore) -> None:
        await store.append("s", [NewEvent("nul", lane="a"), NewEvent("surrogate", lane="b")])
        await store.append("t", [NewEvent("ok")])
        worker = quick(store, handler, max_failures=1)
        await worker.run(until_idle=True)
        nul, surrogate = await store.read("s")
        assert "ValueError: a\\x00b" in (nul.last_error or "")
        assert "\\udcff" in (surrogate.last_error or "")
        assert (await store.read("t"))[0].processed_by_attempt == 1
        assert worker.outcomes == {"dead_lettered": 2, "completed": 1}

    run(body)


def test_async_session_deleted_while_its_event_is_handled_does_not_stop_the_worker(
    run: Callable[..., Any],
) -> None:
    """The completion finds no event: that attempt ends, the other session is served."""

    async def handler(attempt: AsyncAttempt) -> None:
        if attempt.session_id == "doomed":
            await attempt.store.delete_session("doomed")

    async def body(store: AsyncStore) -> None:
        await store.append("doomed", [NewEvent("t")])
        await store.append("other", [NewEvent("t")])
        worker = quick(store, handler)
        await worker.run(until_idle=True)
        assert await store.read("doomed") == []
        assert (await store.read("other"))[0].processed_by_attempt == 1
        assert worker.outcomes == {"vanished": 1, "completed": 1}

    run(body)
