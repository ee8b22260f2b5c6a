"""The one error type of a2sql, its codes, and the mapping of driver failures."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from sqlalchemy import exc as sa_exc


class ErrorCode(StrEnum):
    """What went wrong, as a stable machine-readable code."""

    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    STORE_CLOSED = "STORE_CLOSED"
    SCHEMA_MISMATCH = "SCHEMA_MISMATCH"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    EVENT_NOT_FOUND = "EVENT_NOT_FOUND"
    PARTIAL_DUPLICATE_BATCH = "PARTIAL_DUPLICATE_BATCH"
    SUPERSEDED_ATTEMPT = "SUPERSEDED_ATTEMPT"
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"
    CORRUPT_RECORD = "CORRUPT_RECORD"


class A2Error(Exception):
    """Every error a2sql raises. ``code`` says what kind; the message says what was wrong."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled, as multiprocessing and concurrent.futures send a worker's error
        # to its parent, an exception is rebuilt from its ``args``: here the one
        # formatted message, which __init__ would refuse. A pool whose result
        # cannot be rebuilt hangs.
        return (type(self), (self.code, self.message), self.__dict__)


# The unique index on event ids: a race between two sessions appending the
# same id ends in a unique violation on it, which the contract reports as a
# duplicate batch rather than a database failure.
EVENT_ID_INDEX = "a2_events_event_id"


def is_event_id_collision(error: BaseException) -> bool:
    """Whether ``error`` is a unique violation on the event id index."""
    if not isinstance(error, sa_exc.IntegrityError):
        return False
    orig = error.orig
    diag = getattr(orig, "diag", None)
    if diag is not None and getattr(diag, "constraint_name", None) == EVENT_ID_INDEX:
        return True
    # SQLite names the column, not the index, in its message.
    return "UNIQUE constraint failed: a2_events.event_id" in str(orig)


# PostgreSQL's detail of a unique violation names the key that was taken.
_TAKEN_KEY = re.compile(r"^Key \(event_id\)=\((.*)\) already exists\.$", re.DOTALL)


def taken_event_id(error: BaseException) -> str | None:
    """The event id a unique violation on the event id index names (PostgreSQL), or
    ``None`` where the database does not say (SQLite)."""
    diag = getattr(getattr(error, "orig", None), "diag", None)
    found = _TAKEN_KEY.match(getattr(diag, "message_detail", None) or "")
    return found.group(1) if found else None


def from_driver_error(error: BaseException) -> A2Error:
    """Translate a failure below a2sql (driver, pool, file system) into an ``A2Error``.

    A unique violation on the event id index is ``PARTIAL_DUPLICATE_BATCH``;
    everything else is ``STORE_UNAVAILABLE``. Callers raise the result
    ``from error`` so the original stays reachable as ``__cause__``.
    """
    if is_event_id_collision(error):
        # An append checks the ids it is given under its session's lock: what
        # still collides is a generated id, or an id another session took meanwhile.
        taken = taken_event_id(error)
        which = f"event id {taken!r}" if taken is not None else "an event id of the batch"
        return A2Error(
            ErrorCode.PARTIAL_DUPLICATE_BATCH,
            f"{which} already exists (event ids are unique across sessions: a generated "
            "id that repeats one, or an id another session's writer appended meanwhile)",
        )
    locked = _lock_timed_out(error)
    if locked:
        return A2Error(
            ErrorCode.STORE_UNAVAILABLE,
            f"{locked}: gave up waiting after the lock timeout (create_store's lock_timeout_ms)",
        )
    detail = str(getattr(error, "orig", None) or error).strip().splitlines()
    first_line = detail[0] if detail else type(error).__name__
    if lost_prepared_statement(error):
        first_line += f" ({POOLER_HINT})"
    return A2Error(ErrorCode.STORE_UNAVAILABLE, f"the database failed: {first_line}")


# PostgreSQL's lock_not_available: lock_timeout passed while waiting.
_LOCK_NOT_AVAILABLE = "55P03"


def _lock_timed_out(error: BaseException) -> str:
    """What was locked, if a wait for a lock ran out (PostgreSQL's lock timeout, SQLite's
    busy timeout); else ``""``."""
    orig = getattr(error, "orig", None)
    if getattr(orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
        return "the session is locked by another transaction"
    if getattr(orig, "sqlite_errorname", None) == "SQLITE_BUSY":
        return "the database is locked by another writer"
    return ""


# What counts as "the database failed": driver errors, pool exhaustion and
# lost connections, and the file system under SQLite. Anything else from
# SQLAlchemy (a compile error, say) is a bug in a2sql and is left to surface.
DRIVER_FAILURES: tuple[type[BaseException], ...] = (
    sa_exc.DBAPIError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
    OSError,
)


# How many items a message names before it only counts the rest: a failed
# batch of thousands of ids must not make a message of megabytes.
LISTED_AT_MOST = 10


def listed(items: Sequence[object], *, at_most: int = LISTED_AT_MOST) -> str:
    """``items`` as a message names them: the first ``at_most`` (repr), then how many more."""
    if not items:
        return "none"
    named = ", ".join(repr(item) for item in items[:at_most])
    rest = len(items) - at_most
    return f"{named} and {rest} more" if rest > 0 else named


def closed_store() -> A2Error:
    """A call on a store after ``close()``: the program's mistake, not the database's."""
    return A2Error(ErrorCode.STORE_CLOSED, "the store is closed: open a new one")


def invalid(argument: str, problem: str) -> A2Error:
    """An ``INVALID_ARGUMENT`` error naming the argument and what was wrong with it."""
    return A2Error(ErrorCode.INVALID_ARGUMENT, f"{argument}: {problem}")


# What preparation behind a transaction pooler looks like: on an engine the application
# passed in (a2sql changes nothing there), or behind a pooler a2sql did not recognise
# (a2sql.execution.pooler recognises PgBouncer on the engines it creates).
POOLER_HINT = (
    "behind a connection pooler in transaction mode (PgBouncer) statements prepared on "
    "the server go missing: create the engine given to create_store with "
    "connect_args={'prepare_threshold': None}"
)


def lost_prepared_statement(error: BaseException) -> bool:
    """Whether ``error`` says a statement prepared on the server was missing, taken or
    another one: what preparation behind an unrecognised pooler looks like."""
    orig = getattr(error, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in (_INVALID_SQL_STATEMENT_NAME, _DUPLICATE_PREPARED_STATEMENT):
        return True
    return sqlstate == _PROTOCOL_VIOLATION and "prepared statement" in str(orig)


# PostgreSQL's codes for: prepared statement "…" does not exist; … already
# exists; bind message supplies N parameters, but prepared statement "…" requires M.
_INVALID_SQL_STATEMENT_NAME = "26000"
_DUPLICATE_PREPARED_STATEMENT = "42P05"
_PROTOCOL_VIOLATION = "08P01"
