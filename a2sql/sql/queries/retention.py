"""Deleting sessions: one on request, or the settled ones older than a cut (prune)."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Insert, Select, bindparam, case, delete, func, literal_column, select

from a2sql.backends.base import Backend
from a2sql.backends.column_types import Timestamp
from a2sql.core.records import DeleteResult, PruneResult
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.events import SESSION
from a2sql.sql.queries.operator_reads import latest_time, prefix_range
from a2sql.sql.schema import events as E
from a2sql.sql.schema import retired_attempts as R
from a2sql.sql.schema import snapshots as S

DELETE_EVENTS = delete(E).where(E.c.session_id == SESSION)
DELETE_SNAPSHOTS = delete(S).where(S.c.session_id == SESSION)

_CUT = bindparam("cut", type_=Timestamp())


@cache
def _retire_attempts(backend: Backend) -> Insert:
    """delete_session's: keep the session's highest attempt number, where one was
    claimed (a2sql.sql.schema), never lowering it. Its events' attempt counts started
    at the one kept before, so the highest of them is never below it."""
    last_attempt = (
        select(E.c.session_id, func.max(E.c.attempt_count))
        .where(E.c.session_id == SESSION, E.c.attempt_count > literal_column("0"))
        .group_by(E.c.session_id)
    )
    retired = backend.insert(R).from_select(["session_id", "last_attempt"], last_attempt)
    upsert: Insert = retired.on_conflict_do_update(
        index_elements=[R.c.session_id],
        set_={"last_attempt": retired.excluded.last_attempt},
        where=retired.excluded.last_attempt > R.c.last_attempt,
    )
    return upsert


def delete_session(tx: Transaction, backend: Backend, session_id: str) -> DeleteResult:
    """Delete the session's events and snapshots (the caller holds its lock), keeping its
    highest attempt number: the attempts of a session appended again under its id
    start after it, so that a worker still holding one of the deleted session's
    attempts can never fence an event of the new one."""
    params = {"sid": session_id}
    snapshots = tx.count(DELETE_SNAPSHOTS, params)
    tx.run(_retire_attempts(backend), params)
    return DeleteResult(events=tx.count(DELETE_EVENTS, params), snapshots=snapshots)


def _settled_before(backend: Backend) -> Any:
    """Every event processed (a dead letter is not) and the latest time before the cut."""
    unprocessed = func.sum(
        case((E.c.processed_at.is_(None), literal_column("1")), else_=literal_column("0"))
    )
    return (unprocessed == 0) & (latest_time(backend) < _CUT)


@cache
def _candidates(backend: Backend, bounded: bool) -> Select[Any]:
    key = E.c.session_id
    statement = select(key).where(key >= bindparam("lower"))
    if bounded:
        statement = statement.where(key < backend.opaque_to_planner(bindparam("upper")))
    return (
        statement.group_by(key)
        .having(_settled_before(backend))
        .order_by(key)
        .limit(bindparam("limit"))
    )


@cache
def _prunable_totals(backend: Backend, bounded: bool) -> Select[Any]:
    key = E.c.session_id
    found = select(key, func.count().label("events")).where(key >= bindparam("lower"))
    if bounded:
        found = found.where(key < backend.opaque_to_planner(bindparam("upper")))
    settled = found.group_by(key).having(_settled_before(backend)).subquery("settled")
    snapshot_count = (
        select(func.count())
        .where(S.c.session_id.in_(select(settled.c.session_id)))
        .scalar_subquery()
    )
    return select(func.count(), func.coalesce(func.sum(settled.c.events), 0), snapshot_count)


@cache
def _still_settled(backend: Backend) -> Select[Any]:
    return select(func.count()).where(E.c.session_id == SESSION).having(_settled_before(backend))


def prunable(
    tx: Transaction, backend: Backend, *, settled_before: datetime, prefix: str, limit: int
) -> list[str]:
    """Up to ``limit`` sessions under ``prefix`` that ``prune`` may delete, by id."""
    params = {**prefix_range(prefix), "cut": settled_before, "limit": limit}
    return [row[0] for row in tx.rows(_candidates(backend, "upper" in params), params)]


def prunable_totals(
    tx: Transaction, backend: Backend, *, settled_before: datetime, prefix: str
) -> PruneResult:
    """What ``prune`` would delete now, over every call until it returns 0 sessions."""
    params = {**prefix_range(prefix), "cut": settled_before}
    [(sessions, events, snapshots)] = tx.rows(_prunable_totals(backend, "upper" in params), params)
    return PruneResult(sessions=int(sessions), events=int(events), snapshots=int(snapshots))


def prune_session(
    tx: Transaction, backend: Backend, session_id: str, *, settled_before: datetime
) -> DeleteResult | None:
    """Delete the session if it is still settled before the cut (the caller holds its
    lock, and something may have been appended since it was found): else ``None``."""
    found = tx.first(_still_settled(backend), {"sid": session_id, "cut": settled_before})
    if found is None:
        return None
    return delete_session(tx, backend, session_id)
