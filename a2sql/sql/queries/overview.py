"""What an operator's screen or a metrics scrape reads: bounded counts over the work
still to do, sessions by state, claims in flight.

Every statement here walks a partial index of unprocessed events (a2sql.sql.schema)
and stops after a bound, so its cost follows the work still to do, never the
number of events the database has ever held: a count that reaches the bound means
"at least that many". None counts over the whole table (``totals`` does, for the
CLI, once).
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, Literal, get_args

from sqlalchemy import BindParameter, ColumnElement, Select, bindparam, func, literal_column, select

from a2sql.backends.base import Backend
from a2sql.core.errors import invalid
from a2sql.core.records import NO_TIMEOUT, InFlight, Overview, SessionPage
from a2sql.sql.codec import stored_event
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.claims import FREE, ready
from a2sql.sql.queries.operator_reads import (
    page_bounds,
    prefix_range,
    session_range,
    summaries_of,
)
from a2sql.sql.schema import events as E
from a2sql.sql.times import NOW

SessionState = Literal["dead_letters", "blocked", "claimed", "waiting"]
"""The states ``inspect.list_sessions(state=...)`` filters by: sessions with a dead
letter, with a lane blocked by one, with a live claim, with an event waiting for a
signal."""

SESSION_STATES: tuple[str, ...] = get_args(SessionState)

_ONE: ColumnElement[int] = literal_column("1")
_BOUND: BindParameter[int] = bindparam("bound")
_UNPROCESSED = E.c.processed_at.is_(None)
_DISPATCHABLE = ready()
_HELD = E.c.claim_expires_at.is_not(None)
_NEVER_HELD = E.c.claim_expires_at.is_(None)
_DUE = E.c.claim_expires_at <= NOW

# What each count counts, as SessionSummary's counts do (a2sql.sql.queries.operator_reads):
# ready is claimable now (free, its claim or delay over, or its wait timed out);
# claimed has a live claim; waiting waits for a signal (its timeout ahead);
# scheduled runs later (never claimed, no holder, its time ahead); a dead letter
# failed for good; a blocked lane is a lane whose head is a dead letter.
_READY = (*_DISPATCHABLE, FREE)
_CLAIMED = (*_DISPATCHABLE, _HELD, E.c.claim_holder.is_not(None), E.c.claim_expires_at > NOW)
_WAITING = (
    E.c.wake_on.is_not(None),
    _UNPROCESSED,
    E.c.first_claimed_at.is_(None),
    E.c.claim_expires_at > NOW,
)
_SCHEDULED = (
    *_DISPATCHABLE,
    _HELD,
    E.c.claim_expires_at > NOW,
    E.c.wake_on.is_(None),
    E.c.claim_holder.is_(None),
    E.c.first_claimed_at.is_(None),
)
_DEAD = (_UNPROCESSED, E.c.failed_at.is_not(None))
_BLOCKING = (*_DEAD, E.c.lane.is_not(None))

_STATE_CONDITIONS: dict[str, tuple[ColumnElement[bool], ...]] = {
    "dead_letters": _DEAD,
    "blocked": _BLOCKING,
    "claimed": _CLAIMED,
    "waiting": _WAITING,
}


def _bounded_count(
    backend: Backend, bounded: bool, *conditions: ColumnElement[bool]
) -> ColumnElement[Any]:
    rows = select(_ONE).where(*conditions, *session_range(backend, False, bounded)).limit(_BOUND)
    return select(func.count()).select_from(rows.subquery()).scalar_subquery()


# The oldest ready event's age is measured from when it became claimable: its
# creation for one never held (a2_events_dispatch_free, by created_at), the end
# of its claim, delay or wait for the rest (a2_events_dispatch_due, by expiry):
# the first entry of each index, without the prefix; with one, a bounded walk.
def _first(backend: Backend, bounded: bool, column: Any, *conditions: ColumnElement[bool]) -> Any:
    return (
        select(column)
        .where(*conditions, *session_range(backend, False, bounded))
        .order_by(column)
        .limit(1)
        .scalar_subquery()
    )


@cache
def _overview(backend: Backend, bounded: bool) -> Select[Any]:
    return select(
        _bounded_count(backend, bounded, *_READY),
        _bounded_count(backend, bounded, *_CLAIMED),
        _bounded_count(backend, bounded, *_WAITING),
        _bounded_count(backend, bounded, *_SCHEDULED),
        _bounded_count(backend, bounded, *_DEAD),
        _bounded_count(backend, bounded, *_BLOCKING),
        _first(backend, bounded, E.c.created_at, *_DISPATCHABLE, _NEVER_HELD),
        _first(
            backend,
            bounded,
            E.c.claim_expires_at,
            *_DISPATCHABLE,
            _HELD,
            _DUE,
        ),
    )


def overview(
    tx: Transaction, backend: Backend, *, prefix: str, bound: int, now: datetime
) -> Overview:
    """Bounded counts of the work under ``prefix`` at ``now`` (see the module's docstring)."""
    under = prefix_range(prefix)
    row = tx.first(_overview(backend, "upper" in under), {**under, "bound": bound, "now": now})
    assert row is not None
    since = [t for t in (row[6], row[7]) if t is not None]
    storage = backend.storage(tx)
    return Overview(
        at=now,
        bound=bound,
        ready=int(row[0]),
        claimed=int(row[1]),
        waiting=int(row[2]),
        scheduled=int(row[3]),
        dead_letters=int(row[4]),
        blocked_lanes=int(row[5]),
        oldest_ready_at=min(since) if since else None,
        appended_total=storage.appended_total,
        table_bytes=storage.table_bytes,
    )


@cache
def sessions_in_state(
    backend: Backend, state: str, strict_lower: bool, bounded: bool
) -> Select[Any]:
    """The ids of sessions with an event in ``state``, after ``lower``, by id, at most
    ``limit``: a walk of that state's unprocessed events in session order."""
    return (
        select(E.c.session_id)
        .where(*_STATE_CONDITIONS[state], *session_range(backend, strict_lower, bounded))
        .group_by(E.c.session_id)
        .order_by(E.c.session_id)
        .limit(bindparam("limit"))
    )


def list_sessions_in_state(
    tx: Transaction,
    backend: Backend,
    *,
    state: str,
    prefix: str,
    cursor: str | None,
    limit: int,
    now: datetime,
) -> SessionPage:
    """Sessions under ``prefix`` with an event in ``state``, after ``cursor``, by id."""
    params, strict = page_bounds(prefix, cursor)
    params.update(limit=limit + 1, now=now)
    statement = sessions_in_state(backend, state, strict, "upper" in params)
    ids = [row[0] for row in tx.rows(statement, params)]
    sessions = summaries_of(tx, backend, ids[:limit], now=now)
    more = len(ids) > limit
    return SessionPage(sessions=sessions, cursor=sessions[-1].session_id if more else None)


def session_state(state: object) -> str | None:
    """``state`` checked: ``None`` or one of SESSION_STATES."""
    if state is None:
        return None
    if state not in SESSION_STATES:
        raise invalid("state", f"must be one of {', '.join(SESSION_STATES)}, or None")
    return str(state)


# Claims in flight, by expiry from a2_events_dispatch_due: live ones expire
# within a lease of now, ahead of the events scheduled or waiting, and expired
# ones are the first entries (with the delays that are over, which have no holder).
_LIVE = (
    select(E)
    .where(*_CLAIMED, E.c.claim_expires_at < NO_TIMEOUT)
    .order_by(E.c.claim_expires_at)
    .limit(bindparam("limit"))
)
_EXPIRED = (
    select(E)
    .where(*_DISPATCHABLE, _HELD, _DUE, E.c.claim_holder.is_not(None))
    .order_by(E.c.claim_expires_at)
    .limit(bindparam("limit"))
)


def in_flight(tx: Transaction, *, limit: int, now: datetime) -> InFlight:
    """Live claims by expiry, and claims expired but not yet taken again, at most
    ``limit`` of each."""
    params = {"limit": limit, "now": now}
    return InFlight(
        at=now,
        live=[stored_event(row) for row in tx.rows(_LIVE, params)],
        expired=[stored_event(row) for row in tx.rows(_EXPIRED, params)],
    )
