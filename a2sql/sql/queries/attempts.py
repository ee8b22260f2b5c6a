"""complete_attempt and fail_attempt: the transitions fenced by the attempt number."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Update,
    bindparam,
    case,
    false,
    null,
    select,
    true,
    update,
)
from sqlalchemy.exc import DBAPIError

from a2sql.core.errors import A2Error, ErrorCode, is_event_id_collision, listed, taken_event_id
from a2sql.core.records import CompleteResult, EventCause, FailResult, StoredEvent
from a2sql.sql.codec import encode_ids, stored_event
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.append import duplicate_ids
from a2sql.sql.queries.events import (
    EVENT_AT,
    LAST_CREATED,
    ONE_ROW,
    RETIRED_ATTEMPTS,
    SESSION,
    ValidEvent,
    events_by_id,
    insert_events,
    last_index,
    replay,
)
from a2sql.sql.schema import events as E
from a2sql.sql.times import NOW, After, Latest

LAST = E.alias("last_event")
THIS_EVENT = (E.c.session_id == SESSION, E.c.idx == bindparam("index"))

# The event, while the attempt ``attempt`` holds its claim.
HELD_BY_ATTEMPT = (
    *THIS_EVENT,
    E.c.attempt_count == bindparam("attempt"),
    E.c.processed_at.is_(None),
    E.c.failed_at.is_(None),
    E.c.claim_holder.is_not(None),
)

# The time a write to the event records (a2sql.sql.times): never earlier than
# the session's last event's creation, nor than the attempt's claim (the
# event's other times are earlier than its claim).
EVENT_NOW = Latest(NOW, LAST_CREATED, E.c.last_claimed_at)

# The common completion in one statement: mark the event processed if this
# attempt still holds it, and return what the rest of the work needs: the
# lane to move on, where the returned events' indexes and attempt counts start,
# and the time it recorded (which the returned events are created at).
COMPLETE_IF_CURRENT = (
    update(E)
    .where(*HELD_BY_ATTEMPT)
    .values(
        processed_at=EVENT_NOW,
        processed_by_attempt=bindparam("attempt"),
        returned_event_ids=bindparam("returned"),
        lane_ready=false(),
        claim_holder=null(),
        claim_expires_at=null(),
    )
    .returning(
        E.c.lane,
        last_index(LAST).label("last_index"),
        RETIRED_ATTEMPTS.label("retired_attempts"),
        E.c.processed_at.label("now"),
    )
)


def promote_lane_head(
    lane: ColumnElement[Any], events: Any = E, *, besides: ColumnElement[Any] | None = None
) -> Update:
    """Make ready the lane's oldest unprocessed event, read from ``events`` (E or an
    alias of it): first in a2_events_lane_pending (see a2sql.sql.queries.events on reading
    firsts in index order). ``besides``: an index left out, the event being completed
    by the same statement, which still sees it unprocessed."""
    head = select(events.c.idx).where(
        events.c.session_id == SESSION,
        events.c.lane == lane,
        events.c.processed_at.is_(None),
    )
    if besides is not None:
        head = head.where(events.c.idx != besides)
    return (
        update(E)
        .where(
            E.c.session_id == SESSION,
            E.c.idx
            == head.order_by(events.c.session_id, events.c.lane, events.c.idx)
            .limit(ONE_ROW)
            .scalar_subquery(),
        )
        .values(lane_ready=true())
    )


PROMOTE_LANE_HEAD = promote_lane_head(bindparam("lane_name"))

# The common failure in one statement: count it and release the claim if this
# attempt still holds the event. SET reads the row as it was, so
# failure_count + 1 is this failure's count: at max_failures the event is
# dead-lettered, else claimable again at once or ``retry_after_ms`` after the
# failure (NULL: at once). It returns the count and when the event is
# claimable again (NULL: at once, or never).
_THIS_FAILURE = E.c.failure_count + 1
_DEAD = bindparam("max_failures") <= _THIS_FAILURE
FAIL_IF_CURRENT = (
    update(E)
    .where(*HELD_BY_ATTEMPT)
    .values(
        failure_count=_THIS_FAILURE,
        last_error=bindparam("error"),
        last_failed_at=EVENT_NOW,
        last_failed_attempt=bindparam("attempt"),
        failed_at=case((_DEAD, EVENT_NOW), else_=null()),
        claim_holder=null(),
        claim_expires_at=case(
            (_DEAD, null()),
            else_=After(EVENT_NOW, bindparam("retry_after_ms", type_=BigInteger())),
        ),
    )
    .returning(E.c.failure_count, E.c.claim_expires_at)
)


def event_at(tx: Transaction, session_id: str, index: int) -> StoredEvent:
    row = tx.first(EVENT_AT, {"sid": session_id, "index": index})
    if row is None:
        raise A2Error(
            ErrorCode.EVENT_NOT_FOUND, f"no event at index {index} in session {session_id!r}"
        )
    return stored_event(row)


def complete_attempt(
    tx: Transaction,
    session_id: str,
    *,
    index: int,
    attempt: int,
    batch: Sequence[ValidEvent],
    now: datetime,
    new_id: Callable[[], str],
) -> CompleteResult:
    """Mark the event processed by ``attempt`` and append what the handler returned.

    ``batch`` is the returned events, their cause already set to this attempt.
    The common case (the attempt still holds the event) is one guarded
    UPDATE and the insert; anything else falls to the full checks below,
    which read the event as it is.
    """
    ids = [event.id for event in batch if event.id is not None]
    if duplicate_ids(ids) is None:
        marked = tx.first(
            COMPLETE_IF_CURRENT,
            {
                "sid": session_id,
                "index": index,
                "now": now,
                "attempt": attempt,
                "returned": encode_ids(ids),
            },
        )
        if marked is not None:
            lane, last_index, retired, recorded = marked
            return CompleteResult(
                "completed",
                _append_returned(
                    tx, session_id, lane, batch, last_index, int(retired), recorded, new_id
                ),
            )

    # The guarded update took nothing: the event is missing, done or no longer
    # this attempt's, or the batch names an id twice. Read it and say which.
    parent = event_at(tx, session_id, index)
    repeated = duplicate_ids(ids)
    if repeated is not None:
        raise A2Error(
            ErrorCode.PARTIAL_DUPLICATE_BATCH,
            f"the returned events hold event id {repeated!r} more than once",
        )
    if parent.processed_at is not None:
        if parent.processed_by_attempt != attempt:
            return CompleteResult("superseded")
        return CompleteResult(
            "completed", _replay(tx, session_id, parent, batch, ids), replayed=True
        )
    # Not processed and not taken by the guarded update: the attempt is not
    # current, its claim was released, or the event is dead-lettered.
    return CompleteResult("superseded")


def _append_returned(
    tx: Transaction,
    session_id: str,
    lane: str | None,
    caused: Sequence[ValidEvent],
    last_index: int,
    retired_attempts: int,
    now: datetime,
    new_id: Callable[[], str],
) -> list[StoredEvent]:
    """After the event was marked processed: promote its lane's head, append the children."""
    if lane is not None:
        tx.run(PROMOTE_LANE_HEAD, {"sid": session_id, "lane_name": lane})
    try:
        return insert_events(
            tx,
            session_id,
            caused,
            first_index=last_index + 1,
            retired_attempts=retired_attempts,
            now=now,
            new_id=new_id,
        )
    except DBAPIError as error:
        if not is_event_id_collision(error):
            raise
        # The unique index is the check: the transaction is rolled back, and
        # the event stays unprocessed.
        raise returned_id_taken(caused, error) from None


def returned_id_taken(caused: Sequence[ValidEvent], error: BaseException) -> A2Error:
    """The error of a completion whose returned events hit the unique event id index
    (``error``): the id taken where the database names it, else the batch's ids."""
    taken = taken_event_id(error)
    which = repr(taken) if taken is not None else f"one of {listed([e.id for e in caused])}"
    return A2Error(
        ErrorCode.PARTIAL_DUPLICATE_BATCH,
        f"a returned event id already exists, in this session or another: {which}",
    )


def _replay(
    tx: Transaction,
    session_id: str,
    parent: StoredEvent,
    caused: Sequence[ValidEvent],
    ids: list[str],
) -> list[StoredEvent]:
    """A retried completion by the attempt that did complete: it must name the same batch."""
    if parent.returned_event_ids != ids:
        raise A2Error(
            ErrorCode.PARTIAL_DUPLICATE_BATCH,
            f"attempt {parent.processed_by_attempt} completed event {parent.index} "
            "with a different batch of returned events",
        )
    stored = events_by_id(tx, ids)
    cause = EventCause(parent.index, parent.processed_by_attempt or 0)
    mismatched = [
        event_id
        for event_id in ids
        if event_id not in stored
        or stored[event_id].session_id != session_id
        or stored[event_id].cause != cause
    ]
    if mismatched:
        raise A2Error(
            ErrorCode.PARTIAL_DUPLICATE_BATCH,
            f"returned event {mismatched[0]!r} does not match the committed batch",
        )
    return replay(caused, [stored[event_id] for event_id in ids])


def fail_params(
    session_id: str,
    *,
    index: int,
    attempt: int,
    error: str,
    max_failures: int,
    now: datetime,
    retry_after_ms: int | None,
) -> dict[str, Any]:
    """The parameters of ``FAIL_IF_CURRENT``; no delay (or 0): claimable at once."""
    return {
        "sid": session_id,
        "index": index,
        "attempt": attempt,
        "error": error,
        "now": now,
        "max_failures": max_failures,
        "retry_after_ms": retry_after_ms or None,
    }


def counted_failure(row: Sequence[Any], *, max_failures: int) -> FailResult:
    """The outcome of a failure ``FAIL_IF_CURRENT`` counted (``row`` is what it returned)."""
    failures = int(row[0])
    if failures >= max_failures:
        return FailResult("dead_lettered", failures)
    return FailResult("failed", failures, row[1])


def fail_attempt(
    tx: Transaction,
    session_id: str,
    *,
    index: int,
    attempt: int,
    error: str,
    max_failures: int,
    now: datetime,
    retry_after_ms: int | None,
) -> FailResult:
    """Count a failure of the current attempt and release its claim; with
    ``retry_after_ms``, a failed (not dead-lettered) event is claimable again only that
    long after the failure (§6)."""
    failed = tx.first(
        FAIL_IF_CURRENT,
        fail_params(
            session_id,
            index=index,
            attempt=attempt,
            error=error,
            max_failures=max_failures,
            now=now,
            retry_after_ms=retry_after_ms,
        ),
    )
    if failed is not None:
        return counted_failure(failed, max_failures=max_failures)
    # The attempt does not hold the event: say why.
    event = event_at(tx, session_id, index)
    if event.processed_at is not None or event.attempt_count != attempt:
        return FailResult("superseded", event.failure_count)
    if event.failed_at is not None:
        return FailResult("dead_lettered", event.failure_count)
    # Released. A retried call of the failure that released the claim reports
    # it again, unless an operator requeued the event since (failures reset to 0).
    if event.last_failed_attempt != attempt or event.failure_count == 0:
        return FailResult("superseded", event.failure_count)
    delayed = event.claim_expires_at
    return FailResult(
        "failed", event.failure_count, delayed if delayed is not None and delayed > now else None
    )
