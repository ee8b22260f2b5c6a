"""Store: the synchronous facade. It validates, opens a transaction, runs an operation."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Engine

from a2sql import validate
from a2sql.clock import Clock
from a2sql.codec import truncate_ms
from a2sql.config import READ_ONLY
from a2sql.dialects import Dialect
from a2sql.errors import DRIVER_FAILURES, A2Error, ErrorCode, from_driver_error, invalid
from a2sql.ops import append as append_ops
from a2sql.ops import attempts, inspect
from a2sql.ops import claims as claim_ops
from a2sql.ops import presence as presence_ops
from a2sql.ops import state as state_ops
from a2sql.ops.events import ValidEvent
from a2sql.records import (
    JSON,
    AppendResult,
    ClaimRef,
    ClaimResult,
    CompleteResult,
    EventCause,
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

DEFAULT_STREAM_POLL_S = 0.2


class Store:
    """A store of event sessions on one database. Create it with ``a2sql.create_store``."""

    def __init__(
        self,
        engine: Engine,
        dialect: Dialect,
        *,
        clock: Clock,
        ids: Callable[[], str],
        owns_engine: bool,
        serialize: bool = False,
        limits: validate.Limits | None = None,
    ) -> None:
        self._engine = engine
        self._dialect = dialect
        self._clock = clock
        self._ids = ids
        self._owns_engine = owns_engine
        self._limits = limits or validate.Limits()
        # A memory database is a single connection: one transaction at a time.
        self._serial: AbstractContextManager[Any] = (
            threading.RLock() if serialize else nullcontext()
        )
        self._closed = False
        self.presence = Presence(self)
        self.inspect = Inspector(self)

    # --- plumbing -----------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine the store runs on."""
        return self._engine

    def now(self) -> datetime:
        """The store's clock, truncated to the millisecond it stores."""
        value = self._clock.now()
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise invalid("clock", "now() must return a timezone-aware datetime")
        return truncate_ms(value)

    @contextmanager
    def _transaction(
        self, session_id: str | None = None, *, read_only: bool = False
    ) -> Iterator[Connection]:
        """One transaction; a write on a session first takes that session's lock."""
        if self._closed:
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "the store is closed")
        try:
            with self._serial, self._engine.connect() as connection:
                if read_only:
                    connection = connection.execution_options(**{READ_ONLY: True})
                with connection.begin():
                    if session_id is not None and not read_only:
                        self._dialect.lock_session(connection, session_id)
                    yield connection
        except A2Error:
            raise
        except DRIVER_FAILURES as error:
            raise from_driver_error(error) from error

    def _valid_events(
        self, events: object, argument: str, *, for_completion: bool = False
    ) -> list[ValidEvent]:
        batch = validate.sequence(events, argument)
        valid = []
        for position, event in enumerate(batch):
            where = f"{argument}[{position}]"
            if not isinstance(event, NewEvent):
                raise invalid(where, f"must be a NewEvent, got {type(event).__name__}")
            cause = event.cause
            if for_completion:
                if event.id is None:
                    raise invalid(f"{where}.id", "a returned event must carry an id")
                if cause is not None:
                    raise invalid(f"{where}.cause", "must be unset: the store sets it")
            elif cause is not None:
                _valid_cause(cause, f"{where}.cause")
            if not isinstance(event.settled, bool):
                raise invalid(f"{where}.settled", "must be a bool")
            valid.append(
                ValidEvent(
                    type=validate.name(event.type, f"{where}.type"),
                    payload_json=validate.json_value(
                        event.payload, f"{where}.payload", self._limits
                    ),
                    id=validate.optional_name(event.id, f"{where}.id"),
                    cause=cause,
                    lane=validate.optional_name(event.lane, f"{where}.lane"),
                    settled=event.settled,
                )
            )
        return valid

    def _expiry(self, now: datetime, ttl_ms: int, expires_at: datetime | None) -> datetime:
        return (
            truncate_ms(expires_at)
            if expires_at is not None
            else now + timedelta(milliseconds=ttl_ms)
        )

    # --- the contract ---------------------------------------------------------

    def append(self, session_id: str, events: Sequence[NewEvent]) -> AppendResult:
        """Append events to the session, or replay a batch appended before (SPEC §3)."""
        validate.name(session_id, "session_id")
        batch = self._valid_events(events, "events")
        if not batch:
            with self._transaction(read_only=True) as connection:
                return append_ops.has_pending(connection, session_id)
        with self._transaction(session_id) as connection:
            return append_ops.append(
                connection, session_id, batch, now=self.now(), new_id=self._ids
            )

    def read(
        self,
        session_id: str,
        *,
        after_index: int | None = None,
        through_index: int | None = None,
    ) -> list[StoredEvent]:
        """Events with ``after_index < index <= through_index``, by index."""
        validate.name(session_id, "session_id")
        if after_index is not None:
            validate.integer(after_index, "after_index", minimum=0)
        if through_index is not None:
            validate.integer(through_index, "through_index", minimum=0)
        with self._transaction(read_only=True) as connection:
            return append_ops.read(connection, session_id, after_index, through_index)

    def claim_available(
        self,
        session_id: str,
        *,
        holder: str,
        ttl_ms: int,
        expires_at: datetime | None = None,
        exclude_indexes: Sequence[int] = (),
    ) -> ClaimResult:
        """Claim every ready event that is free or whose claim expired (SPEC §3)."""
        validate.name(session_id, "session_id")
        validate.name(holder, "holder")
        validate.integer(ttl_ms, "ttl_ms", minimum=1)
        if expires_at is not None:
            validate.aware_datetime(expires_at, "expires_at")
        excluded = validate.sequence(exclude_indexes, "exclude_indexes")
        for position, index in enumerate(excluded):
            validate.integer(index, f"exclude_indexes[{position}]", minimum=1)
        with self._transaction(session_id) as connection:
            now = self.now()
            return claim_ops.claim_available(
                connection,
                session_id,
                holder=holder,
                now=now,
                expires_at=self._expiry(now, ttl_ms, expires_at),
                exclude_indexes=excluded,
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
        validate.name(session_id, "session_id")
        validate.name(holder, "holder")
        validate.integer(ttl_ms, "ttl_ms", minimum=1)
        if expires_at is not None:
            validate.aware_datetime(expires_at, "expires_at")
        refs = validate.sequence(claims, "claims")
        for position, ref in enumerate(refs):
            if not isinstance(ref, ClaimRef):
                raise invalid(
                    f"claims[{position}]", f"must be a ClaimRef, got {type(ref).__name__}"
                )
            validate.integer(ref.index, f"claims[{position}].index", minimum=1)
            validate.integer(ref.attempt, f"claims[{position}].attempt", minimum=1)
        if not refs:
            return RenewResult(renewed=[], superseded=[])
        with self._transaction(session_id) as connection:
            now = self.now()
            return claim_ops.renew_claims(
                connection,
                session_id,
                holder=holder,
                claims=refs,
                now=now,
                expires_at=self._expiry(now, ttl_ms, expires_at),
            )

    def complete_attempt(
        self, session_id: str, *, index: int, attempt: int, events: Sequence[NewEvent]
    ) -> CompleteResult:
        """Mark the event processed by ``attempt`` and append the returned events atomically."""
        validate.name(session_id, "session_id")
        validate.integer(index, "index", minimum=1)
        validate.integer(attempt, "attempt", minimum=1)
        batch = self._valid_events(events, "events", for_completion=True)
        with self._transaction(session_id) as connection:
            return attempts.complete_attempt(
                connection,
                session_id,
                index=index,
                attempt=attempt,
                batch=batch,
                now=self.now(),
                new_id=self._ids,
            )

    def fail_attempt(
        self, session_id: str, *, index: int, attempt: int, error: str, max_failures: int
    ) -> FailResult:
        """Count a failure of ``attempt``; dead-letter the event at ``max_failures``."""
        validate.name(session_id, "session_id")
        validate.integer(index, "index", minimum=1)
        validate.integer(attempt, "attempt", minimum=1)
        validate.text(error, "error", self._limits)
        validate.integer(max_failures, "max_failures", minimum=1)
        with self._transaction(session_id) as connection:
            return attempts.fail_attempt(
                connection,
                session_id,
                index=index,
                attempt=attempt,
                error=error,
                max_failures=max_failures,
                now=self.now(),
            )

    def read_state(self, session_id: str, reducer_name: str) -> StateRead:
        """The reducer's snapshot (or None) and every event after it."""
        validate.name(session_id, "session_id")
        validate.name(reducer_name, "reducer_name")
        with self._transaction(read_only=True) as connection:
            return state_ops.read_state(connection, session_id, reducer_name)

    def put_snapshot(self, session_id: str, reducer_name: str, index: int, state: JSON) -> None:
        """Store a reducer's state up to ``index``, unless a later snapshot is stored."""
        validate.name(session_id, "session_id")
        validate.name(reducer_name, "reducer_name")
        validate.integer(index, "index", minimum=1)
        state_json = validate.json_value(state, "state", self._limits)
        with self._transaction(session_id) as connection:
            state_ops.put_snapshot(
                connection,
                self._dialect,
                session_id,
                reducer_name,
                index,
                state_json,
                self.now(),
            )

    def stream(
        self, session_id: str, *, start_after: int = 0, poll_interval: float = DEFAULT_STREAM_POLL_S
    ) -> EventStream:
        """Every event after ``start_after``, then new ones as they are appended, until closed."""
        validate.name(session_id, "session_id")
        validate.integer(start_after, "start_after", minimum=0)
        if (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, int | float)
            or not (poll_interval > 0)
        ):
            raise invalid("poll_interval", "must be a positive number of seconds")
        return EventStream(self, session_id, start_after=start_after, poll_interval=poll_interval)

    def _read_page(self, session_id: str, after_index: int, limit: int) -> list[StoredEvent]:
        with self._transaction(read_only=True) as connection:
            return inspect.read_events(
                connection, session_id, after_index=after_index, through_index=None, limit=limit
            ).events

    # --- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Release the engine (one passed in by the caller is left open)."""
        if self._closed:
            return
        self._closed = True
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


def _valid_cause(cause: object, where: str) -> None:
    if not isinstance(cause, EventCause):
        raise invalid(where, f"must be an EventCause, got {type(cause).__name__}")
    validate.integer(cause.index, f"{where}.index", minimum=1)
    validate.integer(cause.attempt, f"{where}.attempt", minimum=1)
    if cause.batch_size is not None:
        validate.integer(cause.batch_size, f"{where}.batch_size", minimum=1)


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
        validate.name(ns, "ns")
        validate.name(participant, "participant")
        fields = validate.mapping(values, "values")
        validate.aware_datetime(at, "at")
        validate.integer(seen, "seen", minimum=-(2**63))
        validate.integer(ttl_ms, "ttl_ms", minimum=1)
        encoded = [
            (
                validate.name(field, "values key"),
                None
                if value is None
                else validate.json_value(value, f"values[{field!r}]", store._limits),
            )
            for field, value in fields.items()
        ]
        if not encoded:
            return
        with store._transaction() as connection:
            now = store.now()
            presence_ops.set_fields(
                connection,
                store._dialect,
                ns,
                participant,
                encoded,
                at=truncate_ms(at),
                seen=seen,
                expires_at=now + timedelta(milliseconds=ttl_ms),
            )

    def read(self, ns: str) -> list[PresenceEntry]:
        """The live fields of the namespace, by participant then field (expired ones are swept)."""
        store = self._store
        validate.name(ns, "ns")
        with store._transaction() as connection:
            return presence_ops.read(connection, ns, store.now())


class Inspector:
    """``store.inspect``: sessions with counts and pages of events, for operators and tools."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def list_sessions(
        self, *, prefix: str = "", cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        """Sessions whose id starts with ``prefix``, after ``cursor``, ordered by id."""
        if not isinstance(prefix, str):
            raise invalid("prefix", f"must be a str, got {type(prefix).__name__}")
        if prefix:
            validate.name(prefix, "prefix")
        validate.optional_name(cursor, "cursor")
        validate.limit(limit)
        store = self._store
        with store._transaction(read_only=True) as connection:
            return inspect.list_sessions(
                connection, store._dialect, prefix=prefix, cursor=cursor, limit=limit
            )

    def read_events(
        self,
        session_id: str,
        *,
        after_index: int = 0,
        through_index: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A page of events, capped at the session's last index at the call."""
        validate.name(session_id, "session_id")
        validate.integer(after_index, "after_index", minimum=0)
        if through_index is not None:
            validate.integer(through_index, "through_index", minimum=0)
        validate.limit(limit)
        with self._store._transaction(read_only=True) as connection:
            return inspect.read_events(
                connection,
                session_id,
                after_index=after_index,
                through_index=through_index,
                limit=limit,
            )

    def list_snapshots(self, session_id: str) -> list[SnapshotInfo]:
        """The session's snapshots, by reducer name."""
        validate.name(session_id, "session_id")
        with self._store._transaction(read_only=True) as connection:
            return state_ops.list_snapshots(connection, session_id)
