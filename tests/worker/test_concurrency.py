"""Many handlers per worker, handler timeouts, and what a stopping or idle worker does.

Every test runs on a SQLite file and on PostgreSQL, with real stores.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

import a2sql
from a2sql import A2Error, AsyncStore, ErrorCode, NewEvent, Store
from a2sql.worker import AsyncAttempt, AsyncWorker, Attempt, Backoff, Worker
from tests.worker.quick import quick


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


class Running:
    """How many handlers run at once, overall and per lane, and in what order each
    lane's events were handled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.lanes: dict[tuple[str, str | None], int] = defaultdict(int)
        self.lane_overlaps = 0
        self.order: dict[tuple[str, str | None], list[int]] = defaultdict(list)

    def enter(self, attempt: Attempt | AsyncAttempt) -> None:
        key = (attempt.session_id, attempt.event.lane)
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            if attempt.event.lane is not None:
                self.lanes[key] += 1
                if self.lanes[key] > 1:
                    self.lane_overlaps += 1
            self.order[key].append(attempt.event.index)

    def leave(self, attempt: Attempt | AsyncAttempt) -> None:
        with self.lock:
            self.now -= 1
            if attempt.event.lane is not None:
                self.lanes[(attempt.session_id, attempt.event.lane)] -= 1


def test_concurrency_runs_that_many_handlers_at_once(store: Store) -> None:
    """40 events in distinct sessions, handlers sleeping 200 ms, concurrency=8: eight
    at a time, all done in about five rounds (one handler at a time takes 8 s)."""
    for n in range(40):
        store.append(f"s{n}", [NewEvent("t")])
    running = Running()

    def handler(attempt: Attempt) -> None:
        running.enter(attempt)
        time.sleep(0.2)
        running.leave(attempt)

    worker = quick(store, handler, concurrency=8)
    started = time.monotonic()
    worker.run(until_idle=True)
    took = time.monotonic() - started
    assert worker.outcomes == {"completed": 40}
    assert running.peak == 8
    assert took < 4.0, took  # 1 s of sleeping in rounds of 8; 8 s one at a time
    assert all(e.processed_by_attempt == 1 for n in range(40) for e in store.read(f"s{n}"))


def test_a_lanes_events_are_never_handled_at_once_nor_out_of_order(store: Store) -> None:
    """Many sessions and lanes, random sleeps, concurrency=8: within a lane, one at a
    time and in index order; every event handled once."""
    rng = random.Random(7)
    expected: dict[tuple[str, str | None], list[int]] = defaultdict(list)
    for n in range(6):
        batch = [NewEvent("t", lane=rng.choice(["a", "b", "c", None])) for _ in range(10)]
        for stored in store.append(f"s{n}", batch).events:
            expected[(stored.session_id, stored.lane)].append(stored.index)
    running = Running()

    def handler(attempt: Attempt) -> None:
        running.enter(attempt)
        time.sleep(rng.uniform(0, 0.03))
        running.leave(attempt)

    worker = quick(store, handler, concurrency=8, batch=4)
    worker.run(until_idle=True)
    assert worker.outcomes == {"completed": 60}
    assert running.lane_overlaps == 0
    for key, indexes in expected.items():
        if key[1] is not None:
            assert running.order[key] == indexes, key
        else:
            assert sorted(running.order[key]) == indexes, key
    assert running.peak > 1


def test_a_handler_error_in_one_batch_does_not_stop_the_others(store: Store) -> None:
    for n in range(6):
        store.append(f"s{n}", [NewEvent("bad" if n == 0 else "ok")])

    def handler(attempt: Attempt) -> None:
        time.sleep(0.05)
        if attempt.event.type == "bad":
            raise ValueError("no")

    worker = quick(store, handler, concurrency=3, max_failures=1)
    worker.run(until_idle=True)
    assert worker.outcomes == {"completed": 5, "dead_lettered": 1}


def test_a_hung_handler_times_out_is_retried_and_its_late_result_dropped(
    store: Store,
) -> None:
    """timeout_s=1: the hung first attempt is failed about a second in, a second attempt
    completes, and the first attempt's late return submits nothing."""
    store.append("s", [NewEvent("ask")])
    release = threading.Event()
    returned_late = threading.Event()
    failed_at: list[float] = []

    def handler(attempt: Attempt) -> list[NewEvent]:
        if attempt.number == 1:
            release.wait(30)
            returned_late.set()
            return [NewEvent("late", settled=True)]
        failed_at.append(time.monotonic())
        return [NewEvent("reply", settled=True)]

    worker = quick(store, handler, timeout_s=1)
    started = time.monotonic()
    assert worker.run_session("s") == "settled"
    assert 0.9 < failed_at[0] - started < 5, failed_at[0] - started
    release.set()
    assert returned_late.wait(10)
    time.sleep(0.2)  # had it been submitted, it would be by now
    ask, reply = store.read("s")
    assert reply.type == "reply"
    assert ask.processed_by_attempt == 2 and ask.failure_count == 1
    assert "HandlerTimeout" in (ask.last_error or "") and "timeout_s=1" in (ask.last_error or "")
    assert worker.outcomes == {"failed": 1, "completed": 1}
    # The late attempt renewed nothing and completed nothing: still two events.
    assert len(store.read("s")) == 2


def test_a_hung_transactional_handler_times_out_and_writes_nothing(store: Store) -> None:
    store.append("s", [NewEvent("ask")])
    release = threading.Event()
    done = threading.Event()

    def handler(attempt: Attempt) -> None:
        if attempt.number == 1:
            release.wait(30)
            done.set()

    worker = quick(store, handler, timeout_s=0.5, transactional=True, max_failures=1)
    if store.engine.dialect.name == "sqlite":
        # The hung handler's transaction holds SQLite's write lock: failing its attempt
        # waits for it (documented); let it return soon after the timeout.
        threading.Timer(1.5, release.set).start()
    served = threading.Thread(target=worker.run_session, args=("s",))
    served.start()
    time.sleep(1.0)
    release.set()
    served.join(30)
    assert done.wait(10)
    [ask] = store.read("s")
    assert ask.failed_at is not None and "HandlerTimeout" in (ask.last_error or "")
    assert ask.processed_at is None


def test_a_stopped_worker_gives_up_an_unanswered_completion_after_grace(
    store: Store,
) -> None:
    """stop() while the store refuses every completion: the worker waits between tries
    (no tight loop) and gives up once grace_s has passed."""
    store.append("s", [NewEvent("ask")])
    tries: list[float] = []
    real = store.complete_attempt

    def refused(*args: Any, **kwargs: Any) -> Any:
        tries.append(time.monotonic())
        raise A2Error(ErrorCode.STORE_UNAVAILABLE, "the database is away (injected)")

    store.complete_attempt = refused  # type: ignore[method-assign]
    worker = quick(store, lambda attempt: worker.stop(), grace_s=1.0)
    try:
        started = time.monotonic()
        assert worker.run_session("s") == "stopped"
        took = time.monotonic() - started
    finally:
        store.complete_attempt = real  # type: ignore[method-assign]
    assert took < 5, took
    assert 2 <= len(tries) <= 12, len(tries)  # 50 ms doubling over 1 s, not thousands


def test_idle_workers_back_off_while_the_only_work_is_locked(url: str) -> None:
    """The only claimable session is locked by another transaction: an idle worker
    polls at a doubling interval, not every 10 ms."""
    with a2sql.create_store(url, migrate=True) as setup:
        setup.append("s", [NewEvent("t")])
        worker_store = a2sql.create_store(url)
        begins = [0]
        event.listen(worker_store.engine, "begin", lambda _c: begins.__setitem__(0, begins[0] + 1))
        worker = Worker(worker_store, lambda attempt: None, poll_interval=1.0)
        with setup.begin() as connection:
            # Holds the session's lock (on SQLite the whole database's) meanwhile.
            setup.using(connection).append("s", [NewEvent("held")])
            thread = threading.Thread(target=worker.run)
            thread.start()
            time.sleep(2.0)
            during = begins[0]
            worker.stop()
        thread.join(10)
        worker_store.close()
    # Doubling from 10 ms to the 1 s poll: about 8 tries in 2 s, not ~200.
    assert during <= 20, during


def test_one_line_per_event_says_the_error_and_a_dead_letter_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.append("s", [NewEvent("t")])

    def handler(attempt: Attempt) -> None:
        raise RuntimeError("kaputt\nsecond line")

    with caplog.at_level("INFO", logger="a2sql.worker"):
        quick(store, handler, max_failures=2).run_session("s")
    lines = [r for r in caplog.records if "outcome=" in r.getMessage()]
    assert [r.levelname for r in lines] == ["INFO", "WARNING"]
    failed, dead = (r.getMessage() for r in lines)
    assert "outcome=failed" in failed and "error=RuntimeError: kaputt" in failed
    assert "second line" not in failed
    assert "outcome=dead_lettered" in dead and "failures=2" in dead and "kaputt" in dead
    assert sum("kaputt" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("setting,value", [("concurrency", 0), ("timeout_s", 0)])
def test_concurrency_and_timeout_are_checked(store: Store, setting: str, value: Any) -> None:
    with pytest.raises(A2Error) as raised:
        Worker(store, lambda attempt: None, **{setting: value})
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT


# --- AsyncWorker -------------------------------------------------------------------


def run_async(url: str, body: Any) -> Any:
    async def main() -> Any:
        async with a2sql.create_async_store(url, migrate=True) as store:
            return await body(store)

    return asyncio.run(main())


def test_async_concurrency_runs_that_many_tasks_and_keeps_lanes(url: str) -> None:
    running = Running()

    async def body(store: AsyncStore) -> AsyncWorker:
        for n in range(16):
            await store.append(f"s{n}", [NewEvent("t", lane="L"), NewEvent("t", lane="L")])

        async def handler(attempt: AsyncAttempt) -> None:
            running.enter(attempt)
            # The first handlers wait until eight run at once, or long enough to show
            # they never will: the peak then says how many tasks the worker runs,
            # however long its claims take on a loaded machine (a fixed 100 ms let
            # the first finish before the eighth began, and the peak read 7).
            deadline = time.monotonic() + 10
            while running.peak < 8 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.01)
            running.leave(attempt)

        worker = AsyncWorker(store, handler, concurrency=8, poll_interval=0.05)
        await worker.run(until_idle=True)
        return worker

    worker = run_async(url, body)
    assert worker.outcomes == {"completed": 32}
    assert running.peak == 8 and running.lane_overlaps == 0
    assert all(order == sorted(order) for order in running.order.values())


def test_async_timeout_cancels_the_handler_and_fails_the_attempt(url: str) -> None:
    cancelled: list[int] = []

    async def body(store: AsyncStore) -> AsyncWorker:
        await store.append("s", [NewEvent("ask")])

        async def handler(attempt: AsyncAttempt) -> list[NewEvent]:
            if attempt.number == 1:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancelled.append(attempt.number)
                    raise
            return [NewEvent("reply", settled=True)]

        worker = AsyncWorker(
            store, handler, timeout_s=0.5, poll_interval=0.05, backoff=Backoff.none()
        )
        assert await asyncio.wait_for(worker.run_session("s"), 10) == "settled"
        return worker

    worker = run_async(url, body)
    assert cancelled == [1]
    assert worker.outcomes == {"failed": 1, "completed": 1}
    with a2sql.create_store(url) as store:
        ask, _reply = store.read("s")
        assert ask.processed_by_attempt == 2 and "HandlerTimeout" in (ask.last_error or "")


def test_async_stop_cancels_handlers_still_running_after_grace(url: str) -> None:
    """stop() with a handler that would run a minute: cancelled at grace_s, its claim
    released, run() returns."""

    async def body(store: AsyncStore) -> float:
        await store.append("s", [NewEvent("ask")])
        started = asyncio.Event()

        async def handler(attempt: AsyncAttempt) -> None:
            started.set()
            await asyncio.sleep(60)

        worker = AsyncWorker(store, handler, grace_s=0.5, poll_interval=0.05)
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        stopped = time.monotonic()
        worker.stop()
        await asyncio.wait_for(running, 10)
        return time.monotonic() - stopped

    took = run_async(url, body)
    assert took < 3, took
    with a2sql.create_store(url) as store:
        [ask] = store.read("s")
        assert ask.processed_at is None and ask.claim_holder is None
