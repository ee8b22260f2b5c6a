"""What the operations share about event rows: lookups, inserts, idempotent replay."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any, NamedTuple

from sqlalchemy import (
    BindParameter,
    ColumnClause,
    ColumnElement,
    ScalarSelect,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    select,
)

from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.jsontext import decode_json
from a2sql.core.records import NO_TIMEOUT, EventCause, StoredEvent
from a2sql.sql import executor as execute
from a2sql.sql.codec import canonical_json, encode_cause, stored_event
from a2sql.sql.executor import Transaction
from a2sql.sql.schema import events as E
from a2sql.sql.schema import retired_attempts as R
from a2sql.sql.times import NOW, Latest

MAX_INDEX = 2**63 - 1


class ValidEvent(NamedTuple):
    """A ``NewEvent`` that passed validation, with its payload encoded (a2sql.plans.operations)."""

    type: str
    payload_json: str
    id: str | None
    cause: EventCause | None
    lane: str | None
    settled: bool
    # SPEC §7: not claimable before ``available_at``; waiting for the signal ``wake_on``.
    # Neither on a settled event, except a signal's own ``wake_on`` (a2sql.sql.queries.control).
    available_at: datetime | None = None
    wake_on: str | None = None


SESSION: BindParameter[str] = bindparam("sid")

EVENT_AT = select(E).where(E.c.session_id == SESSION, E.c.idx == bindparam("index"))

EVENTS_BETWEEN = (
    select(E)
    .where(E.c.session_id == SESSION, E.c.idx > bindparam("after"), E.c.idx <= bindparam("through"))
    .order_by(E.c.idx)
)

EVENTS_BY_ID = select(E).where(E.c.event_id.in_(bindparam("ids", expanding=True)))


# Firsts and lasts are read as the first row in index order (ORDER BY the
# index's columns, LIMIT 1), never as min()/max() or EXISTS: with statistics
# older than a session (a session that grew since the last ANALYZE),
# PostgreSQL's planner turns max(idx) into an aggregate over every event of
# the session and min(idx) over every pending one, and may turn EXISTS over a
# big session into a sequential scan. In index order, the only cheap plan
# reads one entry (tests/internals/test_query_plans.py). The 1 is written into the SQL:
# with a bound LIMIT, PostgreSQL's generic plan cannot know it is one row, so
# it plans the prepared statement anew on every execution (~0.1 ms).
ONE_ROW: ColumnClause[int] = literal_column("1")


def last_index(events: Any = E) -> ScalarSelect[int]:
    """The session's last index, NULL when it has none: its last primary key entry."""
    return of_last_event(events, events.c.idx)


def of_last_event(events: Any, column: Any) -> ScalarSelect[Any]:
    """``column`` of the session's last event, read from ``events`` (E or an alias of
    it); NULL when it has none. The last primary key entry."""
    return (
        select(column)
        .where(events.c.session_id == SESSION)
        .order_by(events.c.session_id.desc(), events.c.idx.desc())
        .limit(ONE_ROW)
        .scalar_subquery()
    )


# The highest attempt number a deleted session of this id issued, 0 when none
# was: where the attempt count of every event appended to the session starts,
# so that attempt numbers are never reused, whatever deleted the session
# (a2sql.sql.schema). One primary key entry of a small table.
RETIRED_ATTEMPTS: ColumnElement[int] = func.coalesce(
    select(R.c.last_attempt).where(R.c.session_id == SESSION).scalar_subquery(), 0
)

_LAST_INDEX = func.coalesce(last_index(), 0)
_LATEST = E.alias("latest_event")
# The time a write to the session records (a2sql.sql.times): the clock's
# reading, or the creation of the session's last event where that is later.
# Events numbered after it are created no earlier; a write to an event adds
# the times already on that event (``Latest``).
LAST_CREATED = of_last_event(_LATEST, _LATEST.c.created_at)
SESSION_NOW = Latest(NOW, LAST_CREATED)
# The first entry of a2_events_unprocessed.
HAS_PENDING = (
    select(E.c.idx)
    .where(E.c.session_id == SESSION, E.c.processed_at.is_(None))
    .order_by(E.c.session_id, E.c.idx)
    .limit(ONE_ROW)
    .scalar_subquery()
    .is_not(None)
)
_IDS_TAKEN = exists().where(E.c.event_id.in_(bindparam("ids", expanding=True)))

SESSION_STATUS = select(_LAST_INDEX, HAS_PENDING)
# The same and, for an append, the attempt count its events start at, the
# time it records, and whether any of the given event ids exists (in any
# session): the common append needs one statement before its insert.
APPEND_STATUS = select(_LAST_INDEX, HAS_PENDING, RETIRED_ATTEMPTS, SESSION_NOW)
APPEND_STATUS_AND_IDS = select(_LAST_INDEX, HAS_PENDING, RETIRED_ATTEMPTS, SESSION_NOW, _IDS_TAKEN)

PENDING_LANES = (
    select(E.c.lane)
    .where(
        E.c.session_id == SESSION,
        E.c.lane.in_(bindparam("lanes", expanding=True)),
        E.c.processed_at.is_(None),
    )
    .distinct()
)

# The columns an append sets; the others keep their defaults.
INSERTED_COLUMNS = (
    "attempt_count",
    "session_id",
    "idx",
    "event_type",
    "payload",
    "event_id",
    "created_at",
    "cause",
    "lane",
    "lane_ready",
    "processed_at",
)
INSERT_EVENTS = insert(E).values({name: bindparam(name) for name in INSERTED_COLUMNS})
# The same, for a batch holding a later run or a wait (SPEC §7): two columns more,
# which the common batch does without.
TIMED_COLUMNS = ("claim_expires_at", "wake_on")
INSERT_TIMED_EVENTS = insert(E).values(
    {name: bindparam(name) for name in (*INSERTED_COLUMNS, *TIMED_COLUMNS)}
)


def events_by_id(tx: Transaction, ids: Sequence[str]) -> dict[str, StoredEvent]:
    """The stored events with these ids, in any session."""
    found: dict[str, StoredEvent] = {}
    for row in execute.rows_for_each_chunk(tx, EVENTS_BY_ID, {}, "ids", ids):
        event = stored_event(row)
        found[event.id] = event
    return found


def session_status(tx: Transaction, session_id: str) -> tuple[int, bool]:
    """The session's last index (0 when empty) and whether any event is unprocessed."""
    [(last, pending)] = tx.rows(SESSION_STATUS, {"sid": session_id})
    return int(last), bool(pending)


class AppendStatus(NamedTuple):
    """What an append reads of its session before inserting."""

    last_index: int  # 0 when the session has no event
    pending: bool  # whether any event is unprocessed
    retired_attempts: int  # where the new events' attempt count starts (RETIRED_ATTEMPTS)
    now: datetime  # the time the append records (SESSION_NOW)
    taken: bool  # whether any of the supplied ids is already stored anywhere


def append_status(
    tx: Transaction, session_id: str, ids: Sequence[str], now: datetime
) -> AppendStatus:
    """The session's ``AppendStatus``, ``ids`` the event ids the append was given and
    ``now`` the clock's reading."""
    if not ids or len(ids) > execute.LIST_CHUNK:
        [(last, pending, retired, at)] = tx.rows(APPEND_STATUS, {"sid": session_id, "now": now})
        taken = bool(ids) and bool(events_by_id(tx, ids))
        return AppendStatus(int(last), bool(pending), int(retired), at, taken)
    [(last, pending, retired, at, taken)] = tx.rows(
        APPEND_STATUS_AND_IDS, {"sid": session_id, "ids": list(ids), "now": now}
    )
    return AppendStatus(int(last), bool(pending), int(retired), at, bool(taken))


def insert_events(
    tx: Transaction,
    session_id: str,
    batch: Sequence[ValidEvent],
    *,
    first_index: int,
    retired_attempts: int,
    now: datetime,
    new_id: Callable[[], str],
) -> list[StoredEvent]:
    """Insert ``batch`` at ``first_index …`` and return the stored events, their
    attempt count starting at ``retired_attempts`` (RETIRED_ATTEMPTS).

    The caller holds the session's write lock. An event with a lane is ready
    only if its lane has no unprocessed event, earlier events of the batch
    included.
    """
    if not batch:
        return []
    busy_lanes: set[str] = set()
    if lanes := sorted({event.lane for event in batch if event.lane is not None}):
        busy_lanes = {
            lane
            for (lane,) in execute.rows_for_each_chunk(
                tx, PENDING_LANES, {"sid": session_id}, "lanes", lanes
            )
        }
    timed = any(event.available_at is not None or event.wake_on is not None for event in batch)
    signalled = _signalled(tx, session_id, batch) if timed else set()
    rows = []
    stored = []
    for offset, event in enumerate(batch):
        event_id = event.id if event.id is not None else new_id()
        ready = event.lane is None or event.lane not in busy_lanes
        if event.lane is not None and not event.settled:
            busy_lanes.add(event.lane)
        processed_at = now if event.settled else None
        index = first_index + offset
        row = {
            "attempt_count": retired_attempts,
            "session_id": session_id,
            "idx": index,
            "event_type": event.type,
            "payload": event.payload_json,
            "event_id": event_id,
            "created_at": now,
            "cause": encode_cause(event.cause),
            "lane": event.lane,
            "lane_ready": ready,
            "processed_at": processed_at,
        }
        if timed:
            expires, wake_on = _held_until(event, now, signalled)
            row["claim_expires_at"], row["wake_on"] = expires, wake_on
            stored.append(
                new_stored_event(
                    session_id, event, event_id, index, now, retired_attempts, expires, wake_on
                )
            )
        else:
            stored.append(
                new_stored_event(session_id, event, event_id, index, now, retired_attempts)
            )
        rows.append(row)
    if len(rows) > 1:
        # By id, each row keeping its index: two sessions inserting batches
        # that share ids then wait on the first shared one, and the loser
        # fails on the unique index (PARTIAL_DUPLICATE_BATCH) instead of the
        # two waiting on each other from both ends (a PostgreSQL deadlock).
        rows.sort(key=itemgetter("event_id"))
    tx.run_many(INSERT_TIMED_EVENTS if timed else INSERT_EVENTS, rows)
    return stored


# A signal named ``name`` already in the session after index ``after``: a signal's
# own event (a2sql.sql.queries.control), settled when appended and never claimed.
SIGNALLED = (
    select(E.c.idx)
    .where(
        E.c.session_id == SESSION,
        E.c.wake_on == bindparam("name"),
        E.c.idx > bindparam("after"),
        E.c.processed_at.is_not(None),
        E.c.first_claimed_at.is_(None),
    )
    .limit(ONE_ROW)
)


# A wait, as the signal that would wake it is looked for: its name, and the index after
# which the signal counts (its cause's, 0 without a cause).
Wait = tuple[str, int]


def _wait(event: ValidEvent) -> Wait | None:
    if event.wake_on is None or event.settled:
        return None
    return event.wake_on, 0 if event.cause is None else event.cause.index


def _signalled(tx: Transaction, session_id: str, batch: Sequence[ValidEvent]) -> set[Wait]:
    """The batch's waits whose signal already reached the session after their cause (any
    time, for an event without a cause): no wake-up is lost to a signal sent while the
    handler that asked for the wait still ran. Each wait is looked up once."""
    found: set[Wait] = set()
    for wait in {wait for event in batch if (wait := _wait(event)) is not None}:
        name, after = wait
        if tx.rows(SIGNALLED, {"sid": session_id, "name": name, "after": after}):
            found.add(wait)
    return found


def _held_until(
    event: ValidEvent, now: datetime, signalled: set[Wait]
) -> tuple[datetime | None, str | None]:
    """An appended event's claim expiry and ``wake_on``: a later run is held until its
    ``available_at``; a wait until its timeout, or for good (NO_TIMEOUT) without one,
    so that every claim query leaves it alone; a wait whose signal came, or whose
    timeout passed, is claimable at once."""
    if event.settled:
        return None, event.wake_on  # a signal's own name, or nothing
    at = event.available_at
    if event.wake_on is not None:
        if _wait(event) in signalled or (at is not None and at <= now):
            return None, None
        return (NO_TIMEOUT if at is None else at), event.wake_on
    return (at if at is not None and at > now else None), None


def new_stored_event(
    session_id: str,
    event: ValidEvent,
    event_id: str,
    index: int,
    now: datetime,
    retired_attempts: int,
    expires: datetime | None = None,
    wake_on: str | None = None,
) -> StoredEvent:
    """The event as stored by an append at ``now``, never claimed: its attempt count
    is ``retired_attempts`` (RETIRED_ATTEMPTS); ``expires`` and ``wake_on`` as
    ``_held_until`` stored them."""
    # Positional, in field order: keywords cost ~1 µs more for 21 fields.
    return StoredEvent(
        event_id,
        event.type,
        decode_json(event.payload_json),
        index,
        session_id,
        now,
        event.cause,
        event.lane,
        now if event.settled else None,  # processed_at
        None,  # processed_by_attempt
        None,  # returned_event_ids
        None,  # first_claimed_at
        None,  # last_claimed_at
        retired_attempts,  # attempt_count
        0,  # failure_count
        None,  # last_failed_at
        None,  # last_failed_attempt
        None,  # last_error
        None,  # failed_at
        None,  # claim_holder
        expires,  # claim_expires_at
        wake_on,
    )


def replay(batch: Sequence[ValidEvent], stored: Sequence[StoredEvent]) -> list[StoredEvent]:
    """The stored events of an idempotent replay, after checking they match the request.

    ``stored`` is in the order of ``batch``. A different type, payload, lane
    or cause is ``IDEMPOTENCY_CONFLICT``.
    """
    for requested, existing in zip(batch, stored, strict=True):
        differs = [
            name
            for name, same in (
                ("type", requested.type == existing.type),
                (
                    "payload",
                    canonical_json(decode_json(requested.payload_json))
                    == canonical_json(existing.payload),
                ),
                ("lane", requested.lane == existing.lane),
                ("cause", requested.cause == existing.cause),
            )
            if not same
        ]
        if differs:
            raise A2Error(
                ErrorCode.IDEMPOTENCY_CONFLICT,
                f"event {existing.id!r} was appended before with a different {', '.join(differs)}",
            )
    return list(stored)
