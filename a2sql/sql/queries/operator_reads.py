"""Inspection for operators: sessions with counts, pages of events, waiting and scheduled
events, dead letters."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    bindparam,
    case,
    func,
    literal_column,
    select,
)

from a2sql.backends.base import Backend
from a2sql.backends.column_types import Timestamp
from a2sql.core.errors import invalid
from a2sql.core.jsontext import decode_json
from a2sql.core.records import (
    DeadLetterPage,
    EventPage,
    SessionPage,
    SessionSummary,
    StoredEvent,
    StoreTotals,
)
from a2sql.sql import executor as execute
from a2sql.sql.codec import stored_event
from a2sql.sql.executor import AnyRow, Transaction
from a2sql.sql.queries.events import SESSION, session_status
from a2sql.sql.schema import events as E
from a2sql.sql.schema import retired_attempts as R

PAGE = (
    select(E)
    .where(E.c.session_id == SESSION, E.c.idx > bindparam("after"), E.c.idx <= bindparam("through"))
    .order_by(E.c.idx)
    .limit(bindparam("limit"))
)

_ONE: ColumnElement[int] = literal_column("1")
_ZERO: ColumnElement[int] = literal_column("0")
_NOW = bindparam("now", type_=Timestamp())

_PENDING = E.c.processed_at.is_(None) & E.c.failed_at.is_(None)
_DEAD = E.c.processed_at.is_(None) & E.c.failed_at.is_not(None)
_CLAIMED = _PENDING & E.c.claim_holder.is_not(None) & (E.c.claim_expires_at > _NOW)
# SPEC §7. Neither has a claim holder, though both keep a claim expiry ahead: a
# wait its timeout (or NO_TIMEOUT), a later run its ``available_at``. A signal's
# own event has ``wake_on`` too, but is processed; a claim clears ``wake_on``; a
# failed retry with a delay was claimed before.
_WAITING = E.c.processed_at.is_(None) & E.c.wake_on.is_not(None) & E.c.first_claimed_at.is_(None)
_SCHEDULED = (
    _PENDING
    & E.c.wake_on.is_(None)
    & E.c.claim_holder.is_(None)
    & E.c.first_claimed_at.is_(None)
    & (E.c.claim_expires_at > _NOW)
)

# A dead letter is its lane's head (only a lane's head is ever claimed), so
# what it blocks is every pending event after it in its lane; counted per
# dead letter, which are few, from a2_events_lane_pending.
_BEHIND = E.alias("behind")
_BLOCKED_BEHIND = (
    select(func.count())
    .where(
        _BEHIND.c.session_id == E.c.session_id,
        _BEHIND.c.lane == E.c.lane,
        _BEHIND.c.processed_at.is_(None),
        _BEHIND.c.idx > E.c.idx,
    )
    .scalar_subquery()
)


def _count(condition: ColumnElement[bool]) -> ColumnElement[Any]:
    return func.sum(case((condition, _ONE), else_=_ZERO))


def latest_time(backend: Backend) -> ColumnElement[Any]:
    """The latest time anything happened to a session's events (an aggregate): what
    ``updated_at`` reports and ``prune`` compares with its cut."""
    return func.max(
        backend.latest_timestamp(
            E.c.created_at,
            E.c.first_claimed_at,
            E.c.last_claimed_at,
            E.c.last_failed_at,
            E.c.processed_at,
            E.c.failed_at,
        )
    )


# Where the attempt counts of the session's events started (a2sql.sql.schema): its
# events' attempts are the claims above it.
_RETIRED = func.coalesce(
    select(R.c.last_attempt).where(R.c.session_id == E.c.session_id).scalar_subquery(), 0
)


def _summary_columns(backend: Backend) -> list[ColumnElement[Any]]:
    """A session's ``SessionSummary`` fields, in order, as aggregates over its events."""
    return [
        E.c.session_id,
        func.count(),
        _count(_PENDING),
        _count(E.c.failed_at.is_not(None)),
        func.sum(E.c.attempt_count) - func.count() * _RETIRED,
        func.sum(E.c.failure_count),
        func.min(E.c.created_at),
        latest_time(backend),
        _count(_CLAIMED),
        func.sum(case((_DEAD & E.c.lane.is_not(None), _BLOCKED_BEHIND), else_=_ZERO)),
        func.min(case((_PENDING, E.c.created_at))),
        _count(_WAITING),
        _count(_SCHEDULED),
    ]


def _summary(row: AnyRow) -> SessionSummary:
    return SessionSummary(
        session_id=row[0],
        event_count=int(row[1]),
        pending_count=int(row[2]),
        failed_count=int(row[3]),
        attempt_count=int(row[4]),
        failure_count=int(row[5]),
        first_event_at=row[6],
        updated_at=row[7],
        claimed_count=int(row[8]),
        blocked_count=int(row[9]),
        oldest_pending_at=row[10],
        waiting_count=int(row[11]),
        scheduled_count=int(row[12]),
    )


def prefix_successor(prefix: str) -> str | None:
    """The least string after every string that starts with ``prefix``, by code point.

    ``None`` when there is none (the prefix is all U+10FFFF). Lets a prefix
    be a range seek on the key instead of a scan.
    """
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000  # surrogates are never stored
        if code <= sys.maxunicode:
            return "".join(chars) + chr(code)
    return None


def prefix_range(prefix: str) -> dict[str, str]:
    """The bound parameters of a prefix as a key range: ``lower`` always, ``upper`` when
    the prefix has a successor (statements built with ``bounded`` take it)."""
    upper = prefix_successor(prefix) if prefix else None
    return {"lower": prefix} if upper is None else {"lower": prefix, "upper": upper}


def session_range(backend: Backend, strict_lower: bool, bounded: bool) -> list[ColumnElement[bool]]:
    """Session ids from ``:lower`` (after it when ``strict_lower``) up to ``:upper``
    (exclusive) when ``bounded``: a prefix, or a page of one after a cursor, as a key
    range (``page_bounds`` gives the parameters)."""
    key = E.c.session_id
    lower: BindParameter[str] = bindparam("lower")
    conditions = [key > lower if strict_lower else key >= lower]
    if bounded:
        conditions.append(key < backend.opaque_to_planner(bindparam("upper")))
    return conditions


def page_bounds(prefix: str, cursor: str | None) -> tuple[dict[str, object], bool]:
    """The parameters of ``session_range`` for the sessions under ``prefix`` after
    ``cursor``, and whether its lower bound is strict (a cursor past the prefix's start)."""
    strict = cursor is not None and cursor >= prefix
    return {**prefix_range(prefix), "lower": cursor if strict else prefix}, strict


@cache
def _summaries(backend: Backend, strict_lower: bool, bounded: bool) -> Select[Any]:
    key = E.c.session_id
    return (
        select(*_summary_columns(backend))
        .where(*session_range(backend, strict_lower, bounded))
        .group_by(key)
        .order_by(key)
        .limit(bindparam("limit"))
    )


@cache
def _one_summary(backend: Backend) -> Select[Any]:
    return (
        select(*_summary_columns(backend)).where(E.c.session_id == SESSION).group_by(E.c.session_id)
    )


@cache
def _summaries_of(backend: Backend) -> Select[Any]:
    key = E.c.session_id
    return (
        select(*_summary_columns(backend))
        .where(key.in_(bindparam("ids", expanding=True)))
        .group_by(key)
        .order_by(key)
    )


def summaries_of(
    tx: Transaction, backend: Backend, session_ids: list[str], *, now: datetime
) -> list[SessionSummary]:
    """The summaries of these sessions (each one's events, by the primary key), by id."""
    if not session_ids:
        return []
    rows = tx.rows(_summaries_of(backend), {"ids": session_ids, "now": now})
    return [_summary(row) for row in rows]


def list_sessions(
    tx: Transaction,
    backend: Backend,
    *,
    prefix: str,
    cursor: str | None,
    limit: int,
    now: datetime,
) -> SessionPage:
    """Sessions whose id starts with ``prefix``, after ``cursor``, by id."""
    params, strict = page_bounds(prefix, cursor)
    params.update(limit=limit + 1, now=now)
    rows = tx.rows(_summaries(backend, strict, "upper" in params), params)
    sessions = [_summary(row) for row in rows[:limit]]
    more = len(rows) > limit
    return SessionPage(sessions=sessions, cursor=sessions[-1].session_id if more else None)


def session(
    tx: Transaction, backend: Backend, session_id: str, *, now: datetime
) -> SessionSummary | None:
    """The summary of exactly this session, ``None`` when it has no events."""
    row = tx.first(_one_summary(backend), {"sid": session_id, "now": now})
    return None if row is None else _summary(row)


_TOTALS = select(
    func.count(func.distinct(E.c.session_id)),
    func.count(),
    func.coalesce(_count(_PENDING), 0),
    func.coalesce(_count(_CLAIMED), 0),
    func.coalesce(_count(_DEAD), 0),
    func.min(case((_PENDING, E.c.created_at))),
    func.coalesce(_count(_WAITING), 0),
    func.coalesce(_count(_SCHEDULED), 0),
)


def totals(tx: Transaction, *, now: datetime) -> StoreTotals:
    """Counts over every session (one pass over the table: for operators, not hot paths)."""
    [row] = tx.rows(_TOTALS, {"now": now})
    return StoreTotals(
        sessions=int(row[0]),
        events=int(row[1]),
        pending=int(row[2]),
        claimed=int(row[3]),
        dead_letters=int(row[4]),
        oldest_pending_at=row[5],
        waiting=int(row[6]),
        scheduled=int(row[7]),
    )


# --- waiting and scheduled events ---------------------------------------------

# Both kinds at once: never claimed, no holder, and either waiting for a signal or
# held until a time ahead. ``processed_at IS NULL`` spelled alone, so that the
# walk is a2_events_unprocessed's (the session's unprocessed events, in index
# order), not every event of the session.
WAITING_OR_SCHEDULED = (
    select(E)
    .where(
        E.c.session_id == SESSION,
        E.c.processed_at.is_(None),
        E.c.idx > bindparam("after"),
        E.c.first_claimed_at.is_(None),
        E.c.claim_holder.is_(None),
        E.c.failed_at.is_(None),
        E.c.wake_on.is_not(None) | (E.c.claim_expires_at > _NOW),
    )
    .order_by(E.c.idx)
    .limit(bindparam("limit"))
)


def list_waiting_and_scheduled(
    tx: Transaction, session_id: str, *, after_index: int, limit: int, now: datetime
) -> list[StoredEvent]:
    """The session's waiting and scheduled events after ``after_index``, by index (as
    ``SessionSummary.waiting_count`` and ``scheduled_count`` count them)."""
    rows = tx.rows(
        WAITING_OR_SCHEDULED,
        {"sid": session_id, "after": after_index, "limit": limit, "now": now},
    )
    return [stored_event(row) for row in rows]


# --- one event by its id ------------------------------------------------------

BY_ID = select(E).where(E.c.event_id == bindparam("eid"))


def event_by_id(tx: Transaction, event_id: str) -> StoredEvent | None:
    """The event with this id, in whichever session: one seek of a2_events_event_id."""
    row = tx.first(BY_ID, {"eid": event_id})
    return None if row is None else stored_event(row)


# --- dead letters -------------------------------------------------------------


def dead_letter_cursor(cursor: object) -> tuple[str, int] | None:
    """The position an opaque ``list_dead_letters`` cursor stands for."""
    if cursor is None:
        return None
    try:
        sid, index = decode_json(cursor) if isinstance(cursor, str) else (None, None)
    except (ValueError, TypeError):
        sid = index = None
    if not isinstance(sid, str) or type(index) is not int:
        raise invalid("cursor", "must be a cursor returned by list_dead_letters")
    return sid, index


def _encode_cursor(session_id: str, index: int) -> str:
    return json.dumps([session_id, index], ensure_ascii=False)


@cache
def _dead_letters(after: bool, bounded: bool) -> Select[Any]:
    # Dead letters are unprocessed: the walk is a2_events_unprocessed's, in its order.
    key = E.c.session_id
    statement = select(E, _BLOCKED_BEHIND).where(
        E.c.processed_at.is_(None),
        E.c.failed_at.is_not(None),
        key >= bindparam("lower"),
    )
    if after:
        cursor_sid: BindParameter[str] = bindparam("cursor_sid")
        statement = statement.where(
            (key > cursor_sid) | ((key == cursor_sid) & (E.c.idx > bindparam("cursor_idx")))
        )
    if bounded:
        statement = statement.where(key < bindparam("upper"))
    return statement.order_by(key, E.c.idx).limit(bindparam("limit"))


def list_dead_letters(
    tx: Transaction, *, prefix: str, cursor: tuple[str, int] | None, limit: int
) -> DeadLetterPage:
    """Dead-lettered events of the sessions under ``prefix``, by session id then index."""
    params: dict[str, object] = {**prefix_range(prefix), "limit": limit + 1}
    if cursor is not None:
        params["cursor_sid"], params["cursor_idx"] = cursor
    rows = tx.rows(_dead_letters(cursor is not None, "upper" in params), params)
    events = [stored_event(row[:-1]) for row in rows[:limit]]
    more = len(rows) > limit
    last = events[-1] if more else None
    return DeadLetterPage(
        events=events,
        cursor=None if last is None else _encode_cursor(last.session_id, last.index),
        blocking=[
            int(row[-1]) if events[n].lane is not None else 0 for n, row in enumerate(rows[:limit])
        ],
    )


_LANE_READY = list(E.c.keys()).index("lane_ready")

DEAD_LANES = (
    select(E.c.lane)
    .where(
        E.c.session_id == SESSION,
        E.c.lane.in_(bindparam("lanes", expanding=True)),
        E.c.processed_at.is_(None),
        E.c.failed_at.is_not(None),
    )
    .distinct()
)


def read_events(
    tx: Transaction,
    session_id: str,
    *,
    after_index: int,
    through_index: int | None,
    limit: int,
    states: bool = True,
) -> EventPage:
    """A page of events up to the frontier (the last index at the call), and that cap.

    With ``states``, also which of them wait behind their lane and which of
    those are blocked by a dead letter (streams do not need to know).
    """
    frontier, _ = session_status(tx, session_id)
    through = frontier if through_index is None else min(through_index, frontier)
    rows = tx.rows(
        PAGE,
        {"sid": session_id, "after": after_index, "through": through, "limit": limit},
    )
    events = [stored_event(row) for row in rows]
    if not states:
        return EventPage(events=events, through_index=through)
    waiting = [
        event
        for row, event in zip(rows, events, strict=True)
        if not row[_LANE_READY] and event.processed_at is None
    ]
    dead: set[str] = set()
    if lanes := sorted({event.lane for event in waiting if event.lane is not None}):
        dead = {
            lane
            for (lane,) in execute.rows_for_each_chunk(
                tx, DEAD_LANES, {"sid": session_id}, "lanes", lanes
            )
        }
    return EventPage(
        events=events,
        through_index=through,
        waiting=[event.index for event in waiting if event.lane not in dead],
        blocked=[event.index for event in waiting if event.lane in dead],
    )
