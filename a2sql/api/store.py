"""Store: the synchronous facade. Each method builds a plan (a2sql.plans.operations) and runs it."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Literal, TypeVar

from sqlalchemy import URL, Connection, Engine

from a2sql.api.stream import EventStream
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
from a2sql.execution.running import run_in_savepoint, run_in_transaction
from a2sql.execution.transactions import KEEP_IDLE, TransactionRunner
from a2sql.notify.wakeups import StoreWakeups
from a2sql.plans import operations
from a2sql.plans.kinds import Answered, Context, Plan
from a2sql.sql.queries.overview import SessionState

T = TypeVar("T")


class Operations:
    """The store's operations, on a store's own transactions or on the caller's.

    ``Store`` runs each in a transaction of its own; ``store.using(connection)``
    runs them in the caller's transaction.
    """

    _ctx: Context
    presence: Presence
    inspect: Inspector

    def _run(self, call: Plan[T] | Answered[T]) -> T:
        raise NotImplementedError

    # --- the contract ---------------------------------------------------------

    def append(self, session_id: str, events: Sequence[NewEvent]) -> AppendResult:
        """Append events to the session, or replay a batch appended before."""
        return self._run(operations.append(self._ctx, session_id, events))

    def read(
        self, session_id: str, *, after_index: int | None = None, through_index: int | None = None
    ) -> list[StoredEvent]:
        """Events with ``after_index < index <= through_index``, by index."""
        return self._run(operations.read(session_id, after_index, through_index))

    def claim_available(
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
        return self._run(
            operations.claim_available(
                self._ctx, session_id, holder, ttl_ms, expires_at, exclude_indexes, limit
            )
        )

    def claim_next(
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
        return self._run(
            operations.claim_next(self._ctx, holder, ttl_ms, expires_at, limit, prefix)
        )

    def release_claims(
        self, session_id: str, *, holder: str, claims: Sequence[ClaimRef]
    ) -> ReleaseResult:
        """Give up claims at once, so another worker can take the events now.

        A released attempt can no longer complete; the next claim is a new
        attempt. Claims a later attempt took are listed as ``superseded``.
        """
        return self._run(operations.release_claims(self._ctx, session_id, holder, claims))

    def renew_claims(
        self,
        session_id: str,
        *,
        holder: str,
        claims: Sequence[ClaimRef],
        ttl_ms: int,
        expires_at: datetime | None = None,
    ) -> RenewResult:
        """Extend the claims ``holder`` still holds; report those a later attempt took."""
        return self._run(
            operations.renew_claims(self._ctx, session_id, holder, claims, ttl_ms, expires_at)
        )

    def complete_attempt(
        self, session_id: str, *, index: int, attempt: int, events: Sequence[NewEvent]
    ) -> CompleteResult:
        """Mark the event processed by ``attempt`` and append the returned events atomically."""
        return self._run(operations.complete_attempt(self._ctx, session_id, index, attempt, events))

    def complete_attempts(
        self, session_id: str, completions: Sequence[Completion]
    ) -> list[CompleteResult]:
        """Several ``complete_attempt`` calls on one session in one transaction.

        Each completion is judged as ``complete_attempt`` would judge it, in
        order, seeing the ones before it; the results come back in the same
        order. An error for any of them (``EVENT_NOT_FOUND``,
        ``PARTIAL_DUPLICATE_BATCH``, ``IDEMPOTENCY_CONFLICT``) fails the whole
        call and writes nothing.
        """
        return self._run(operations.complete_attempts(self._ctx, session_id, completions))

    def fail_attempt(
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
        return self._run(
            operations.fail_attempt(
                self._ctx, session_id, index, attempt, error, max_failures, retry_after_ms
            )
        )

    def read_state(self, session_id: str, reducer_name: str) -> StateRead:
        """The reducer's snapshot (or None) and every event after it."""
        return self._run(operations.read_state(session_id, reducer_name))

    def put_snapshot(self, session_id: str, reducer_name: str, index: int, state: JSON) -> None:
        """Store a reducer's state up to ``index``, unless a later snapshot is stored."""
        return self._run(operations.put_snapshot(self._ctx, session_id, reducer_name, index, state))

    # --- time and control -----------------------------------------------------------

    def signal(
        self, session_id: str, name: str, payload: JSON = None, *, id: str | None = None
    ) -> SignalResult:
        """Send the signal ``name`` to the session: wake its events waiting for it.

        In one transaction: appends a settled event of type ``name`` with
        ``payload`` (idempotent by ``id``, as any append), and makes every event of
        the session appended with ``wake_on=name``, and still waiting, claimable at
        once (``SignalResult.woken``). An event appended later to wait for ``name``
        is woken at once by this signal if it came after the event's cause (any
        signal of that name, for an event without a cause): no wake-up is lost. Like
        ``append``, a signal to a session with no events starts it.
        """
        return self._run(operations.signal(self._ctx, session_id, name, payload, id))

    def cancel_session(self, session_id: str, *, reason: str) -> CancelResult:
        """Stop the session's work: every unprocessed event becomes processed.

        Ready, claimed, waiting, scheduled and dead-lettered events alike are
        marked processed without an attempt, as ``skip_event`` marks one, with
        ``reason`` in ``last_error``; their claims are released, so a worker's
        live attempt is ``superseded`` at its next completion or failure and
        stopped at its next renewal. Events appended afterwards are new work.
        """
        return self._run(operations.cancel_session(self._ctx, session_id, reason))

    # --- operators' repairs and retention -----------------------------------------

    def retry_dead_letter(self, session_id: str, *, index: int) -> RetryResult:
        """Make the dead letter at ``index`` claimable again at once.

        Its failure count starts again at 0; ``last_error`` and the attempt
        count stay, so the attempt that dead-lettered it can neither complete
        nor fail it, and the next claim is a new attempt. When that attempt
        completes, the events behind it in its lane move on.
        ``not_dead_lettered`` (nothing changed) for any other event.
        """
        return self._run(operations.retry_dead_letter(session_id, index))

    def skip_event(self, session_id: str, *, index: int, reason: str) -> SkipResult:
        """Mark an unprocessed event (dead letter or not) processed without an attempt.

        ``processed_by_attempt`` stays unset and ``reason`` is kept in
        ``last_error``; its claim is released, the next event of its lane
        becomes claimable, and a later completion by any attempt is
        ``superseded``. ``already_processed`` (nothing changed) if it was.
        """
        return self._run(operations.skip_event(self._ctx, session_id, index, reason))

    def delete_session(self, session_id: str) -> DeleteResult:
        """Delete the session's events and snapshots, under its lock.

        Its event ids may then be appended again, and its indexes start over at 1;
        its attempt numbers do not: the store keeps the highest one it issued
        (one small row per session id deleted after a claim), and the events
        appended under the id again count their attempts on from there, so that
        a worker still holding an attempt of the deleted session never
        completes, fails, renews or releases an event of the new one.
        """
        return self._run(operations.delete_session(self._ctx, session_id))

    def prune(
        self, *, settled_before: datetime, prefix: str = "", limit: int = 1000
    ) -> PruneResult:
        """Delete up to ``limit`` settled sessions whose latest time is before ``settled_before``.

        Settled: every event processed (a dead letter is not). Each session is
        deleted in a short transaction of its own, so no session is locked for
        long; call again until it returns 0 sessions. A pruned session's
        attempt numbers are kept as ``delete_session`` keeps them.
        """
        plan = operations.prune(self._ctx, settled_before, prefix, limit)
        return operations.pruned(
            [self._run(plan.session(sid)) for sid in self._run(plan.candidates)]
        )


class Store(Operations):
    """A store of event sessions on one database. Create it with ``a2sql.create_store``."""

    def __init__(
        self,
        engine: Engine,
        context: Context,
        *,
        owns_engine: bool,
        serialize: bool = False,
        database_file: DatabaseFile | None = None,
        listen_url: URL | None = None,
    ) -> None:
        self._engine = engine
        self._ctx = context
        self._owns_engine = owns_engine
        # A memory database is a single connection: one transaction at a time.
        self._serial = threading.RLock() if serialize else None
        self._closed = False
        self._wakeups = StoreWakeups(engine, listen_url)
        self._file = database_file
        self._pooled = TransactionRunner(
            engine,
            lock_timeout_ms=context.lock_timeout_ms,
            database_file=database_file,
            keep_idle=KEEP_IDLE if owns_engine else 0,
        )
        self.presence = Presence(self)
        self.inspect = Inspector(self)
        # A store dropped without close() releases what it holds when it is
        # collected: the listener's thread and connection, the connections it
        # keeps, and its own engine's pool. (The finalizer holds none of it
        # through the store: the store itself stays collectable.)
        self._release = weakref.finalize(
            self, _release, self._wakeups, self._pooled, engine if owns_engine else None
        )

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine the store runs on."""
        return self._engine

    @property
    def execution_path(self) -> Literal["driver", "connection"]:
        """How the store's next call reaches the database. ``"driver"``: a2sql's
        statements on the driver's own cursor, and on PostgreSQL each hot write
        (``append``, ``claim_available``, ``complete_attempt``, ``fail_attempt``) in one
        pipeline, one round trip. ``"connection"``: each statement through SQLAlchemy's
        ``Connection.execute``, where something observes the engine (an event
        listener, ``echo``, execution options) or its driver has no direct path. Decided
        for each call: a listener added later takes the next call through the
        ``Connection`` (and the calls after it: SQLAlchemy keeps an engine marked as
        observed once a listener was attached). ``using`` runs in the caller's
        transaction, always through its ``Connection``."""
        return "driver" if self._pooled.direct else "connection"

    def _transaction(self, call: Plan[T]) -> T:
        return self._pooled.run(run_in_transaction, self._ctx, call, read_only=call.read_only)

    def _run(self, call: Plan[T] | Answered[T]) -> T:
        """Run one call in one transaction; a write on a session first locks it."""
        if isinstance(call, Answered):
            return call.result
        if self._closed:
            raise closed_store()
        try:
            if self._serial is None:
                result = self._transaction(call)
            else:
                with self._serial:
                    result = self._transaction(call)
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error
        if call.lock_session is not None and call.wakes(result):
            self._wakeups.wake(call.lock_session)
        return result

    # --- the caller's transaction ------------------------------------------------

    def using(self, connection: Connection) -> UsingConnection:
        """The store's operations in the caller's transaction on ``connection``.

        Each runs in a savepoint of that transaction and neither commits nor
        rolls it back: the caller's commit makes them durable together with
        the caller's own writes, a rollback undoes both, and an a2sql error
        undoes only the operation that raised it. ``connection`` is a
        SQLAlchemy ``Connection`` of this store's database with a transaction
        begun (``engine.begin()``, ``connection.begin()``, or ``store.begin()``).
        A connection that cannot serve (closed, invalidated, in AUTOCOMMIT mode,
        its transaction aborted) is ``INVALID_ARGUMENT``, and one whose database
        lacks a2sql's tables ``SCHEMA_MISMATCH``: neither is an outage.
        """
        return UsingConnection(self, connection)

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection in a new transaction, committed when the block ends, rolled back if
        it raises; on SQLite it holds the write lock from the start, as a2sql's writes
        need (``BEGIN IMMEDIATE``). Pass it to ``using`` and write your own tables on it.
        """
        if self._closed:
            raise closed_store()
        if self._file is not None:
            self._file.check()
        # Only a2sql's own statements are mapped to A2Error: the caller's keep theirs.
        try:
            connection = self._ctx.backend.own_connection(self._engine.connect())
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error
        with connection:
            transaction = connection.begin()
            try:
                self._ctx.backend.begin_own(
                    connection, read_only=False, busy_timeout_ms=self._ctx.lock_timeout_ms
                )
            except DRIVER_FAILURES as error:
                raise from_driver_error(error) from error
            with transaction:
                yield connection

    def stream(
        self,
        session_id: str,
        *,
        start_after: int = 0,
        poll_interval: float | None = None,
    ) -> EventStream:
        """Every event after ``start_after``, then new ones as they are appended, until closed.

        It wakes at once on commits made through any store of this process,
        on PostgreSQL also on other processes' (LISTEN/NOTIFY), and else
        polls every ``poll_interval`` seconds (default: per engine).
        """
        sid, start, interval = operations.stream_start(
            self._ctx, session_id, start_after, poll_interval
        )
        self._wakeups.listen()
        return EventStream(
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

    def close(self) -> None:
        """Release the engine (one passed in by the caller is left open)."""
        if self._closed:
            return
        self._closed = True
        self._wakeups.stop()
        self._release()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _release(wakeups: StoreWakeups, pooled: TransactionRunner, engine: Engine | None) -> None:
    """What closing a store releases (``engine``: its own, else ``None``)."""
    wakeups.stop(wait=False)
    pooled.close()
    if engine is not None:
        engine.dispose()


class UsingConnection(Operations):
    """``store.using(connection)``: the store's operations in the caller's transaction."""

    def __init__(self, store: Store, connection: Connection) -> None:
        if not isinstance(connection, Connection):
            raise invalid(
                "connection", f"must be a SQLAlchemy Connection, got {type(connection).__name__}"
            )
        self._store = store
        self._ctx = store._ctx
        self._connection = connection
        self.presence = Presence(self)
        self.inspect = Inspector(self)

    @property
    def connection(self) -> Connection:
        """The caller's connection the operations run on."""
        return self._connection

    def _run(self, call: Plan[T] | Answered[T]) -> T:
        if isinstance(call, Answered):
            return call.result
        if self._store._closed:
            raise closed_store()
        try:
            return run_in_savepoint(self._connection, self._ctx, call)
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error


class Presence:
    """``store.presence``: ephemeral per-participant fields with a TTL."""

    def __init__(self, store: Operations) -> None:
        self._store = store

    def set(
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
        return store._run(
            operations.presence_set(store._ctx, ns, participant, values, at, seen, ttl_ms)
        )

    def read(self, ns: str) -> list[PresenceEntry]:
        """The live fields of the namespace, by participant then field (expired ones are
        gone); it writes nothing."""
        return self._store._run(operations.presence_read(self._store._ctx, ns))


class Inspector:
    """``store.inspect``: sessions with counts and pages of events, for operators and tools."""

    def __init__(self, store: Operations) -> None:
        self._store = store

    def list_sessions(
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
        return self._store._run(
            operations.list_sessions(self._store._ctx, prefix, cursor, limit, state)
        )

    def overview(self, *, prefix: str = "", bound: int = 10_000) -> Overview:
        """Ready, claimed, waiting and scheduled events, dead letters and blocked lanes
        under ``prefix``, each counted as far as ``bound`` (a count equal to it means at
        least that many), the oldest ready event's time, and the engine's own
        figures of the tables' sizes. Reads only events still to do, each count at
        most ``bound`` of them: cheap enough for every page view and scrape."""
        return self._store._run(operations.overview(self._store._ctx, prefix, bound))

    def event(self, event_id: str) -> StoredEvent | None:
        """The event with this id, in whichever session it is, or ``None``: one seek of
        the unique index of event ids (ids are unique across the database)."""
        return self._store._run(operations.event_by_id(event_id))

    def in_flight(self, *, limit: int = 100) -> InFlight:
        """Live claims (by expiry) and claims expired but not yet taken again (oldest
        first), at most ``limit`` of each: which holder has what, until when."""
        return self._store._run(operations.in_flight(self._store._ctx, limit))

    def read_events(
        self,
        session_id: str,
        *,
        after_index: int = 0,
        through_index: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A page of events, capped at the session's last index at the call."""
        return self._store._run(
            operations.read_events(session_id, after_index, through_index, limit)
        )

    def list_snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """The session's snapshots, by reducer name."""
        return self._store._run(operations.list_snapshots(session_id))

    def session(self, session_id: str) -> SessionSummary | None:
        """The summary of exactly this session (not a prefix), ``None`` if it has no events."""
        return self._store._run(operations.session_summary(self._store._ctx, session_id))

    def list_dead_letters(
        self, *, prefix: str = "", cursor: str | None = None, limit: int = 50
    ) -> DeadLetterPage:
        """Dead-lettered events of the sessions under ``prefix``, by session id then index;
        pass the page's ``cursor`` back for the next page."""
        return self._store._run(operations.list_dead_letters(prefix, cursor, limit))

    def prunable(self, *, settled_before: datetime, prefix: str = "") -> PruneResult:
        """What ``prune(settled_before=..., prefix=...)`` would delete now, over every
        call until it returns 0 sessions; deletes nothing (a dry run)."""
        return self._store._run(operations.prunable(self._store._ctx, settled_before, prefix))

    def totals(self) -> StoreTotals:
        """Sessions, events, pending, claimed and dead letters over the whole database,
        and the oldest pending event's time. One pass over the table: for operators."""
        return self._store._run(operations.totals(self._store._ctx))

    def list_waiting_and_scheduled(
        self, session_id: str, *, after_index: int = 0, limit: int = 50
    ) -> list[StoredEvent]:
        """The session's events waiting for a signal (``StoredEvent.waiting``) or scheduled
        for later, after ``after_index``, by index: those ``SessionSummary.waiting_count``
        and ``scheduled_count`` count. Reads the session's unprocessed events."""
        return self._store._run(
            operations.list_waiting_and_scheduled(self._store._ctx, session_id, after_index, limit)
        )
