"""An ``AsyncStore``'s hot writes on PostgreSQL, sent whole from the event loop.

``append``, ``claim_available``, ``complete_attempt`` and ``fail_attempt`` do
their common case in one pipeline of two statements, the session's lock and
the statement, answered in one round trip (a2sql.execution.running,
a2sql.backends.postgresql.one_statement). Handed to a thread (a2sql.execution.threads), each would
also cost the
hand-off there and back: on a machine where a thread switch costs tens of
microseconds that took an ``AsyncStore`` cycle to about half a ``Store``'s
speed. So an ``AsyncStore`` opened from a URL writes that pipeline itself
(a2sql.execution.wire, as the sync path does), on psycopg connections it keeps from its
asyncio engine's pool (as ``Store`` keeps the sync engine's: a2sql.execution.transactions),
and awaits its answer on the loop. The rest, and a call whose statement wrote
nothing, go to the thread as before.

The statements are the ones the sync path sends, compiled once
(``a2sql.execution.raw.prepared``). Where the connection's default isolation level is
READ COMMITTED they go without ``BEGIN`` and ``COMMIT``, as one implicit
transaction, otherwise between the two; behind a connection pooler
(a2sql.execution.pooler) none are sent this way.

Once sent, a call is the server's to commit or roll back, and a pipeline
cannot be left midway: a caller cancelled meanwhile has the server cancel the
statement and waits for its answer, which decides (``OnLoop.run``,
a2sql.execution.settling). A wait for the session's lock (or, rarely, for a row
another transaction holds) is what the cancel ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from a2sql.core.errors import closed_store
from a2sql.execution.connecting import invalidated, opened
from a2sql.execution.pooler import answered_by_pooler, implicit_at
from a2sql.execution.raw import (
    BEGIN_READ_COMMITTED,
    COMMIT,
    Params,
    RawTransaction,
    Row,
    prepared,
)
from a2sql.execution.running import collisions, lock_statements
from a2sql.execution.settling import Settling
from a2sql.execution.transactions import KEEP_IDLE, MAX_IDLE_S
from a2sql.plans.kinds import Context, Plan

if TYPE_CHECKING:
    from a2sql.execution.wire import Wire

T = TypeVar("T")

_ASK = "SELECT pg_backend_pid(), current_setting('default_transaction_isolation')"


class _Held:
    """A connection of the asyncio engine's pool while the store keeps it: in psycopg's
    autocommit mode, a2sql sending ``BEGIN`` and ``COMMIT`` itself where it must."""

    __slots__ = (
        "connection",
        "driver",
        "implicit",
        "interrupting",
        "loop",
        "raw",
        "set_autocommit",
        "wire",
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
        # The cancel request sent for the call running on it, if any.
        self.interrupting: asyncio.Future[None] | None = None
        from a2sql.execution.wire import Wire  # psycopg's: PostgreSQL only

        self.wire: Wire = Wire(driver, raw.info)

    async def pipeline(
        self,
        engine: AsyncEngine,
        dialect: Dialect,
        lock: tuple[Any, Params],
        statement: Any,
        params: Params,
        then: tuple[Any, Params] | None,
    ) -> list[Row]:
        """The lock statement and ``statement`` in one pipeline, one transaction, one
        wait: ``statement``'s rows. ``then``: a statement sent with them, run after
        the commit in a transaction of its own, whose failure is not the call's. A
        failure is raised as SQLAlchemy's ``DBAPIError``."""
        driver, wire = self.driver, self.wire
        lock_sql, lock_arguments = prepared(lock[0], dialect).arguments(lock[1])
        compiled = prepared(statement, dialect)
        sql, arguments = compiled.arguments(params)
        try:
            with wire:
                if not self.implicit:
                    wire.add(BEGIN_READ_COMMITTED)
                wire.add(lock_sql, lock_arguments)
                wire.add(sql, arguments, fetch=True)
                if not self.implicit:
                    wire.add(COMMIT)
                wire.sync()
                if then is not None:
                    wire.add(*prepared(then[0], dialect).arguments(then[1]), best_effort=True)
                    wire.sync()
                rows = await wire.answer_async(self._ready)
        except driver.Error as error:  # psycopg's, whichever it is
            lost = bool(driver.broken or driver.closed)
            raise RawTransaction.wrap(
                engine.sync_engine,
                error,
                f"{lock_sql};\n{sql}",
                [lock_arguments, arguments],
                lost=lost,
            ) from error
        return compiled.rows(rows) if compiled.fetch else []

    async def _ready(self, fileno: int, writing: bool) -> None:
        """Once ``fileno`` is readable (or writable, ``writing``)."""
        loop = self.loop
        ready = loop.create_future()
        if writing:
            loop.add_writer(fileno, _resolve, ready)
        else:
            loop.add_reader(fileno, _resolve, ready)
        try:
            await ready
        finally:
            if writing:
                loop.remove_writer(fileno)
            else:
                loop.remove_reader(fileno)

    async def release(self, *, invalidate: bool) -> None:
        """Put the connection back as it was taken, and give it back to the pool."""
        connection = self.connection
        try:
            if invalidate or self.driver.broken or self.driver.closed:
                await connection.invalidate()
            elif self.set_autocommit:
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
        # Work the callers do not wait for: giving connections back, cancel requests.
        self._pending: set[asyncio.Future[Any]] = set()
        # Calls between taking a connection and giving it back (or to ``_pending``),
        # and what ``close`` waits on for them to end.
        self._running = 0
        self._drained: asyncio.Future[None] | None = None
        # The connections of the calls sent and not yet answered: ``close`` has the
        # server cancel their statements (a wait for a session's lock, say).
        self._sent: set[_Held] = set()

    @property
    def idle(self) -> int:
        """Connections kept checked out for the next calls, unused right now."""
        return len(self._idle)

    async def run(self, ctx: Context, call: Plan[T]) -> T | None:
        """``call`` sent whole with its lock: its result, or ``None`` if its statement
        wrote nothing (not the common case), for the full path.

        Once sent, the call is the server's to commit or roll back, and a pipeline
        cannot be left midway: a cancellation of the caller meanwhile is held back
        (``Settling``) and has the server cancel the statement. Its answer decides:
        rolled back (or nothing written), ``CancelledError``; committed first, the
        result, the cancellation taken back (``Task.uncancel``) as ``asyncio.wait_for``
        does for a task that finished anyway."""
        self._running += 1
        try:
            held = await self._take()
            if held is None:
                return None
            if self._closed:  # closed while a connection was awaited: nothing sent
                self._give_back(held)
                raise closed_store()
            settling: Settling[Any] = Settling(
                self._whole(held, ctx, call), partial(self._interrupt, held)
            )
            self._sent.add(held)
            try:
                result: T | None = await settling
            except BaseException as error:
                lost = isinstance(error, DBAPIError) and error.connection_invalidated
                if lost:
                    # As on the sync path: the idle ones are likely as dead (a server
                    # restart), those kept and those in the pool.
                    self._later(held.release(invalidate=True))
                    self._drop_idle()
                    self._later(self._engine.dispose())
                    raise  # whether it committed is unknown, and said so
                self._later(self._recovered(held, failed=True))
                if settling.cancelled is not None:
                    raise settling.cancelled from None  # rolled back on the server
                if self._closed and isinstance(error, DBAPIError):
                    raise closed_store() from error  # cancelled by close, rolled back
                raise
            finally:
                self._sent.discard(held)
            if settling.cancelled is None:
                self._give_back(held)
                return result
            self._later(self._recovered(held, failed=False))
            if result is None:
                raise settling.cancelled
            task = asyncio.current_task()
            if task is not None:
                for _ in range(settling.cancels):
                    task.uncancel()
            return result
        finally:
            self._running -= 1
            drained = self._drained
            if drained is not None and not self._running and not drained.done():
                drained.set_result(None)

    async def _whole(self, held: _Held, ctx: Context, call: Plan[T]) -> T | None:
        assert call.one_statement is not None
        lock, then = lock_statements(ctx, call, commits=True)
        fused = call.one_statement()
        with collisions(fused):
            rows = await held.pipeline(
                self._engine, self._dialect, lock, fused.statement, fused.params, then
            )
        return fused.answer(rows)

    def _interrupt(self, held: _Held) -> None:
        """Have the server cancel the statement of the call on ``held``."""
        held.interrupting = asyncio.ensure_future(_cancel(held.driver))

    async def _recovered(self, held: _Held, *, failed: bool) -> None:
        """``held`` back among the idle connections once any cancel request sent for its
        call has reached the server (a backend waiting for its next statement ignores
        it, as ``Store``'s threads rely on too), and, after a failed pipeline, the
        transaction ended as on the sync path (the driver's rollback); closed if that
        fails."""
        try:
            if held.interrupting is not None:
                await held.interrupting
                held.interrupting = None
            if failed:  # ROLLBACK, where a transaction a2sql began is still open
                await held.driver.rollback()
                held.wire.forget()  # psycopg's rollback may have deallocated them
        except Exception:
            await held.release(invalidate=True)
            return
        self._give_back(held)

    def _later(self, work: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """``work`` in a task of its own, which the caller does not wait for (nor cancel),
        and ``close`` does."""
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

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
            self._later(held.release(invalidate=False))
        connection = await opened(self._engine, self._later)
        try:
            raw = await connection.get_raw_connection()
            driver: Any = raw.driver_connection
            try:
                autocommit_set = not driver.autocommit
                if autocommit_set:
                    await driver.set_autocommit(True)
                async with driver.cursor() as cursor:
                    await cursor.execute(_ASK)
                    backend_pid, isolation = cast("tuple[int, str]", await cursor.fetchone())
            except driver.Error as error:  # lost since the pool's check, say
                lost = bool(driver.broken or driver.closed)
                raise RawTransaction.wrap(
                    self._engine.sync_engine, error, _ASK, (), lost=lost
                ) from error
        except BaseException:
            self._later(invalidated(connection))
            raise
        held = _Held(connection, raw, implicit=implicit_at(isolation))
        held.set_autocommit = autocommit_set
        if answered_by_pooler(backend_pid, driver):
            self.usable = False
            self._later(held.release(invalidate=False))
            return None
        return held

    def _drop_idle(self) -> None:
        while self._idle:
            held, _ = self._idle.pop()
            self._later(held.release(invalidate=True))

    def _give_back(self, held: _Held) -> None:
        if self._closed or len(self._idle) >= KEEP_IDLE:
            self._later(held.release(invalidate=False))
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
        """Give the kept connections back, and those in use once their calls end: given
        back after the engine is disposed of, one would stay open until collected. The
        server cancels the statements of calls still waiting (for a session's lock, say):
        rolled back, they fail with ``STORE_CLOSED``; committed first, they succeed."""
        self._closed = True
        loop = asyncio.get_running_loop()
        for held in self._sent:
            if held.interrupting is None:
                self._interrupt(held)
        while self._idle:
            held, _ = self._idle.pop()
            if held.loop is loop:
                self._later(held.release(invalidate=False))
        while self._running or self._pending:
            if self._running:
                self._drained = loop.create_future()
                await self._drained
            else:
                await asyncio.wait(list(self._pending))


def _resolve(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _cancel(driver: Any) -> None:
    with suppress(Exception):  # a lost connection: nothing to cancel
        await driver.cancel_safe()
