"""a2sql: durable, multi-worker event sessions on SQLAlchemy Core (SQLite and PostgreSQL)."""

from a2sql.aio import AsyncInspector, AsyncPresence, AsyncStore
from a2sql.clock import Clock, SystemClock
from a2sql.create import create_async_store, create_store
from a2sql.errors import A2Error, ErrorCode
from a2sql.records import (
    JSON,
    AppendResult,
    ClaimRef,
    ClaimResult,
    CompleteResult,
    Completion,
    Event,
    EventCause,
    EventPage,
    FailResult,
    NewEvent,
    PresenceEntry,
    RenewResult,
    SessionPage,
    SessionSummary,
    Snapshot,
    SnapshotInfo,
    StateRead,
    StoredEvent,
)
from a2sql.store import Inspector, Presence, Store
from a2sql.stream import AsyncEventStream, EventStream

__all__ = [
    "JSON",
    "A2Error",
    "AppendResult",
    "AsyncEventStream",
    "AsyncInspector",
    "AsyncPresence",
    "AsyncStore",
    "ClaimRef",
    "ClaimResult",
    "Clock",
    "CompleteResult",
    "Completion",
    "ErrorCode",
    "Event",
    "EventCause",
    "EventPage",
    "EventStream",
    "FailResult",
    "Inspector",
    "NewEvent",
    "Presence",
    "PresenceEntry",
    "RenewResult",
    "SessionPage",
    "SessionSummary",
    "Snapshot",
    "SnapshotInfo",
    "StateRead",
    "Store",
    "StoredEvent",
    "SystemClock",
    "create_async_store",
    "create_store",
]
