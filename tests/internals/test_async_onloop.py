"""An AsyncStore opened from a PostgreSQL URL sends its hot writes whole from the event
loop (a2sql.execution.onloop): no thread, one round trip. What that must not cost: a cancelled
call that committed, a lock wait frozen on the loop, a connection left behind.
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any

import pytest
from sqlalchemy import Connection, text

import a2sql
from a2sql import AsyncStore, NewEvent
from a2sql.execution.settling import Settling
from bench.round_trips import round_trips
from tests.conftest import with_server_option
from tests.holding import DEADLINE_S, a_lock_awaited, ticking, wait_until_blocked_by
from tests.statement_gate import checked_out, connections_back


class Trace:
    """libpq's trace of the connection the store keeps for its next call from the loop.

    Whether a call went from the loop is read here, in round trips: a call the store
    hands to its sync path's thread sends nothing on this connection."""

    def __init__(self, store: AsyncStore) -> None:
        on_loop = store._on_loop
        assert on_loop is not None and on_loop.idle == 1
        self._file = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by ``read``)
        driver = on_loop._idle[0][0].driver
        self.backend_pid: int = driver.info.backend_pid
        self._pgconn = driver.pgconn
        self._pgconn.trace(self._file.fileno())

    def read(self) -> str:
        self._pgconn.untrace()
        self._file.seek(0)
        text = self._file.read()
        self._file.close()
        return text


def run(scenario: Any) -> Any:
    return asyncio.run(scenario())


def test_the_hot_writes_go_from_the_loop_in_one_round_trip_each(
    postgres_url: str,
) -> None:
    """append, claim_available, complete_attempt and fail_attempt: each one round trip on
    the connection kept from the asyncio engine's pool; a read is handed to the thread,
    as before, and sends nothing on it."""

    async def scenario() -> list[int]:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            await store.append("s", [NewEvent("t", 0)])  # a connection kept from now on
            trips = []
            for step in range(4):
                trace = Trace(store)
                if step == 0:
                    await store.append("s", [NewEvent("t", 1), NewEvent("t", 2)])
                elif step == 1:
                    claim = await store.claim_available("s", holder="w", ttl_ms=60_000)
                    assert [each.index for each in claim.events] == [1, 2, 3]
                elif step == 2:
                    done = await store.complete_attempt(
                        "s", index=1, attempt=1, events=[NewEvent("r", id="r1", settled=True)]
                    )
                    assert done.outcome == "completed"
                else:
                    failed = await store.fail_attempt(
                        "s", index=2, attempt=1, error="boom", max_failures=3
                    )
                    assert failed.outcome == "failed"
                trips.append(round_trips(trace.read()))
            trace = Trace(store)
            assert [e.index for e in await store.read("s")] == [1, 2, 3, 4]
            trips.append(round_trips(trace.read()))
            return trips

    assert run(scenario) == [1, 1, 1, 1, 0]


def test_a_claim_from_the_loop_that_finds_nothing_free_is_one_round_trip(
    postgres_url: str,
) -> None:
    """Busy, then settled: the claim's own statement answers, in the one round trip."""

    async def scenario() -> list[tuple[str, int]]:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            await store.append("s", [NewEvent("t", 0)])  # a connection kept from now on
            claimed = await store.claim_available("s", holder="w", ttl_ms=60_000)
            answers = []
            for step in range(2):
                if step == 1:
                    await store.complete_attempt("s", index=1, attempt=1, events=[])
                trace = Trace(store)
                claim = await store.claim_available("s", holder="w", ttl_ms=60_000)
                answers.append((claim.outcome, round_trips(trace.read())))
                if step == 0:
                    assert claim.retry_at == claimed.events[0].claim_expires_at
            return answers

    assert run(scenario) == [("busy", 1), ("settled", 1)]


@pytest.mark.parametrize("level", ["read committed", "serializable"])
def test_a_call_from_the_loop_begins_read_committed_unless_that_is_the_default(
    postgres_url: str, level: str
) -> None:
    """As on the sync path: without BEGIN and COMMIT only where the connection's default
    isolation level is READ COMMITTED; else a READ COMMITTED transaction, in the same
    single round trip."""
    setting = level.replace(" ", "\\ ")
    url = with_server_option(postgres_url, f"default_transaction_isolation={setting}")

    async def scenario() -> tuple[str, int]:
        async with a2sql.create_async_store(url, migrate=True) as store:
            await store.append("s", [NewEvent("t", 0)])
            trace = Trace(store)
            await store.append("s", [NewEvent("t", 1)])
            sent = trace.read()
            assert [e.index for e in await store.read("s")] == [1, 2]
            return sent, round_trips(sent)

    sent, trips = run(scenario)
    assert trips == 1
    assert ("BEGIN ISOLATION LEVEL READ COMMITTED" in sent) is (level != "read committed")


def test_a_call_from_the_loop_cancelled_on_the_server_raises_cancelled_and_wrote_nothing(
    postgres_url: str, holder: Connection
) -> None:
    """An append sent whole waits on a row lock (another transaction inserted its event id,
    uncommitted); its caller is cancelled: the server cancels the statement, the caller
    gets CancelledError, nothing was written, and the loop kept running meanwhile. The
    connection is kept for the next call, not replaced (a call cancelled this way cost a
    new connection before, and a cancelled caller then often cancelled its connecting)."""

    async def scenario() -> None:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            await store.append("s", [NewEvent("t", 0, id="e0")])
            before = checked_out(store)
            on_loop = store._on_loop
            assert on_loop is not None
            kept = on_loop._idle[0][0].driver.info.backend_pid
            holder.execute(
                text(
                    "insert into a2_events (session_id, idx, event_type, payload, event_id,"
                    " created_at) values ('other', 1, 't', 'null', 'e1', now())"
                )
            )
            call = asyncio.create_task(store.append("s", [NewEvent("t", 1, id="e1")]))
            try:
                async with ticking() as ticks:
                    blocked = await wait_until_blocked_by(holder)
                    await asyncio.sleep(0.2)
                assert ticks.count >= 10, "the loop froze while the call waited"
                assert blocked == [kept], "the call waited on another connection than the loop's"
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(call, DEADLINE_S)
            finally:
                holder.rollback()
            assert [e.id for e in await store.read("s")] == ["e0"]
            await connections_back(store, before)
            assert [held.driver.info.backend_pid for held, _ in on_loop._idle] == [kept]
            result = await store.append("s", [NewEvent("t", 1, id="e1")])
            assert [e.index for e in result.events] == [2]

    run(scenario)


def test_a_call_from_the_loop_finding_its_session_locked_waits_for_it_on_the_loop(
    postgres_url: str,
) -> None:
    """Another transaction holds the session: the append sent whole from the loop waits
    for the lock on the server, in its one round trip, while the loop runs on; once the
    holder commits, it appends, and the next call goes the same way."""
    holder_store = a2sql.create_store(postgres_url, migrate=True)

    async def scenario() -> None:
        async with a2sql.create_async_store(postgres_url, migrate=False) as store:
            await store.append("s", [NewEvent("t", 0, id="e0")])
            with holder_store.begin() as connection:
                holder_store.using(connection).append("s", [NewEvent("t", id="held")])
                trace = Trace(store)
                kept = trace.backend_pid
                call = asyncio.create_task(store.append("s", [NewEvent("t", 1, id="e1")]))
                async with ticking() as ticks:
                    waiting = await a_lock_awaited(postgres_url)
                    await asyncio.sleep(0.2)
                assert ticks.count >= 10, "the loop froze while the call waited"
                assert not call.done()
                assert kept in waiting
            result = await asyncio.wait_for(call, DEADLINE_S)
            assert round_trips(trace.read()) == 1
            assert [e.index for e in result.events] == [3]
            trace = Trace(store)
            await store.append("s", [NewEvent("t", 2, id="e2")])
            assert round_trips(trace.read()) == 1
            assert [e.id for e in await store.read("s")] == ["e0", "held", "e1", "e2"]

    try:
        run(scenario)
    finally:
        holder_store.close()


async def two_appends(store: AsyncStore) -> list[str]:
    """Appends 1 and 2 to session "s": for each, "appended" or the error's code."""
    outcomes = []
    for n in (1, 2):
        try:
            await store.append("s", [NewEvent("t", n)])
            outcomes.append("appended")
        except a2sql.A2Error as error:
            outcomes.append(error.code.value)
    return outcomes


def test_kept_connections_terminated_by_the_server_fail_one_call_then_are_replaced(
    postgres_url: str, holder: Connection
) -> None:
    """The server ends every connection kept for calls from the loop (a restart, say):
    the next call fails with STORE_UNAVAILABLE, and takes the other kept ones with it, so
    the call after it succeeds on a new connection."""

    async def scenario() -> list[str]:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            await asyncio.gather(*(store.append(f"s{n}", [NewEvent("t", 0)]) for n in range(3)))
            on_loop = store._on_loop
            assert on_loop is not None and on_loop.idle == 3
            pids = [held.driver.info.backend_pid for held, _ in on_loop._idle]
            holder.execute(
                text("select pg_terminate_backend(pid) from unnest(:p) as pid"), {"p": pids}
            )
            holder.commit()
            outcomes = await two_appends(store)
            assert [e.payload for e in await store.read("s")] == [2]
        return outcomes

    assert run(scenario) == ["STORE_UNAVAILABLE", "appended"]


# --- holding a cancellation back (a2sql.execution.settling) ------------------------------------


def test_a_settling_coroutine_runs_to_its_end_through_cancellations() -> None:
    """The awaiting task is cancelled twice while the coroutine waits on a future and
    sleeps: the coroutine still runs to its end with its own future untouched, its
    result is returned, and the cancellations are counted, ``on_cancel`` called once."""
    calls: list[str] = []

    async def work(done: asyncio.Future[str]) -> str:
        await asyncio.sleep(0)
        value = await done  # never cancelled, though the task awaiting it is
        await asyncio.sleep(0.01)
        return value + "!"

    async def scenario() -> tuple[str, int, bool, int]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        settling = Settling(work(done), lambda: calls.append("cancel"))

        async def awaiting() -> str:
            return await settling

        task = asyncio.create_task(awaiting())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        done.set_result("answer")
        result = await task
        assert settling.cancelled is not None
        return result, settling.cancels, done.cancelled(), task.cancelling()

    result, cancels, future_cancelled, cancelling = run(scenario)
    assert (result, cancels, future_cancelled) == ("answer!", 2, False)
    assert cancelling == 2  # held back, not taken back: that is the caller's decision
    assert calls == ["cancel"]


def test_a_settling_coroutine_uncancelled_raises_its_own_error() -> None:
    async def work() -> None:
        await asyncio.sleep(0.001)
        raise ValueError("its own")

    async def scenario() -> None:
        settling = Settling(work(), lambda: None)
        with pytest.raises(ValueError, match="its own"):
            await settling
        assert settling.cancelled is None and settling.cancels == 0

    run(scenario)


def test_a_dead_connection_from_the_pool_fails_the_call_as_unavailable(
    postgres_url: str, holder: Connection
) -> None:
    """The pool hands the loop a connection the server has ended (no pre-ping): the call
    fails with STORE_UNAVAILABLE, not the driver's own error, and the next one works.
    (Found by the torture run: psycopg's AdminShutdown escaped a worker.)"""

    async def scenario() -> list[str]:
        async with a2sql.create_async_store(postgres_url, migrate=True) as store:
            async with store.engine.connect() as connection:
                pid = (await connection.execute(text("select pg_backend_pid()"))).scalar_one()
                await connection.commit()  # back to the pool idle, as the pool thinks
                holder.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})
                holder.commit()
            outcomes = await two_appends(store)
            assert [e.payload for e in await store.read("s")] == [2]
        return outcomes

    assert run(scenario) == ["STORE_UNAVAILABLE", "appended"]
