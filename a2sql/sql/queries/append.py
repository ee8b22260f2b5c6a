"""append and read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy import bindparam, select

from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.records import AppendResult, StoredEvent
from a2sql.sql import executor as execute
from a2sql.sql.codec import stored_event
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.events import (
    EVENTS_BETWEEN,
    MAX_INDEX,
    SESSION,
    ValidEvent,
    append_status,
    events_by_id,
    insert_events,
    replay,
    session_status,
)
from a2sql.sql.schema import events as E

PARENT_ATTEMPTS = select(
    E.c.idx, E.c.attempt_count, E.c.failed_at, E.c.first_claimed_at.is_not(None)
).where(E.c.session_id == SESSION, E.c.idx.in_(bindparam("indexes", expanding=True)))


def has_pending(tx: Transaction, session_id: str) -> AppendResult:
    """An empty append: nothing written, only whether the session has unprocessed events."""
    return AppendResult(events=[], has_pending=session_status(tx, session_id)[1])


def duplicate_ids(ids: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for event_id in ids:
        if event_id in seen:
            return event_id
        seen.add(event_id)
    return None


def append(
    tx: Transaction,
    session_id: str,
    batch: Sequence[ValidEvent],
    *,
    now: datetime,
    new_id: Callable[[], str],
) -> AppendResult:
    """Append a non-empty batch, under the session's write lock."""
    supplied = [event.id for event in batch if event.id is not None]
    repeated = duplicate_ids(supplied)
    if repeated is not None:
        raise A2Error(
            ErrorCode.PARTIAL_DUPLICATE_BATCH,
            f"the batch holds event id {repeated!r} more than once",
        )
    status = append_status(tx, session_id, supplied, now)
    if status.taken:
        existing = events_by_id(tx, supplied)
        return _replay_or_reject(tx, session_id, batch, existing)

    _check_fence(tx, session_id, batch)
    stored = insert_events(
        tx,
        session_id,
        batch,
        first_index=status.last_index + 1,
        retired_attempts=status.retired_attempts,
        now=status.now,
        new_id=new_id,
    )
    return AppendResult(
        events=stored,
        has_pending=status.pending or any(not event.settled for event in batch),
    )


def _replay_or_reject(
    tx: Transaction,
    session_id: str,
    batch: Sequence[ValidEvent],
    existing: dict[str, StoredEvent],
) -> AppendResult:
    for event in existing.values():
        if event.session_id != session_id:
            raise A2Error(
                ErrorCode.PARTIAL_DUPLICATE_BATCH,
                f"event id {event.id!r} already exists in another session",
            )
    if len(existing) != len(batch):
        raise A2Error(
            ErrorCode.PARTIAL_DUPLICATE_BATCH,
            f"the batch mixes {len(existing)} already appended and "
            f"{len(batch) - len(existing)} new events",
        )
    stored = replay(batch, [existing[event.id] for event in batch if event.id is not None])
    return AppendResult(events=stored, has_pending=session_status(tx, session_id)[1], replayed=True)


def _check_fence(tx: Transaction, session_id: str, batch: Sequence[ValidEvent]) -> None:
    """Events caused by an attempt commit only while that attempt is still current.

    An event never claimed has had no attempt of its own: its attempt count is
    where a deleted session of the same id stopped (RETIRED_ATTEMPTS), and an
    attempt of that session, however high, is not current here."""
    causes = [event.cause for event in batch if event.cause is not None]
    if not causes:
        return
    parents = {
        idx: (attempt_count, failed_at, claimed)
        for idx, attempt_count, failed_at, claimed in execute.rows_for_each_chunk(
            tx,
            PARENT_ATTEMPTS,
            {"sid": session_id},
            "indexes",
            sorted({c.index for c in causes}),
        )
    }
    for cause in causes:
        if cause.index not in parents:
            raise A2Error(
                ErrorCode.EVENT_NOT_FOUND,
                f"no event at index {cause.index} in session {session_id!r} (named as cause)",
            )
        attempt_count, failed_at, claimed = parents[cause.index]
        if attempt_count != cause.attempt or failed_at is not None or not claimed:
            raise A2Error(
                ErrorCode.SUPERSEDED_ATTEMPT,
                f"attempt {cause.attempt} no longer owns event {cause.index} "
                f"in session {session_id!r}",
            )


def read(
    tx: Transaction, session_id: str, after_index: int | None, through_index: int | None
) -> list[StoredEvent]:
    """Events with ``after_index < index <= through_index``, by index."""
    rows = tx.rows(
        EVENTS_BETWEEN,
        {
            "sid": session_id,
            "after": 0 if after_index is None else after_index,
            "through": MAX_INDEX if through_index is None else through_index,
        },
    )
    return [stored_event(row) for row in rows]
