"""Inspection for operators: sessions with counts, pages of events."""

from __future__ import annotations

import sys
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

from a2sql import execute
from a2sql.codec import stored_event
from a2sql.dialects import Dialect
from a2sql.execute import Transaction
from a2sql.ops.events import SESSION, session_status
from a2sql.records import EventPage, SessionPage, SessionSummary
from a2sql.schema import events as E

PAGE = (
    select(E)
    .where(E.c.session_id == SESSION, E.c.idx > bindparam("after"), E.c.idx <= bindparam("through"))
    .order_by(E.c.idx)
    .limit(bindparam("limit"))
)

_ONE: ColumnElement[int] = literal_column("1")
_ZERO: ColumnElement[int] = literal_column("0")


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


@cache
def _summaries(dialect: Dialect, strict_lower: bool, bounded: bool) -> Select[Any]:
    key = E.c.session_id
    lower: BindParameter[str] = bindparam("lower")
    statement = select(
        key,
        func.count(),
        func.sum(case((E.c.processed_at.is_(None) & E.c.failed_at.is_(None), _ONE), else_=_ZERO)),
        func.sum(case((E.c.failed_at.is_not(None), _ONE), else_=_ZERO)),
        func.sum(E.c.attempt_count),
        func.sum(E.c.failure_count),
        func.min(E.c.created_at),
        func.max(
            dialect.latest_timestamp(
                E.c.created_at,
                E.c.first_claimed_at,
                E.c.last_claimed_at,
                E.c.last_failed_at,
                E.c.processed_at,
                E.c.failed_at,
            )
        ),
    ).where(key > lower if strict_lower else key >= lower)
    if bounded:
        statement = statement.where(key < dialect.unestimated(bindparam("upper")))
    return statement.group_by(key).order_by(key).limit(bindparam("limit"))


def list_sessions(
    tx: Transaction, dialect: Dialect, *, prefix: str, cursor: str | None, limit: int
) -> SessionPage:
    """Sessions whose id starts with ``prefix``, after ``cursor``, by id."""
    upper = prefix_successor(prefix) if prefix else None
    strict = cursor is not None and cursor >= prefix
    params: dict[str, object] = {"lower": cursor if strict else prefix, "limit": limit + 1}
    if upper is not None:
        params["upper"] = upper
    rows = execute.rows(tx, _summaries(dialect, strict, upper is not None), params)
    sessions = [
        SessionSummary(
            session_id=row[0],
            event_count=int(row[1]),
            pending_count=int(row[2]),
            failed_count=int(row[3]),
            attempt_count=int(row[4]),
            failure_count=int(row[5]),
            first_event_at=row[6],
            updated_at=row[7],
        )
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return SessionPage(sessions=sessions, cursor=sessions[-1].session_id if more else None)


def read_events(
    tx: Transaction,
    session_id: str,
    *,
    after_index: int,
    through_index: int | None,
    limit: int,
) -> EventPage:
    """A page of events up to the frontier (the last index at the call), and that cap."""
    frontier, _ = session_status(tx, session_id)
    through = frontier if through_index is None else min(through_index, frontier)
    rows = execute.rows(
        tx,
        PAGE,
        {"sid": session_id, "after": after_index, "through": through, "limit": limit},
    )
    return EventPage(events=[stored_event(row) for row in rows], through_index=through)
