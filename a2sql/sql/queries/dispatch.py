"""claim_next: work across sessions, the oldest claimable event's session first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, bindparam, func, select

from a2sql.backends.base import Backend
from a2sql.core.arguments import Lease
from a2sql.core.records import Dispatch
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.claims import FREE, READY, claim_events, waits_for_good
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
    """Session ids of the oldest claimable events: a2_events_dispatch_age in order, the
    prefix tested as the backend tests it on a walk in that order."""
    statement = select(E.c.session_id).where(*READY, FREE)
    statement = backend.under_prefix_by_age(statement, E.c.session_id, lower, upper)
    if skipping:
        statement = statement.where(E.c.session_id.not_in(bindparam("skipped", expanding=True)))
    return statement.order_by(E.c.created_at, E.c.session_id).limit(CANDIDATES_PER_READ)


@cache
def next_free(lower: bool, upper: bool, *, but_waits: bool = False) -> Select[Any]:
    """When the next claim, retry delay, later run or wait's timeout under the prefix
    ends; ``but_waits``: passing over waits (for when the first is a wait without a
    timeout, a2sql.sql.queries.claims.waits_for_good)."""
    statement = select(func.min(E.c.claim_expires_at)).where(*READY, E.c.claim_expires_at > NOW)
    if but_waits:
        statement = statement.where(E.c.wake_on.is_(None))
    return _under_prefix(statement, lower, upper)


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
    params = {**under, "now": now}
    [(retry_at,)] = tx.rows(next_free(lower, upper), params)
    if waits_for_good(retry_at):
        [(retry_at,)] = tx.rows(next_free(lower, upper, but_waits=True), params)
    return Dispatch("idle", retry_at=retry_at)
