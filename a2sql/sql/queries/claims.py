"""claim_available, renew_claims and release_claims: claims within one session."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    Update,
    and_,
    bindparam,
    case,
    func,
    null,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal

from a2sql.backends.column_types import Timestamp
from a2sql.backends.registry import backend_of
from a2sql.core.arguments import Lease
from a2sql.core.records import (
    NO_TIMEOUT,
    ClaimRef,
    ClaimResult,
    ReleaseResult,
    RenewResult,
    StoredEvent,
)
from a2sql.sql import executor as execute
from a2sql.sql.codec import claimed_event
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.events import LAST_CREATED, ONE_ROW, SESSION
from a2sql.sql.schema import events as E
from a2sql.sql.times import NOW, After, Latest

EXPIRES_AT = bindparam("expires_at", type_=Timestamp())
# A claim's lease: a time given (``expires_at``), or a length (``lease_ms``) from
# the time the claim records.
LEASE_MS = bindparam("lease_ms", type_=BigInteger())


def ready(events: Any = E) -> tuple[ColumnElement[bool], ...]:
    """Ready, unprocessed, not dead-lettered (``events``: E or an alias of it): spelled
    with literals exactly as the partial indexes of dispatchable events (a2sql.sql.schema)
    are."""
    return (
        events.c.lane_ready == true(),
        events.c.processed_at.is_(None),
        events.c.failed_at.is_(None),
    )


def free(events: Any = E) -> ColumnElement[bool]:
    """Free to claim now: never claimed, released, or the claim (or retry delay) is over."""
    return or_(events.c.claim_expires_at.is_(None), events.c.claim_expires_at <= NOW)


READY = ready()
# The dispatchable events of one session.
DISPATCHABLE = (E.c.session_id == SESSION, *READY)
FREE = free()

# When a lane's event never claimed became free: when the event before it in
# its lane was processed (or skipped), which made it ready. That event is
# looked for among the LANE_WALK events before it, along the primary key;
# further back (or when the lane has none), the latest time any lane of the
# session moved on stands in: no earlier than the one looked for, and read
# once per statement, only when some event needs it. A walk without a bound
# would read the whole session for each event of a batch of distinct lanes.
LANE_WALK = 32
_BEFORE = E.alias("lane_before")
_ANY_LANE = E.alias("any_lane")
_LANE_FREED = case(
    (
        and_(E.c.lane.is_not(None), E.c.first_claimed_at.is_(None)),
        func.coalesce(
            select(_BEFORE.c.processed_at)
            .where(
                _BEFORE.c.session_id == SESSION,
                _BEFORE.c.lane == E.c.lane,
                _BEFORE.c.idx < E.c.idx,
                _BEFORE.c.idx >= E.c.idx - LANE_WALK,
            )
            .order_by(_BEFORE.c.session_id.desc(), _BEFORE.c.idx.desc())
            .limit(ONE_ROW)
            .scalar_subquery(),
            select(func.max(_ANY_LANE.c.processed_at))
            .where(_ANY_LANE.c.session_id == SESSION, _ANY_LANE.c.lane.is_not(None))
            .scalar_subquery(),
        ),
    ),
    else_=null(),
)
# The time a claim records on an event (a2sql.sql.times): never earlier than the
# session's last event's creation, nor than the time the event became free: its
# last failure (a failure without a delay frees it then), its last claim (a
# release frees it then; a claim that expired was taken before ``now``), or,
# for a lane's event never claimed, its lane moving on.
# The session's part is read once, in a one-row table the claim joins (UPDATE …
# FROM): written into each SET, the last event's creation would be looked up once
# for each column that needs it, and SQLite would update in two passes.
# (Its sid typed as where it is compared: one parameter, one type.)
_SESSION_CLOCK = select(
    bindparam("sid", type_=E.c.session_id.type).label("sid"),
    Latest(NOW, LAST_CREATED).label("now"),
).subquery("session_clock")
CLAIM_NOW = Latest(_SESSION_CLOCK.c.now, E.c.last_failed_at, E.c.last_claimed_at, _LANE_FREED)

# The claim's writes; which events it takes is claim_statement's.
_claim = (
    update(E)
    .values(
        attempt_count=E.c.attempt_count + 1,
        first_claimed_at=func.coalesce(E.c.first_claimed_at, CLAIM_NOW),
        last_claimed_at=CLAIM_NOW,
        claim_holder=bindparam("holder"),
        claim_expires_at=func.coalesce(EXPIRES_AT, After(CLAIM_NOW, LEASE_MS)),
        # A waiting event claimed (its timeout passed) waits no more.
        wake_on=null(),
    )
    # Joins the one row of session_clock, which puts it in the UPDATE's FROM
    # (SQLAlchemy adds the tables of WHERE, not those of SET).
    .where(E.c.session_id == _SESSION_CLOCK.c.sid)
    # What the claim did not set itself, and its times: the rest of a claimed
    # event is known (claimed_event), and 5 columns fewer cost less to return
    # and decode.
    .returning(
        E.c.idx,
        E.c.event_type,
        E.c.payload,
        E.c.event_id,
        E.c.created_at,
        E.c.cause,
        E.c.lane,
        E.c.processed_by_attempt,
        E.c.returned_event_ids,
        E.c.first_claimed_at,
        E.c.attempt_count,
        E.c.failure_count,
        E.c.last_failed_at,
        E.c.last_failed_attempt,
        E.c.last_error,
        E.c.last_claimed_at,
        E.c.claim_expires_at,
    )
)


def claimable(events: Any, *columns: Any, excluding: bool, limited: bool) -> Select[Any]:
    """``columns`` of the events a claim takes, read from ``events`` (E or an alias of
    it): the session's dispatchable events free now, but the excluded indexes; with
    ``limited``, the lowest ``limit`` indexes of them (first in
    a2_events_dispatch_ready)."""
    found = select(*columns).where(events.c.session_id == SESSION, *ready(events), free(events))
    if excluding:
        found = found.where(events.c.idx.not_in(bindparam("exclude", expanding=True)))
    if limited:
        found = found.order_by(events.c.session_id, events.c.idx).limit(bindparam("limit"))
    return found


class ReadOnce(ColumnElement[bool]):
    """``column IN (rows)``, ``rows`` a subquery that does not depend on the row tested,
    read once whatever the planner believes of the rows tested.

    PostgreSQL may plan ``IN (subquery)`` as a semi-join, and when it believes the
    rows tested few (statistics older than a session's backlog) as a nested loop
    that reads the subquery again for each of them: the backlog times the
    subquery. ``column = ANY(ARRAY(subquery))`` is no join: the array is computed
    once, before any row is read (an InitPlan), and the test is a condition on
    the index that finds the rows. SQLite reads ``IN (subquery)`` once into a
    list and seeks the index with each of its values.
    """

    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012 (read by SQLAlchemy, never changed)
        ("column", InternalTraversal.dp_clauseelement),
        ("rows", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, column: ColumnElement[Any], rows: Select[Any]) -> None:
        self.column = column
        self.rows = rows


@compiles(ReadOnce)
def _read_once(element: ReadOnce, compiler: SQLCompiler, **kw: Any) -> str:
    return backend_of(compiler.dialect).read_once(element, compiler, **kw)


@cache
def claim_statement(excluding: bool, limited: bool) -> Update:
    """The claim: the session's ``claimable`` events, claimed, their columns returned.

    A limited claim costs its limit, not the session's backlog, whatever the
    statistics say of the backlog: the lowest ``limit`` free indexes are read
    first, once (ReadOnce), in a2_events_dispatch_ready's order, and only those
    rows are updated, found by both columns of the primary key. The update names
    none of the partial indexes' conditions: with statistics older than the
    backlog, the planner would believe the session's dispatchable events one or
    two, and could go through all of them to find the few the read found. Whether
    an event is claimable is the read's to say: both see the database as it was
    before the statement, and the session's lock keeps every other writer away.

    Statistics taken when no event at all was pending make the planner believe
    the partial indexes empty: it may then read one of them whole, once, and sort
    what it found to have the lowest indexes (tests/internals/test_query_plans.py).
    """
    if limited:
        taken = claimable(E, E.c.idx, excluding=excluding, limited=True)
        return _claim.where(E.c.session_id == SESSION, ReadOnce(E.c.idx, taken))
    statement = _claim.where(*DISPATCHABLE, FREE)
    if excluding:
        statement = statement.where(E.c.idx.not_in(bindparam("exclude", expanding=True)))
    return statement


# The earliest unexpired claim: first in a2_events_claim_expiry (see
# a2sql.sql.queries.events on reading firsts in index order).
NEXT_EXPIRY_AT = (
    select(E.c.claim_expires_at)
    .where(*DISPATCHABLE, E.c.claim_expires_at > NOW)
    .order_by(E.c.session_id, E.c.claim_expires_at)
    .limit(ONE_ROW)
    .scalar_subquery()
    .label("retry_at")
)
NEXT_EXPIRY = select(NEXT_EXPIRY_AT)
# The same, passing over waits (a claim ends a wait: its wake_on is cleared).
NEXT_EXPIRY_BUT_WAITS = select(func.min(E.c.claim_expires_at)).where(
    *DISPATCHABLE, E.c.claim_expires_at > NOW, E.c.wake_on.is_(None)
)

CURRENT_ATTEMPTS = select(E.c.idx, E.c.attempt_count).where(
    E.c.session_id == SESSION, E.c.idx.in_(bindparam("indexes", expanding=True))
)

RELEASE = (
    update(E)
    .where(
        E.c.session_id == SESSION,
        tuple_(E.c.idx, E.c.attempt_count).in_(bindparam("claims", expanding=True)),
        E.c.processed_at.is_(None),
        E.c.failed_at.is_(None),
        E.c.claim_holder == bindparam("holder"),
    )
    .values(claim_holder=null(), claim_expires_at=null())
    .returning(E.c.idx, E.c.attempt_count)
)

RENEW = (
    update(E)
    .where(
        E.c.session_id == SESSION,
        tuple_(E.c.idx, E.c.attempt_count).in_(bindparam("claims", expanding=True)),
        E.c.processed_at.is_(None),
        E.c.failed_at.is_(None),
        E.c.claim_holder == bindparam("holder"),
        E.c.claim_expires_at > NOW,
    )
    .values(claim_expires_at=EXPIRES_AT)
    .returning(E.c.idx, E.c.attempt_count)
)


def claim_available(
    tx: Transaction,
    session_id: str,
    *,
    holder: str,
    now: datetime,
    lease: Lease,
    exclude_indexes: Sequence[int],
    limit: int | None,
) -> ClaimResult:
    """Claim the dispatchable events whose claim is free or expired, at most ``limit``
    of them, lowest indexes first."""
    claimed = claim_events(
        tx,
        session_id,
        holder=holder,
        now=now,
        lease=lease,
        exclude_indexes=exclude_indexes,
        limit=limit,
    )
    if claimed:
        return ClaimResult("claimed", claimed)
    params = {"sid": session_id, "now": now}
    [(retry_at,)] = tx.rows(NEXT_EXPIRY, params)
    if waits_for_good(retry_at):
        [(retry_at,)] = tx.rows(NEXT_EXPIRY_BUT_WAITS, params)
        return ClaimResult("busy", retry_at=retry_at)
    return nothing_free(retry_at)


def nothing_free(retry_at: datetime | None) -> ClaimResult:
    """A claim that took nothing: ``retry_at`` is the session's earliest claim expiry
    after the claim's time (NEXT_EXPIRY), ``None`` when no event is dispatchable; not
    one that ``waits_for_good``."""
    if retry_at is None:
        return ClaimResult("settled")
    return ClaimResult("busy", retry_at=retry_at)


def waits_for_good(expiry: datetime | None) -> bool:
    """Whether the earliest claim expiry ahead may be that of events waiting for a signal
    without a timeout (NO_TIMEOUT), which never become claimable by themselves: then
    the earliest expiry of the others is the time to retry (NEXT_EXPIRY_BUT_WAITS), and
    none may come. Past NO_TIMEOUT, only a lease given to end in the year 9999 can be
    there too: this is seldom true."""
    return expiry is not None and expiry >= NO_TIMEOUT


def claim_events(
    tx: Transaction,
    session_id: str,
    *,
    holder: str,
    now: datetime,
    lease: Lease,
    exclude_indexes: Sequence[int] = (),
    limit: int | None = None,
) -> list[StoredEvent]:
    """The claim itself: the events it took, by index (none when nothing was free)."""
    statement, params = claim(
        session_id,
        holder=holder,
        now=now,
        lease=lease,
        exclude_indexes=exclude_indexes,
        limit=limit,
    )
    return claimed_events(tx.rows(statement, params), session_id, holder=holder)


def claim(
    session_id: str,
    *,
    holder: str,
    now: datetime,
    lease: Lease,
    exclude_indexes: Sequence[int],
    limit: int | None,
) -> tuple[Update, dict[str, Any]]:
    """The claim statement for these arguments, and its parameters; ``INVALID_ARGUMENT``
    for a lease that would end past the year 9999."""
    lease.at(now)
    params: dict[str, Any] = {
        "sid": session_id,
        "now": now,
        "holder": holder,
        "expires_at": lease.expires_at,
        "lease_ms": lease.ttl_ms,
    }
    if exclude_indexes:
        params["exclude"] = sorted(set(exclude_indexes))
    if limit is not None:
        params["limit"] = limit
    return claim_statement(bool(exclude_indexes), limit is not None), params


def claimed_events(
    rows: Sequence[Sequence[Any]], session_id: str, *, holder: str
) -> list[StoredEvent]:
    """The claim statement's rows as the events claimed, by index."""
    return [
        claimed_event(row, session_id, holder=holder)
        for row in sorted(rows, key=itemgetter(0))  # by index
    ]


def _current_attempts(
    tx: Transaction, session_id: str, claims: Sequence[ClaimRef]
) -> dict[int, int]:
    return {
        idx: attempt_count
        for idx, attempt_count in execute.rows_for_each_chunk(
            tx,
            CURRENT_ATTEMPTS,
            {"sid": session_id},
            "indexes",
            sorted({c.index for c in claims}),
        )
    }


def release_claims(
    tx: Transaction, session_id: str, *, holder: str, claims: Sequence[ClaimRef]
) -> ReleaseResult:
    """Give up the claims ``holder`` holds as their current attempt, at once."""
    current = _current_attempts(tx, session_id, claims)
    superseded = [c.index for c in claims if c.index in current and current[c.index] > c.attempt]
    # A claim named twice is released once: the second finds it released.
    candidates = list(
        dict.fromkeys(
            (c.index, c.attempt)
            for c in claims
            if c.index in current and current[c.index] == c.attempt
        )
    )
    released = {
        (idx, attempt)
        for idx, attempt in execute.rows_for_each_chunk(
            tx, RELEASE, {"sid": session_id, "holder": holder}, "claims", candidates, per_item=2
        )
    }
    return ReleaseResult(
        released=sorted(idx for idx, attempt in candidates if (idx, attempt) in released),
        superseded=sorted(superseded),
    )


def renew_claims(
    tx: Transaction,
    session_id: str,
    *,
    holder: str,
    claims: Sequence[ClaimRef],
    now: datetime,
    expires_at: datetime,
) -> RenewResult:
    """Extend the claims still held by ``holder`` as their current attempt."""
    current = _current_attempts(tx, session_id, claims)
    # Each claim is judged on its own, in the request's order (a stale and a
    # current attempt of one event give one superseded and one renewed).
    superseded = [c.index for c in claims if c.index in current and current[c.index] > c.attempt]
    candidates = [
        (c.index, c.attempt) for c in claims if c.index in current and current[c.index] <= c.attempt
    ]
    params = {"sid": session_id, "holder": holder, "now": now, "expires_at": expires_at}
    renewed: list[int] = []
    if len(set(candidates)) == len(candidates):
        extended = {
            (idx, attempt)
            for idx, attempt in execute.rows_for_each_chunk(
                tx, RENEW, params, "claims", candidates, per_item=2
            )
        }
        renewed = [idx for idx, attempt in candidates if (idx, attempt) in extended]
    else:
        # The same claim named twice: renew one at a time, as each renewal
        # changes what the next one sees (an expiry in the past ends it).
        for idx, attempt in candidates:
            if tx.rows(RENEW, {**params, "claims": [(idx, attempt)]}):
                renewed.append(idx)
    return RenewResult(renewed=sorted(renewed), superseded=sorted(superseded))
