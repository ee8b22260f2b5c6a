"""claim_next: work across sessions, the oldest claimable event's session first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, select, union_all

from a2sql.backends.base import Backend
from a2sql.backends.column_types import Timestamp
from a2sql.core.arguments import Lease
from a2sql.core.records import NO_TIMEOUT, Dispatch
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.claims import READY, claim_events
from a2sql.sql.queries.events import ONE_ROW
from a2sql.sql.queries.operator_reads import prefix_successor
from a2sql.sql.schema import events as E
from a2sql.sql.times import NOW

# How many of the oldest claimable events one read looks at. On SQLite the
# first one is always taken (the write lock is held); on PostgreSQL a
# session another transaction has locked is skipped, so a read needs room
# for a few of those before it finds one to take.
CANDIDATES_PER_READ = 16


def bounds(prefix: str) -> dict[str, Any]:
    """The parameters that say "under ``prefix``" to ``candidates`` and ``next_free``."""
    if not prefix:
        return {}
    params: dict[str, Any] = {"lower": prefix, "prefix_chars": len(prefix)}
    upper = prefix_successor(prefix)
    if upper is not None:
        params["upper"] = upper
    return params


@cache
def candidates(backend: Backend, lower: bool, upper: bool, skipping: bool) -> Select[Any]:
    """Session ids of the oldest claimable events, oldest first: of the events never
    held, the first few of a2_events_dispatch_free in its order; of the others, those
    due now in a2_events_dispatch_due (an expired claim, a retry, run or wait whose
    time came), sorted. Events held until later (claimed, scheduled, waiting) are never
    read, however many. The prefix is tested as the backend tests it on a walk in age
    order."""

    def first(*held: ColumnElement[bool]) -> Select[Any]:
        statement: Select[Any] = select(E.c.session_id, E.c.created_at).where(*READY, *held)
        statement = backend.under_prefix_by_age(statement, E.c.session_id, lower, upper)
        if skipping:
            statement = statement.where(E.c.session_id.not_in(bindparam("skipped", expanding=True)))
        return statement.order_by(E.c.created_at, E.c.session_id).limit(CANDIDATES_PER_READ)

    never_held = first(E.c.claim_expires_at.is_(None)).subquery("never_held")
    due = first(E.c.claim_expires_at.is_not(None), E.c.claim_expires_at <= NOW).subquery("due")
    both = union_all(select(never_held), select(due)).subquery("claimable")
    return (
        select(both.c.session_id)
        .order_by(both.c.created_at, both.c.session_id)
        .limit(CANDIDATES_PER_READ)
    )


@cache
def next_free(lower: bool, upper: bool) -> Select[Any]:
    """When the next claim, retry delay, later run or wait's timeout under the prefix
    ends: the first entry of a2_events_dispatch_due after now. Not a wait without a
    timeout (NO_TIMEOUT), which never ends by itself, nor anything else as late."""
    statement = select(E.c.claim_expires_at).where(
        *READY,
        E.c.claim_expires_at.is_not(None),
        E.c.claim_expires_at > NOW,
        E.c.claim_expires_at < bindparam("no_timeout", NO_TIMEOUT, type_=Timestamp()),
    )
    # The first entry in index order (see a2sql.sql.queries.events on firsts).
    return _under_prefix(statement, lower, upper).order_by(E.c.claim_expires_at).limit(ONE_ROW)


def _under_prefix(statement: Select[Any], lower: bool, upper: bool) -> Select[Any]:
    if lower:
        statement = statement.where(E.c.session_id >= bindparam("lower"))
    if upper:
        statement = statement.where(E.c.session_id < bindparam("upper"))
    return statement


def claim_next(
    tx: Transaction,
    backend: Backend,
    *,
    holder: str,
    clock: Callable[[], datetime],
    lease: Lease,
    limit: int | None,
    prefix: str,
) -> Dispatch:
    """Claim in the session whose oldest claimable event is oldest.

    Sessions another transaction holds locked are passed over rather than
    waited for (PostgreSQL); on SQLite the write lock makes that never happen.
    ``clock`` is read again once the session is locked, and the claim's times
    are never earlier than what already happened in the session
    (a2sql.sql.times), as every write's.
    """
    now = clock()
    under = bounds(prefix)
    lower, upper = "lower" in under, "upper" in under
    passed: list[str] = []  # locked by another transaction, or emptied since the read
    locked = False
    while True:
        params = {**under, "now": now}
        if passed:
            params["skipped"] = passed
        rows = tx.rows(candidates(backend, lower, upper, bool(passed)), params)
        if not rows:
            break
        for session_id in dict.fromkeys(row[0] for row in rows):
            if not backend.try_lock_session(tx, session_id):
                locked = True
            else:
                claimed = claim_events(
                    tx, session_id, holder=holder, now=clock(), lease=lease, limit=limit
                )
                if claimed:
                    return Dispatch("claimed", session_id, claimed)
            passed.append(session_id)
    if locked:
        # Claimable events wait in sessions other transactions hold: now, not later.
        return Dispatch("idle", retry_at=now)
    found = tx.rows(next_free(lower, upper), {**under, "now": now})
    return Dispatch("idle", retry_at=found[0][0] if found else None)
