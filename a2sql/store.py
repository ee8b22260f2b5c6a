"""Store: the synchronous facade. Each method builds a call (a2sql.calls) and runs it."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TypeVar

from sqlalchemy import Engine

from a2sql import calls
from a2sql.calls import Call, Context, Done, run_in_transaction, run_on_connection
from a2sql.config import READ_ONLY
from a2sql.errors import DRIVER_FAILURES, A2Error, ErrorCode, from_driver_error
from a2sql.pooled import PooledTransactions
from a2sql.records import (
    JSON,
    AppendResult,
    ClaimRef,
    ClaimResult,
    CompleteResult,
    Completion,
    EventPage,
    FailResult,
    NewEvent,
    PresenceEntry,
    RenewResult,
    SessionPage,
    SnapshotInfo,
    StateRead,
    StoredEvent,
)
from a2sql.stream import EventStream
from a2sql.wakeups import LOCAL, PostgresListener, database_key

T = TypeVar("T")


class Store:
    """A store of event sessions on one database. Create it with ``a2sql.create_store``."""

    def __init__(
        self, engine: Engine, context: Context, *, owns_engine: bool, serialize: bool = False
    ) -> None:
        self._engine = engine
        self._ctx = context
        self._owns_engine = owns_engine
        # A memory database is a single connection: one transaction at a time.
        self._serial = threading.RLock() if serialize else None
        self._closed = False
        self._database = database_key(engine)
        self._listener: PostgresListener | None = None
        self._pooled = PooledTransactions(engine)
        self.presence = Presence(self)
        self.inspect = Inspector(self)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine the store runs on."""
        return self._engine

    def _on_connection(self, call: Call[T]) -> T:
        # Listeners (statement counters, tracing) are given every statement
        # on a SQLAlchemy Connection, as they expect.
        with self._engine.connect() as connection:
            if call.read_only:
                connection = connection.execution_options(**{READ_ONLY: True})
            with connection.begin():
                return run_on_connection(connection, self._ctx, call)

    def _transaction(self, call: Call[T]) -> T:
        if self._engine.dispatch.before_cursor_execute:
            return self._on_connection(call)
        return self._pooled.run(run_in_transaction, self._ctx, call, read_only=call.read_only)

    def _run(self, call: Call[T] | Done[T]) -> T:
        """Run one call in one transaction; a write on a session first locks it."""
        if isinstance(call, Done):
            return call.result
        if self._closed:
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "the store is closed")
        try:
            if self._serial is None:
                result = self._transaction(call)
            else:
                with self._serial:
                    result = self._transaction(call)
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error
        if call.lock_session is not None and call.wakes(result):
            LOCAL.wake(self._database, call.lock_session)
        return result

    # --- the contract (SPEC §2, §3) -------------------------------------------

    def append(self, session_id: str, events: Sequence[NewEvent]) -> AppendResult:
        """Append events to the session, or replay a batch appended before."""
        return self._run(calls.append(self._ctx, session_id, events))

    def read(
        self, session_id: str, *, after_index: int | None = None, through_index: int | None = None
    ) -> list[StoredEvent]:
        """Events with ``after_index < index <= through_index``, by index."""
        return self._run(calls.read(session_id, after_index, through_index))

    def claim_available(
        self,
        session_id: str,
        *,
        holder: str,
        ttl_ms: int,
        expires_at: datetime | None = None,
        exclude_indexes: Sequence[int] = (),
    ) -> ClaimResult:
        """Claim every ready event that is free or whose claim expired."""
        return self._run(
            calls.claim_available(
                self._ctx, session_id, holder, ttl_ms, expires_at, exclude_indexes
            )
        )

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
            calls.renew_claims(self._ctx, session_id, holder, claims, ttl_ms, expires_at)
        )

    def complete_attempt(
        self, session_id: str, *, index: int, attempt: int, events: Sequence[NewEvent]
    ) -> CompleteResult:
        """Mark the event processed by ``attempt`` and append the returned events atomically."""
        return self._run(calls.complete_attempt(self._ctx, session_id, index, attempt, events))

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
        return self._run(calls.complete_attempts(self._ctx, session_id, completions))

    def fail_attempt(
        self, session_id: str, *, index: int, attempt: int, error: str, max_failures: int
    ) -> FailResult:
        """Count a failure of ``attempt``; dead-letter the event at ``max_failures``."""
        return self._run(
            calls.fail_attempt(self._ctx, session_id, index, attempt, error, max_failures)
        )

    def read_state(self, session_id: str, reducer_name: str) -> StateRead:
        """The reducer's snapshot (or None) and every event after it."""
        return self._run(calls.read_state(session_id, reducer_name))

    def put_snapshot(self, session_id: str, reducer_name: str, index: int, state: JSON) -> None:
        """Store a reducer's state up to ``index``, unless a later snapshot is stored."""
        return self._run(calls.put_snapshot(self._ctx, session_id, reducer_name, index, state))

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
        sid, start, interval = calls.stream_start(self._ctx, session_id, start_after, poll_interval)
        self._listen()
        return EventStream(
            lambda after, limit: self._run(calls.stream_page(sid, after, limit)),
            lambda callback: LOCAL.subscribe(self._database, sid, callback),
            start_after=start,
            poll_interval=interval,
        )

    def _listen(self) -> None:
        if self._listener is None and self._engine.dialect.name == "postgresql":
            self._listener = PostgresListener(self._engine, self._database)
            self._listener.start()

    # --- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        """Release the engine (one passed in by the caller is left open)."""
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.stop()
        self._pooled.close()
        if self._owns_engine:
            self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Presence:
    """``store.presence``: ephemeral per-participant fields with a TTL."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def set(
        self,
        ns: str,
        participant: str,
        values: Mapping[str, JSON],
        *,
        at: datetime,
        seen: int,
        ttl_ms: int,
    ) -> None:
        """Write fields last-writer-wins by ``at``; a ``None`` value deletes the field."""
        store = self._store
        return store._run(calls.presence_set(store._ctx, ns, participant, values, at, seen, ttl_ms))

    def read(self, ns: str) -> list[PresenceEntry]:
        """The live fields of the namespace, by participant then field (expired ones swept)."""
        return self._store._run(calls.presence_read(self._store._ctx, ns))


class Inspector:
    """``store.inspect``: sessions with counts and pages of events, for operators and tools."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def list_sessions(
        self, *, prefix: str = "", cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        """Sessions whose id starts with ``prefix``, after ``cursor``, ordered by id."""
        return self._store._run(calls.list_sessions(self._store._ctx, prefix, cursor, limit))

    def read_events(
        self,
        session_id: str,
        *,
        after_index: int = 0,
        through_index: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A page of events, capped at the session's last index at the call."""
        return self._store._run(calls.read_events(session_id, after_index, through_index, limit))

    def list_snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """The session's snapshots, by reducer name."""
        return self._store._run(calls.list_snapshots(session_id))
