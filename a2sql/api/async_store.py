"""AsyncStore: the asyncio facade. It runs the very calls of ``Store``: whole on a sync
engine where it can (a2sql.execution.threads), the hot writes on PostgreSQL sent whole from the
loop (a2sql.execution.onloop), else through ``run_sync`` on its asyncio engine."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import Any, Literal, TypeVar

from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from a2sql import migrate as migrations
from a2sql.api.stream import AsyncEventStream
from a2sql.backends import backend_of
from a2sql.backends.sqlite_file import DatabaseFile
from a2sql.core.clock import Clock
from a2sql.core.errors import DRIVER_FAILURES, closed_store, from_driver_error, invalid
from a2sql.core.records import (
    JSON,
    AppendResult,
    CancelResult,
    ClaimRef,
    ClaimResult,
    CompleteResult,
    Completion,
    DeadLetterPage,
    DeleteResult,
    Dispatch,
    EventPage,
    FailResult,
    InFlight,
    NewEvent,
    Overview,
    PresenceEntry,
    PruneResult,
    ReleaseResult,
    RenewResult,
    RetryResult,
    SessionPage,
    SessionSummary,
    SignalResult,
    SkipResult,
    SnapshotInfo,
    StateRead,
    StoredEvent,
    StoreTotals,
)
from a2sql.execution.connecting import opened
from a2sql.execution.onloop import OnLoop
from a2sql.execution.raw import observed
from a2sql.execution.running import run_in_savepoint, run_own_transaction
from a2sql.execution.threads import Abandoned, Job, ThreadRunner, decided
from a2sql.notify.wakeups import StoreWakeups
from a2sql.plans import operations
from a2sql.plans.kinds import Answered, Context, Plan
from a2sql.sql.queries.overview import SessionState

T = TypeVar("T")


async def _own(connection: AsyncConnection) -> None:
    """As ``Backend.own_connection``: set to run a2sql's own transactions."""
    level = backend_of(connection).own_isolation_level
    if level is not None:
        await connection.execution_options(isolation_level=level)


class AsyncOperations:
    """The store's operations as coroutines, on a store's own transactions or the caller's.

    ``AsyncStore`` runs each in a transaction of its own;
    ``async_store.using(async_connection)`` runs them in the caller's transaction.
    """

    _ctx: Context
    presence: AsyncPresence
    inspect: AsyncInspector

    async def _run(self, call: Plan[T] | Answered[T]) -> T:
        raise NotImplementedError

    # --- the contract ---------------------------------------------------------

    async def append(self, session_id: str, events: Sequence[NewEvent]) -> AppendResult:
        """Append events to the session, or replay a batch appended before."""
        return await self._run(operations.append(self._ctx, session_id, events))

    async def read(
        self, session_id: str, *, after_index: int | None = None, through_index: int | None = None
    ) -> list[StoredEvent]:
        """Events with ``after_index < index <= through_index``, by index."""
        return await self._run(operations.read(session_id, after_index, through_index))

    async def claim_available(
        self,
        session_id: str,
        *,
        holder: str,
        ttl_ms: int,
        expires_at: datetime | None = None,
        exclude_indexes: Sequence[int] = (),
        limit: int | None = None,
    ) -> ClaimResult:
        """Claim the ready events that are free or whose claim expired: every one, or at
        most ``limit`` (1 to 1000), lowest indexes first."""
        return await self._run(
            operations.claim_available(
                self._ctx, session_id, holder, ttl_ms, expires_at, exclude_indexes, limit
            )
        )

    async def claim_next(
        self,
        *,
        holder: str,
        ttl_ms: int,
        expires_at: datetime | None = None,
        limit: int | None = None,
        prefix: str = "",
    ) -> Dispatch:
        """Claim work in whichever session under ``prefix`` waited longest.

        The session whose oldest claimable event was created first is picked
        (ties by session id) and claimed in as ``claim_available(limit=limit)``
        would. ``idle`` when there is nothing to claim, with ``retry_at`` when
        something becomes claimable later. On PostgreSQL concurrent callers
        pass over sessions another transaction holds, so they never wait for
        each other. Sessions whose work is all dead letters, or behind them,
        are never picked.
        """
        return await self._run(
            operations.claim_next(self._ctx, holder, ttl_ms, expires_at, limit, prefix)
        )

    async def release_claims(
        self, session_id: str, *, holder: str, claims: Sequence[ClaimRef]
    ) -> ReleaseResult:
        """Give up claims at once, so another worker can take the events now.

        A released attempt can no longer complete; the next claim is a new
        attempt. Claims a later attempt took are listed as ``superseded``.
        """
        return await self._run(operations.release_claims(self._ctx, session_id, holder, claims))

    async def renew_claims(
        self,
        session_id: str,
        *,
        holder: str,
        claims: Sequence[ClaimRef],
        ttl_ms: int,
        expires_at: datetime | None = None,
    ) -> RenewResult:
        """Extend the claims ``holder`` still holds; report those a later attempt took."""
        return await self._run(
            operations.renew_claims(self._ctx, session_id, holder, claims, ttl_ms, expires_at)
        )

    async def complete_attempt(
        self, session_id: str, *, index: int, attempt: int, events: Sequence[NewEvent]
    ) -> CompleteResult:
        """Mark the event processed by ``attempt`` and append the returned events atomically."""
        return await self._run(
            operations.complete_attempt(self._ctx, session_id, index, attempt, events)
        )

    async def complete_attempts(
        self, session_id: str, completions: Sequence[Completion]
    ) -> list[CompleteResult]:
        """Several ``complete_attempt`` calls on one session in one transaction.

        Each completion is judged as ``complete_attempt`` would judge it, in
        order, seeing the ones before it; the results come back in the same
        order. An error for any of them (``EVENT_NOT_FOUND``,
        ``PARTIAL_DUPLICATE_BATCH``, ``IDEMPOTENCY_CONFLICT``) fails the whole
        call and writes nothing.
        """
        return await self._run(operations.complete_attempts(self._ctx, session_id, completions))

    async def fail_attempt(
        self,
        session_id: str,
        *,
        index: int,
        attempt: int,
        error: str,
        max_failures: int,
        retry_after_ms: int | None = None,
    ) -> FailResult:
        """Count a failure of ``attempt``; dead-letter the event at ``max_failures``.

        With ``retry_after_ms``, a failed event is claimable again only after that
        delay (``FailResult.retry_at``); without, at once.
        """
        return await self._run(
            operations.fail_attempt(
                self._ctx, session_id, index, attempt, error, max_failures, retry_after_ms
            )
        )

    async def read_state(self, session_id: str, reducer_name: str) -> StateRead:
        """The reducer's snapshot (or None) and every event after it."""
        return await self._run(operations.read_state(session_id, reducer_name))

    async def put_snapshot(
        self, session_id: str, reducer_name: str, index: int, state: JSON
    ) -> None:
        """Store a reducer's state up to ``index``, unless a later snapshot is stored."""
        return await self._run(
            operations.put_snapshot(self._ctx, session_id, reducer_name, index, state)
        )

    # --- time and control -----------------------------------------------------------

    async def signal(
        self, session_id: str, name: str, payload: JSON = None, *, id: str | None = None
    ) -> SignalResult:
        """Send the signal ``name`` to the session, waking its events waiting for it
        (``Store.signal``)."""
        return await self._run(operations.signal(self._ctx, session_id, name, payload, id))

    async def cancel_session(self, session_id: str, *, reason: str) -> CancelResult:
        """Mark every unprocessed event of the session processed (``Store.cancel_session``)."""
        return await self._run(operations.cancel_session(self._ctx, session_id, reason))

    # --- operators' repairs and retention -----------------------------------------

    async def retry_dead_letter(self, session_id: str, *, index: int) -> RetryResult:
        """Make the dead letter at ``index`` claimable again (``Store.retry_dead_letter``)."""
        return await self._run(operations.retry_dead_letter(session_id, index))

    async def skip_event(self, session_id: str, *, index: int, reason: str) -> SkipResult:
        """Mark an unprocessed event processed without an attempt (``Store.skip_event``)."""
        return await self._run(operations.skip_event(self._ctx, session_id, index, reason))

    async def delete_session(self, session_id: str) -> DeleteResult:
        """Delete the session's events and snapshots (``Store.delete_session``)."""
        return await self._run(operations.delete_session(self._ctx, session_id))

    async def prune(
        self, *, settled_before: datetime, prefix: str = "", limit: int = 1000
    ) -> PruneResult:
        """Delete up to ``limit`` settled sessions older than the cut (``Store.prune``),
        each in a short transaction of its own; call again until it returns 0 sessions."""
        plan = operations.prune(self._ctx, settled_before, prefix, limit)
        return operations.pruned(
            [await self._run(plan.session(sid)) for sid in await self._run(plan.candidates)]
        )


def _release(
    wakeups: StoreWakeups, sync_path: ThreadRunner | None, on_loop: OnLoop | None, *, wait: bool
) -> None:
    """What closing an ``AsyncStore`` releases besides its asyncio engine (``wait``: until
    the listener's connection is closed; the sync path's connections once its calls
    running have ended)."""
    wakeups.stop(wait=wait)
    if on_loop is not None:
        on_loop.drop()
    if sync_path is not None:
        sync_path.close(wait=wait)


class AsyncStore(AsyncOperations):
    """The store's methods as coroutines. Create it with ``a2sql.create_async_store``.

    The schema is checked (or upgraded) before the first operation, or on
    ``async with``; a mismatch raises ``A2Error(SCHEMA_MISMATCH)`` there.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        context: Context,
        *,
        owns_engine: bool,
        upgrade_schema: bool,
        serialize: bool = False,
        database_file: DatabaseFile | None = None,
        listen_url: URL | None = None,
        sync_path: ThreadRunner | None = None,
    ) -> None:
        self._engine = engine
        self._sync_path = sync_path
        self._on_loop = (
            OnLoop(engine, sync_path.engine.dialect)
            if sync_path is not None and context.backend.capabilities.one_statement_writes
            else None
        )
        self._file = database_file
        self._ctx = context
        self._owns_engine = owns_engine
        self._upgrade_schema = upgrade_schema
        self._schema_checked = False
        self._schema_lock = asyncio.Lock()
        # A memory database is a single connection: one transaction at a time.
        self._serial: AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if serialize else nullcontext()
        )
        self._closed = False
        self._wakeups = StoreWakeups(engine.sync_engine, listen_url)
        self.presence = AsyncPresence(self)
        self.inspect = AsyncInspector(self)
        # As Store's: dropped without close(), the store stops its listener
        # (thread and connection) when collected. Its engine's pool is left
        # to the garbage collector: closing asyncio connections needs a loop.
        self._release = weakref.finalize(
            self, _release, self._wakeups, sync_path, self._on_loop, wait=False
        )

    @property
    def execution_path(self) -> Literal["loop", "thread", "asyncio"]:
        """How the store's next call reaches the database. ``"loop"`` (PostgreSQL): each
        hot write (``append``, ``claim_available``, ``complete_attempt``,
        ``fail_attempt``) sent from the event loop in one pipeline, one round trip, the
        other calls whole in a thread, on the driver's cursor. ``"thread"``: every
        call whole in a thread (SQLite, or PostgreSQL behind a connection pooler).
        ``"asyncio"``: statement by statement on the asyncio engine, where the store
        was given its engine, or something observes it, or the database is SQLite
        memory. Decided for each call, as ``Store.execution_path`` is."""
        sync_path = self._sync_path
        if sync_path is None or observed(self._engine.sync_engine):
            return "asyncio"
        on_loop = self._on_loop
        return "loop" if on_loop is not None and on_loop.usable else "thread"

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy asyncio engine the store runs on."""
        return self._engine

    async def ensure_schema(self) -> None:
        """Check (or upgrade) the schema now rather than at the first operation."""
        if self._schema_checked:
            return
        async with self._schema_lock:
            if self._schema_checked:
                return
            async with self._connection() as connection:
                await connection.run_sync(
                    lambda c: migrations.ensure_schema_on(
                        c,
                        upgrade_allowed=self._upgrade_schema,
                        lock_timeout_ms=self._ctx.lock_timeout_ms,
                    )
                )
            self._schema_checked = True

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        if self._closed:
            raise closed_store()
        if self._file is not None:
            self._file.check()
        try:
            async with self._serial:
                connection = await opened(self._engine)
                try:
                    await _own(connection)
                    yield connection
                finally:
                    if self._closed and self._owns_engine:
                        # The store closed meanwhile, its engine disposed of: given
                        # back to its pool, the connection would stay open until
                        # collected.
                        await connection.invalidate()
                    await asyncio.shield(connection.close())
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error

    async def _run(self, call: Plan[T] | Answered[T]) -> T:
        """Run one call in one transaction, the same body as ``Store`` runs: whole on the
        sync path where the store has one and nothing watches its engine (a2sql.execution.threads),
        else statement by statement through the asyncio engine."""
        if isinstance(call, Answered):
            # Nothing to run, but a call still lets the loop turn (a2sql.execution.threads).
            await asyncio.sleep(0)
            return call.result
        await self.ensure_schema()
        sync_path = self._sync_path
        if sync_path is not None and not observed(self._engine.sync_engine):
            if self._closed:
                raise closed_store()
            try:
                result = await self._whole_or_handed_off(sync_path, call)
            except DRIVER_FAILURES as error:
                raise from_driver_error(error) from error
        else:
            result = await self._on_asyncio_engine(call)
        if call.lock_session is not None and call.wakes(result):
            self._wakeups.wake(call.lock_session)
        return result

    async def _whole_or_handed_off(self, sync_path: ThreadRunner, call: Plan[T]) -> T:
        """``call`` sent whole from the loop where it can be (a2sql.execution.onloop), else, or when
        that wrote nothing, handed to the sync path's thread."""
        on_loop, ctx = self._on_loop, self._ctx
        if on_loop is not None and on_loop.usable and call.one_statement is not None:
            result = await on_loop.run(ctx, call)
            if result is not None:
                return result
            # Not the common case (a replay, a stale attempt): the full path.
            call = call._replace(one_statement=None)
        return await sync_path.run(ctx, call)

    async def _on_asyncio_engine(self, call: Plan[T]) -> T:
        """``call`` in a transaction on the asyncio engine, as a task of its own whose
        commit is never cancelled: a commit cancelled midway may have committed. The
        call and its cancelled caller race for one decision, as a handed-off call does
        (a2sql.execution.threads.Job): cancelled before the commit began, the transaction rolls
        back; later, the call completes."""
        job = Job(call)
        running = asyncio.ensure_future(self._transaction(job))
        return await decided(job, running, partial(self._abandoned, running))

    async def _abandoned(self, running: asyncio.Future[Any]) -> None:
        if self._ctx.backend.capabilities.cancellable_statements:
            # The running statement (a lock wait, say) is cancelled, and the
            # caller's CancelledError comes once rolled back.
            running.cancel()
            await asyncio.wait([running])
        # On SQLite the statements run to their end, then roll back: an aiosqlite
        # call cancelled midway can leave its connection's close waiting for ever
        # (SQLAlchemy 2.1, aiosqlite 0.22), the pool short.

    async def _transaction(self, job: Job) -> Any:
        async with self._connection() as connection:
            if job.abandoned:  # cancelled while it waited for a connection
                raise Abandoned
            async with connection.begin():
                result = await connection.run_sync(run_own_transaction, self._ctx, job.call)
                if not job.commit():
                    raise Abandoned
        if self._file is not None and not job.call.read_only:
            # As Store's: a write that went to a file deleted meanwhile is not done.
            self._file.check()
        return result

    # --- the caller's transaction ------------------------------------------------

    def using(self, connection: AsyncConnection) -> AsyncUsingConnection:
        """The store's operations in the caller's transaction on ``connection``.

        As ``Store.using``: each runs in a savepoint of that transaction and
        neither commits nor rolls it back. ``connection`` is an
        ``AsyncConnection`` of this store's database with a transaction begun;
        one that cannot serve is refused as there.
        """
        return AsyncUsingConnection(self, connection)

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """As ``Store.begin``: a connection in a new transaction, committed when the block
        ends, rolled back if it raises; on SQLite it holds the write lock from the start."""
        await self.ensure_schema()
        if self._closed:
            raise closed_store()
        if self._file is not None:
            self._file.check()
        # Only a2sql's own statements are mapped to A2Error: the caller's keep theirs.
        try:
            connection = await opened(self._engine)
            await _own(connection)
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error
        try:
            async with connection.begin():
                try:
                    await connection.run_sync(
                        self._ctx.backend.begin_own,
                        read_only=False,
                        busy_timeout_ms=self._ctx.lock_timeout_ms,
                    )
                except DRIVER_FAILURES as error:
                    raise from_driver_error(error) from error
                yield connection
        finally:
            await connection.close()

    def stream(
        self, session_id: str, *, start_after: int = 0, poll_interval: float | None = None
    ) -> AsyncEventStream:
        """Every event after ``start_after``, then new ones as they commit (``async for``).

        Wakes as ``Store.stream`` does; ``aclose()`` or cancelling the task ends it.
        """
        sid, start, interval = operations.stream_start(
            self._ctx, session_id, start_after, poll_interval
        )
        self._wakeups.listen()
        return AsyncEventStream(
            lambda after, limit: self._run(operations.stream_page(sid, after, limit)),
            lambda callback: self._wakeups.subscribe(sid, callback),
            start_after=start,
            poll_interval=interval,
        )

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread) whenever a session of the database may
        have new work: events appended or completed with children, claims released.

        A hint, as for streams: from this process's stores at once, on PostgreSQL
        also from other processes' (LISTEN/NOTIFY). Returns the unsubscribe.
        Idle workers wait on it.
        """
        return self._wakeups.watch(callback)

    @property
    def clock(self) -> Clock:
        """The clock every stored time comes from."""
        return self._ctx.clock

    # --- lifetime ---------------------------------------------------------------

    async def close(self) -> None:
        """Release the engine (one passed in by the caller is left open).

        Calls not begun fail with ``STORE_CLOSED``. Those running finish, and their
        connections are closed as they end: none is left open. ``close`` waits for
        those sent from the event loop (a round trip each), not for the others (one
        may be waiting for its session's lock)."""
        if self._closed:
            return
        self._closed = True
        self._release.detach()
        if self._sync_path is not None:
            # Here on the loop, where calls are handed to it: none is handed after.
            self._sync_path.stop()
        if self._on_loop is not None:
            await self._on_loop.close()
        await asyncio.to_thread(_release, self._wakeups, self._sync_path, self._on_loop, wait=True)
        if self._owns_engine:
            await self._engine.dispose()

    async def __aenter__(self) -> AsyncStore:
        try:
            await self.ensure_schema()
        except BaseException:
            # The caller never gets the store: release what it opened.
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class AsyncUsingConnection(AsyncOperations):
    """``async_store.using(async_connection)``: the operations in the caller's transaction."""

    def __init__(self, store: AsyncStore, connection: AsyncConnection) -> None:
        if not isinstance(connection, AsyncConnection):
            raise invalid(
                "connection",
                f"must be a SQLAlchemy AsyncConnection, got {type(connection).__name__}",
            )
        self._store = store
        self._ctx = store._ctx
        self._connection = connection
        self.presence = AsyncPresence(self)
        self.inspect = AsyncInspector(self)

    @property
    def connection(self) -> AsyncConnection:
        """The caller's connection the operations run on."""
        return self._connection

    async def _run(self, call: Plan[T] | Answered[T]) -> T:
        if isinstance(call, Answered):
            await asyncio.sleep(0)  # as AsyncStore._run
            return call.result
        if self._store._closed:
            raise closed_store()
        await self._store.ensure_schema()
        try:
            return await self._connection.run_sync(run_in_savepoint, self._ctx, call)
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error


class AsyncPresence:
    """``astore.presence``: ephemeral per-participant fields with a TTL."""

    def __init__(self, store: AsyncOperations) -> None:
        self._store = store

    async def set(
        self,
        ns: str,
        participant: str,
        values: Mapping[str, JSON],
        *,
        at: datetime | None = None,
        seen: int | None = None,
        ttl_ms: int,
    ) -> None:
        """Write fields last-writer-wins by ``at``; a ``None`` value deletes the field.

        ``at`` defaults to the store's clock at the write; ``seen`` is kept as
        given for the application and ordered by nothing, and defaults to
        ``at`` in ms since the Unix epoch.
        """
        store = self._store
        return await store._run(
            operations.presence_set(store._ctx, ns, participant, values, at, seen, ttl_ms)
        )

    async def read(self, ns: str) -> list[PresenceEntry]:
        """The live fields of the namespace, by participant then field (expired ones are
        gone); it writes nothing."""
        return await self._store._run(operations.presence_read(self._store._ctx, ns))


class AsyncInspector:
    """``astore.inspect``: sessions with counts and pages of events."""

    def __init__(self, store: AsyncOperations) -> None:
        self._store = store

    async def list_sessions(
        self,
        *,
        prefix: str = "",
        cursor: str | None = None,
        limit: int = 50,
        state: SessionState | None = None,
    ) -> SessionPage:
        """Sessions whose id starts with ``prefix``, after ``cursor``, ordered by id.

        ``state`` keeps those with a dead letter (``"dead_letters"``), a lane
        blocked by one (``"blocked"``), a live claim (``"claimed"``) or an event
        waiting for a signal (``"waiting"``): found from their unprocessed
        events, so a page costs what those hold, not the whole table."""
        return await self._store._run(
            operations.list_sessions(self._store._ctx, prefix, cursor, limit, state)
        )

    async def overview(self, *, prefix: str = "", bound: int = 10_000) -> Overview:
        """Ready, claimed, waiting and scheduled events, dead letters and blocked lanes
        under ``prefix``, each counted as far as ``bound`` (a count equal to it means at
        least that many), the oldest ready event's time, and the engine's own
        figures of the tables' sizes. Reads only events still to do, each count at
        most ``bound`` of them: cheap enough for every page view and scrape."""
        return await self._store._run(operations.overview(self._store._ctx, prefix, bound))

    async def event(self, event_id: str) -> StoredEvent | None:
        """The event with this id, in whichever session it is, or ``None``: one seek of
        the unique index of event ids (ids are unique across the database)."""
        return await self._store._run(operations.event_by_id(event_id))

    async def in_flight(self, *, limit: int = 100) -> InFlight:
        """Live claims (by expiry) and claims expired but not yet taken again (oldest
        first), at most ``limit`` of each: which holder has what, until when."""
        return await self._store._run(operations.in_flight(self._store._ctx, limit))

    async def read_events(
        self,
        session_id: str,
        *,
        after_index: int = 0,
        through_index: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A page of events, capped at the session's last index at the call."""
        return await self._store._run(
            operations.read_events(session_id, after_index, through_index, limit)
        )

    async def list_snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """The session's snapshots, by reducer name."""
        return await self._store._run(operations.list_snapshots(session_id))

    async def session(self, session_id: str) -> SessionSummary | None:
        """The summary of exactly this session (not a prefix), ``None`` if it has no events."""
        return await self._store._run(operations.session_summary(self._store._ctx, session_id))

    async def list_dead_letters(
        self, *, prefix: str = "", cursor: str | None = None, limit: int = 50
    ) -> DeadLetterPage:
        """Dead-lettered events under ``prefix``, by session id then index."""
        return await self._store._run(operations.list_dead_letters(prefix, cursor, limit))

    async def prunable(self, *, settled_before: datetime, prefix: str = "") -> PruneResult:
        """What ``prune`` would delete now (``Inspector.prunable``)."""
        return await self._store._run(operations.prunable(self._store._ctx, settled_before, prefix))

    async def totals(self) -> StoreTotals:
        """Counts over the whole database (``Inspector.totals``)."""
        return await self._store._run(operations.totals(self._store._ctx))

    async def list_waiting_and_scheduled(
        self, session_id: str, *, after_index: int = 0, limit: int = 50
    ) -> list[StoredEvent]:
        """The session's waiting and scheduled events, by index
        (``Inspector.list_waiting_and_scheduled``)."""
        return await self._store._run(
            operations.list_waiting_and_scheduled(self._store._ctx, session_id, after_index, limit)
        )
