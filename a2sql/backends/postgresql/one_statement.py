"""PostgreSQL's versions of append, claim_available, complete_attempt and fail_attempt:
their common case in one statement after the session's lock.

On PostgreSQL a2sql's cost is round trips. Each of these calls has a common
case that one statement can do whole on the server: number an append's events
after the session's last index; mark an event completed, promote its lane's
next event and insert what the handler returned; claim, or say until when
nothing is free; count a failure. The statement writes only when its answer
is final. When its answer is not (an id is already taken, the attempt no
longer holds the event), it writes nothing, its ``answer`` is ``None`` and the
call's full path runs and says why, reading what it needs (a2sql.execution.running).

In a transaction of a2sql's own the statement goes out with the session's
lock, a blocking one, and on some servers ``BEGIN`` and ``COMMIT``: on the
direct path (a2sql.execution.raw) one round trip and one transaction, sent whole
before the client waits, so that a client frozen mid-way never holds the lock.
Its ``now`` is the clock's reading, taken before the lock; the times it records
are computed in the statement, never earlier than what already happened in
the session (a2sql.sql.times), so the order the lock gives writes is the order
of their times.

The lock stays a statement of its own: under READ COMMITTED a statement's
snapshot is taken when it starts, so a lock taken inside it would not make it
see what the lock's previous holder committed. Within the statement every
part sees the database as it was before the statement: the session's last
index, whether it had unprocessed events, the lane's events.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import (
    Boolean,
    CompoundSelect,
    Insert,
    Select,
    Text,
    any_,
    bindparam,
    case,
    cast,
    exists,
    func,
    insert,
    literal_column,
    null,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects import postgresql

from a2sql.backends.column_types import Timestamp
from a2sql.core.arguments import Lease
from a2sql.core.records import AppendResult, ClaimResult, CompleteResult, EventCause, FailResult
from a2sql.plans.kinds import OneStatement
from a2sql.sql.codec import encode_cause, encode_ids
from a2sql.sql.executor import AnyRow
from a2sql.sql.queries.append import duplicate_ids
from a2sql.sql.queries.attempts import (
    COMPLETE_IF_CURRENT,
    FAIL_IF_CURRENT,
    counted_failure,
    fail_params,
    promote_lane_head,
    returned_id_taken,
)
from a2sql.sql.queries.claims import (
    NEXT_EXPIRY_AT,
    claim,
    claim_statement,
    claimable,
    claimed_events,
    nothing_free,
    waits_for_good,
)
from a2sql.sql.queries.events import (
    HAS_PENDING,
    INSERTED_COLUMNS,
    RETIRED_ATTEMPTS,
    SESSION_NOW,
    ValidEvent,
    last_index,
    new_stored_event,
)
from a2sql.sql.schema import events as E

T = TypeVar("T")

# --- events numbered on the server -------------------------------------------


class _Array(postgresql.ARRAY[Any]):
    """A list bound as it is: psycopg adapts lists itself, where SQLAlchemy's ARRAY
    would pass every item through its type's processing first."""

    cache_ok = True

    def bind_processor(self, dialect: Any) -> None:
        return None


_TEXTS = _Array(Text)


class _Batch(NamedTuple):
    """Where the inserted events' values come from: one row per event, ``offset`` its
    place in the batch, from 1."""

    offset: Any
    type: Any
    payload: Any
    id: Any
    settled: Any


# Parameters are never named as columns: on an UPDATE executed through a
# Connection, SQLAlchemy adds a parameter named as a column to its SET clause.
#
# One event: its values as parameters of their own (a list costs psycopg
# more to send than a value).
_ONE = _Batch(
    literal_column("1"),
    bindparam("new_type", type_=E.c.event_type.type),
    bindparam("new_payload", type_=Text),
    bindparam("new_id", type_=E.c.event_id.type),
    bindparam("new_settled", type_=Boolean),
)
# Several: a list each, in event id order, so that two sessions inserting
# batches that share ids wait on the first shared one instead of on each
# other from both ends (a deadlock), as a2sql.sql.queries.events.insert_events does.
_ROWS = (
    func.unnest(
        bindparam("offsets", type_=_Array(postgresql.BIGINT)),
        bindparam("types", type_=_TEXTS),
        bindparam("payloads", type_=_TEXTS),
        bindparam("ids", type_=_TEXTS),
        bindparam("settled", type_=_Array(Boolean)),
    )
    .table_valued("offset", "type", "payload", "id", "settled")
    .render_derived("batch")
)
_MANY = _Batch(_ROWS.c.offset, _ROWS.c.type, _ROWS.c.payload, _ROWS.c.id, _ROWS.c.settled)


def _rows(batch: _Batch, after: Any, cause: Any, retired: Any, now: Any) -> Select[Any]:
    """The batch's rows numbered from ``after`` + 1, without lanes, their attempt count
    starting at ``retired`` (RETIRED_ATTEMPTS), created at ``now``."""
    return select(
        retired,
        # Typed as where it is compared (VARCHAR): one parameter, one type.
        bindparam("sid", type_=E.c.session_id.type),
        after + batch.offset,
        batch.type,
        cast(batch.payload, postgresql.JSON),
        batch.id,
        now,
        cause,
        null(),
        true(),
        case((batch.settled, now), else_=null()),
    )


def _batch_params(batch: Sequence[ValidEvent], ids: Sequence[str]) -> dict[str, Any]:
    if len(batch) == 1:
        [event] = batch
        return {
            "new_type": event.type,
            "new_payload": event.payload_json,
            "new_id": ids[0],
            "new_settled": event.settled,
        }
    order = sorted(range(len(batch)), key=ids.__getitem__)
    return {
        "offsets": [position + 1 for position in order],
        "types": [batch[position].type for position in order],
        "payloads": [batch[position].payload_json for position in order],
        "ids": [ids[position] for position in order],
        "settled": [batch[position].settled for position in order],
    }


def fuses(batch: Sequence[ValidEvent]) -> bool:
    """Whether a batch's events can be inserted by a fused statement: none has a lane
    (whether a lane's event is ready depends on the lane's events), none runs later or
    waits (a wait looks for its signal first), and no id comes twice. An append's
    events must also have no cause (a2sql.plans.operations): causes are checked
    against their attempts first."""
    for event in batch:
        if event.lane is not None or event.available_at is not None or event.wake_on is not None:
            return False
    return duplicate_ids([event.id for event in batch if event.id is not None]) is None


# --- append ------------------------------------------------------------------


def _append(batch: _Batch, taken: Any) -> Insert:
    """One row per event appended (none: an id was taken, nothing appended): its
    index, whether the session had unprocessed events before (a subquery in
    RETURNING sees the session as it was before the statement), its attempt
    count, and the time it was created at."""
    rows = _rows(batch, func.coalesce(last_index(), 0), null(), RETIRED_ATTEMPTS, SESSION_NOW)
    return (
        insert(E)
        .from_select(INSERTED_COLUMNS, rows.where(~taken))
        .returning(E.c.idx, HAS_PENDING, E.c.attempt_count, E.c.created_at)
    )


_ONE_TAKEN = exists().where(E.c.event_id == _ONE.id)
_ANY_TAKEN = exists().where(E.c.event_id == any_(bindparam("supplied", type_=_TEXTS)))
APPEND_ONE = _append(_ONE, _ONE_TAKEN)
APPEND_MANY = _append(_MANY, _ANY_TAKEN)


def append(
    session_id: str, batch: Sequence[ValidEvent], *, now: datetime, new_id: Callable[[], str]
) -> OneStatement[AppendResult]:
    """A batch without causes, lanes or a repeated id, none of its ids taken."""
    ids = [event.id if event.id is not None else new_id() for event in batch]
    params = _batch_params(batch, ids)
    params.update(sid=session_id, now=now)
    if len(batch) > 1:
        params["supplied"] = [event.id for event in batch if event.id is not None]

    def answer(rows: Sequence[AnyRow]) -> AppendResult | None:
        if not rows:
            return None
        first = min(row[0] for row in rows)
        pending, retired, created = rows[0][1], int(rows[0][2]), rows[0][3]
        return AppendResult(
            events=[
                new_stored_event(session_id, event, event_id, first + offset, created, retired)
                for offset, (event, event_id) in enumerate(zip(batch, ids, strict=True))
            ],
            has_pending=bool(pending) or any(not event.settled for event in batch),
        )

    return OneStatement(APPEND_ONE if len(batch) == 1 else APPEND_MANY, params, answer)


# --- complete_attempt --------------------------------------------------------


def _complete(batch: _Batch | None) -> Select[Any]:
    """The session's last index before the completion, the attempt count the returned
    events start at, and the time the completion recorded; no row: not completed."""
    done = COMPLETE_IF_CURRENT.cte("done")
    # The lane's next event, read from an alias: the completed one left out,
    # which the statement still sees unprocessed.
    promoted = promote_lane_head(done.c.lane, E.alias("lane_event"), besides=bindparam("index"))
    statement = select(done.c.last_index, done.c.retired_attempts, done.c.now).add_cte(
        promoted.cte("promoted")
    )
    if batch is None:
        return statement
    rows = _rows(
        batch,
        done.c.last_index,
        bindparam("caused_by", type_=Text),
        done.c.retired_attempts,
        done.c.now,
    )
    returned = insert(E).from_select(
        INSERTED_COLUMNS,
        rows.select_from(done if batch is _ONE else done.join(_ROWS, true())),
    )
    return statement.add_cte(returned.cte("returned"))


# By the number of events returned: none, one, several.
_COMPLETE = {size: _complete(batch) for size, batch in ((0, None), (1, _ONE), (2, _MANY))}


def complete(
    session_id: str,
    *,
    index: int,
    attempt: int,
    batch: Sequence[ValidEvent],
    now: datetime,
    new_id: Callable[[], str],
) -> OneStatement[CompleteResult]:
    """A completion whose returned events have no lanes and no repeated id."""
    ids = [event.id if event.id is not None else new_id() for event in batch]
    params = _batch_params(batch, ids) if batch else {}
    params.update(
        sid=session_id,
        index=index,
        attempt=attempt,
        now=now,
        returned=encode_ids([event.id for event in batch if event.id is not None]),
        caused_by=encode_cause(EventCause(index, attempt)),
    )

    def answer(rows: Sequence[AnyRow]) -> CompleteResult | None:
        if not rows:
            return None
        last, retired, recorded = rows[0][0], int(rows[0][1]), rows[0][2]
        return CompleteResult(
            "completed",
            [
                new_stored_event(session_id, event, event_id, last + 1 + offset, recorded, retired)
                for offset, (event, event_id) in enumerate(zip(batch, ids, strict=True))
            ],
        )

    return OneStatement(
        _COMPLETE[min(len(batch), 2)], params, answer, lambda error: returned_id_taken(batch, error)
    )


# --- claim_available and fail_attempt ----------------------------------------


def claim_available(
    session_id: str,
    *,
    holder: str,
    now: datetime,
    lease: Lease,
    exclude_indexes: Sequence[int],
    limit: int | None,
) -> OneStatement[ClaimResult]:
    """A claim; when nothing is free, its answer says until when, as the full path's."""
    _, params = claim(
        session_id,
        holder=holder,
        now=now,
        lease=lease,
        exclude_indexes=exclude_indexes,
        limit=limit,
    )

    def answer(rows: Sequence[AnyRow]) -> ClaimResult | None:
        if not rows:
            return None
        if rows[0][0] is None:  # no event: nothing was free
            retry_at = rows[0][-1]
            if waits_for_good(retry_at):
                return None  # the full path looks past the waits
            return nothing_free(retry_at)
        events = [row[:-1] for row in rows]
        return ClaimResult("claimed", claimed_events(events, session_id, holder=holder))

    return OneStatement(
        _claim_or_next_expiry(bool(exclude_indexes), limit is not None), params, answer
    )


_CLAIMABLE = E.alias("claimable_event")


@cache
def _claim_or_next_expiry(excluding: bool, limited: bool) -> CompoundSelect[Any]:
    """The claim, its rows with a last column ``retry_at`` (NULL); when nothing is free
    to claim at ``now``, one row instead, NULL but for ``retry_at``: the session's
    earliest claim expiry after ``now`` (NEXT_EXPIRY_AT; NULL when no event is
    dispatchable), which the full path reads in a statement of its own.

    Every part of the statement sees the database as it was before it, so the row
    comes exactly when the claim takes nothing for want of free events (its limit is
    at least 1). The claim's columns are converted once, by the outer select, as a
    read gives them (times in UTC, payloads as text)."""
    free_now = claimable(_CLAIMABLE, _CLAIMABLE.c.idx, excluding=excluding, limited=False)
    claimed = claim_statement(excluding, limited).cte("claimed")
    return union_all(
        select(*claimed.c, cast(null(), Timestamp()).label(NEXT_EXPIRY_AT.name)),
        select(*(null().label(column.name) for column in claimed.c), NEXT_EXPIRY_AT).where(
            ~exists(free_now)
        ),
    )


def fail_attempt(
    session_id: str,
    *,
    index: int,
    attempt: int,
    error: str,
    max_failures: int,
    now: datetime,
    retry_after_ms: int | None,
) -> OneStatement[FailResult]:
    """A failure of the attempt that holds the event."""
    params = fail_params(
        session_id,
        index=index,
        attempt=attempt,
        error=error,
        max_failures=max_failures,
        now=now,
        retry_after_ms=retry_after_ms,
    )

    def answer(rows: Sequence[AnyRow]) -> FailResult | None:
        if not rows:
            return None
        return counted_failure(rows[0], max_failures=max_failures)

    return OneStatement(FAIL_IF_CURRENT, params, answer)
