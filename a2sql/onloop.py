"""An ``AsyncStore``'s hot writes on PostgreSQL, sent whole from the event loop.

``append``, ``claim_available``, ``complete_attempt`` and ``fail_attempt`` do
their common case in one pipeline of two statements, the session's lock tried
and the guarded statement, answered in one round trip (a2sql.calls,
a2sql.ops.fused). Handed to a thread (a2sql.handoff), each would also cost the
hand-off there and back: on a machine where a thread switch costs tens of
microseconds that took an ``AsyncStore`` cycle to about half a ``Store``'s
speed. So an ``AsyncStore`` opened from a URL sends that pipeline itself, with
psycopg's async mode, on connections it keeps from its asyncio engine's pool
(as ``Store`` keeps the sync engine's: a2sql.pooled), and awaits its answer on
the loop. The rest, and a call whose pipeline wrote nothing, go to the thread
as before, after the lock.

The statements are the ones the sync path sends, compiled once
(``a2sql.direct.prepared``). Where the connection's default isolation level is
READ COMMITTED they go without ``BEGIN`` and ``COMMIT``, as one implicit
transaction, otherwise between the two; behind a connection pooler
(a2sql.preparation) none are sent this way.

The pipeline runs in a task of its own, never cancelled: psycopg cannot leave a
pipeline midway. A caller cancelled while it is on the server sends the server
a cancel request and waits for the answer, which decides: rolled back,
``CancelledError``; committed first, the result (a2sql.handoff.decided). The
statement never waits for the session's lock, only, rarely, for a row another
transaction holds, which the cancel ends at once.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from functools import partial
from typing import Any, TypeVar, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from a2sql.calls import Call, Context, collisions, lock_statement
from a2sql.direct import DirectTransaction, Params, Row, prepared
from a2sql.errors import closed_store
from a2sql.handoff import Abandoned, Job, decided
from a2sql.pooled import KEEP_IDLE, MAX_IDLE_S

T = TypeVar("T")

_BEGIN = b"BEGIN ISOLATION LEVEL READ COMMITTED"
_COMMIT = b"COMMIT"
# psycopg's PipelineStatus.OFF, as in a2sql.direct.
_PIPELINE_OFF = 0
_ASK = "SELECT pg_backend_pid(), current_setting('default_transaction_isolation')"


class _Held:
    """A connection of the asyncio engine's pool while the store keeps it: in psycopg's
    autocommit mode, a2sql sending ``BEGIN`` and ``COMMIT`` itself where it must."""

    __slots__ = (
        "connection",
        "cursor",
        "driver",
        "implicit",
        "loop",
        "raw",
        "set_autocommit",
        "side",
    )

    def __init__(
        self, connection: AsyncConnection, raw: PoolProxiedConnection, *, implicit: bool
    ) -> None:
        self.connection = connection
        self.raw = raw
        driver: Any = raw.driver_connection
        self.driver = driver
        self.implicit = implicit
        self.loop = asyncio.get_running_loop()
        self.set_autocommit = False
        # The statement's rows are read from ``cursor``; ``side`` runs the rest.
        self.cursor: Any = driver.cursor()
        self.side: Any = driver.cursor()

    async def pipeline(
        self,
        engine: AsyncEngine,
        dialect: Dialect,
        lock: tuple[Any, Params],
        statement: Any,
        params: Params,
    ) -> list[Row]:
        """The lock statement and ``statement`` in one pipeline, one transaction, one
        wait: ``statement``'s rows. A failure is raised as SQLAlchemy's ``DBAPIError``."""
        driver, side, cursor = self.driver, self.side, self.cursor
        lock_sql, lock_arguments = prepared(lock[0], dialect).arguments(lock[1])
        compiled = prepared(statement, dialect)
        sql, arguments = compiled.arguments(params)
        try:
            async with driver.pipeline():
                if not self.implicit:
                    await side.execute(_BEGIN)
                await side.execute(lock_sql, lock_arguments)
                await cursor.execute(sql, arguments)
                if not self.implicit:
                    await side.execute(_COMMIT)
            return compiled.rows(await cursor.fetchall()) if compiled.fetch else []
        except driver.Error as error:  # psycopg's, whichever it is
            # As on the sync path (a2sql.direct): a loss can surface as psycopg failing
            # to leave pipeline mode, the loss being that failure's context.
            stuck = driver.pgconn.pipeline_status != _PIPELINE_OFF
            context = error.__context__
            cause = context if stuck and isinstance(context, driver.Error) else error
            lost = stuck or driver.broken or driver.closed
            raise DirectTransaction.wrap(
                engine.sync_engine,
                cause,
                f"{lock_sql};\n{sql}",
                [lock_arguments, arguments],
                lost=lost,
            ) from cause

    async def release(self, *, invalidate: bool) -> None:
        """Put the connection back as it was taken, and give it back to the pool."""
        connection = self.connection
        try:
            if invalidate or self.driver.broken or self.driver.closed:
                await connection.invalidate()
            else:
                await self.cursor.close()
                await self.side.close()
                if self.set_autocommit:
                    await self.driver.set_autocommit(False)
        except Exception:  # lost meanwhile: the pool must not hand it out
            with suppress(Exception):
                await connection.invalidate()
        await connection.close()


class OnLoop:
    """Sends an ``AsyncStore``'s calls whole on its asyncio ``engine`` (PostgreSQL);
    ``dialect`` is the sync path's, which the statements are compiled for."""

    def __init__(self, engine: AsyncEngine, dialect: Dialect) -> None:
        self._engine = engine
        self._dialect = dialect
        self._idle: list[tuple[_Held, float]] = []
        # False once a connection was found behind a pooler: every call then goes
        # to the thread, which knows how to send statements there.
        self.usable = True
        self._closed = False

    @property
    def idle(self) -> int:
        """Connections kept checked out for the next calls, unused right now."""
        return len(self._idle)

    async def run(self, ctx: Context, call: Call[T]) -> T | None:
        """``call`` sent whole, its lock only tried: its result, or ``None`` if it wrote
        nothing (the lock was held, or the guard refused), for the way after the lock."""
        job = Job(call)
        running = asyncio.ensure_future(self._send(ctx, job))
        return await decided(job, running, partial(_interrupt, job))

    async def _send(self, ctx: Context, job: Job) -> Any:
        held = await self._take()
        if held is None:
            if job.abandoned:
                raise Abandoned
            return None
        failed = True
        try:
            result = await self._whole(held, ctx, job)
            failed = False
            return result
        finally:
            if job.interrupting is not None:
                # The cancel request reaches the server before the connection
                # serves another call, whose statement it would cancel.
                await asyncio.wait((job.interrupting,))
            await self._give_back(held, failed=failed)

    async def _whole(self, held: _Held, ctx: Context, job: Job) -> Any:
        call = job.call
        assert call.fused is not None
        lock = lock_statement(ctx, call, tried=True)
        fused = call.fused()  # the clock read now, before the lock
        job.send_whole()
        job.running_on(held.driver)
        try:
            with collisions([fused]):
                rows = await held.pipeline(
                    self._engine, self._dialect, lock, fused.guarded, fused.params
                )
        except Exception as error:
            if isinstance(error, DBAPIError) and error.connection_invalidated:
                raise  # whether it committed is unknown: said so, whatever the caller
            job.sent_whole(wrote=False)  # rolled back: Abandoned if the caller is gone
            raise
        finally:
            job.running_on(None)
        result = fused.answer(rows)
        job.sent_whole(wrote=result is not None)
        return result

    async def _take(self) -> _Held | None:
        if self._closed:
            raise closed_store()
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        while self._idle:
            held, since = self._idle.pop()
            if held.loop is not loop:
                continue  # of a loop that has ended: nothing can be awaited on it
            if now - since <= MAX_IDLE_S:
                return held
            # Back to the pool, so that its checks (pre-ping, recycle) apply again.
            await held.release(invalidate=False)
        connection = await self._engine.connect()
        try:
            raw = await connection.get_raw_connection()
            driver: Any = raw.driver_connection
            if not driver.autocommit:
                await driver.set_autocommit(True)
                autocommit_set = True
            else:
                autocommit_set = False
            async with driver.cursor() as cursor:
                await cursor.execute(_ASK)
                backend_pid, isolation = cast("tuple[int, str]", await cursor.fetchone())
        except BaseException:
            with suppress(Exception):
                await connection.invalidate()
            await connection.close()
            raise
        held = _Held(connection, raw, implicit=isolation == "read committed")
        held.set_autocommit = autocommit_set
        if backend_pid != driver.info.backend_pid:  # a pooler answered (a2sql.preparation)
            self.usable = False
            await held.release(invalidate=False)
            return None
        return held

    async def _give_back(self, held: _Held, *, failed: bool) -> None:
        if failed or self._closed or len(self._idle) >= KEEP_IDLE:
            await held.release(invalidate=failed)
        else:
            self._idle.append((held, time.monotonic()))

    def drop(self) -> None:
        """For a store dropped without ``close``: end the kept connections' sessions now,
        without a loop. Detached from the pool first, they are not reported to it as
        connections that were never given back."""
        while self._idle:
            held, _ = self._idle.pop()
            with suppress(Exception):
                driver = held.driver
                held.raw.detach()
                driver.pgconn.finish()

    async def close(self) -> None:
        """Give the kept connections back; those in use go back when their call ends."""
        self._closed = True
        loop = asyncio.get_running_loop()
        while self._idle:
            held, _ = self._idle.pop()
            if held.loop is loop:
                await held.release(invalidate=False)


async def _interrupt(job: Job) -> None:
    """Cancel the statement of a call sent whole whose caller was cancelled."""
    driver = job.driver
    if driver is not None:
        job.interrupting = asyncio.ensure_future(_cancel(driver))


async def _cancel(driver: Any) -> None:
    with suppress(Exception):  # a lost connection: nothing to cancel
        await driver.cancel_safe()
