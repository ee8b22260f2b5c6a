"""The common case of append, claim_available, complete_attempt and fail_attempt in
one statement after the session's lock (PostgreSQL).

On PostgreSQL a2sql's cost is round trips. Each of these calls has a common
case that one statement can do whole on the server: number an append's events
after the session's last index; mark an event completed, promote its lane's
next event and insert what the handler returned; claim; count a failure. The
statement writes only when its answer is final. When it writes nothing (an id
is already taken, the attempt no longer holds the event, nothing is free to
claim), its ``answer`` is ``None`` and the call's full path runs and says why,
reading what it needs (a2sql.calls).

On a2sql's direct path (a2sql.direct) the transaction is one pipeline with
two round trips: BEGIN and the lock statement; then, once the lock is
granted, this statement (built only then: its parameters hold the clock's
reading, which must follow the lock as in every transaction, so that the
times a session's writes carry follow the order the lock gives them) and
COMMIT. Elsewhere the statement follows the lock as any other: on an engine
something observes, in the caller's transaction, on the asyncio engine, and
in an AsyncStore's hand-off (a2sql.handoff), which commits only once the
statement has run and the call was not cancelled (a call cancelled while a
statement waits for a row lock commits nothing).

The lock stays a statement of its own: under READ COMMITTED a statement's
snapshot is taken when it starts, so a lock taken inside it would not make it
see what the lock's previous holder committed. Within the statement every
part sees the database as it was before the statement: the session's last
index, whether it had unprocessed events, the lane's events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Generic, NamedTuple, TypeVar

from sqlalchemy import (
    Boolean,
    Executable,
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
)
from sqlalchemy.dialects import postgresql

from a2sql.codec import encode_cause, encode_ids
from a2sql.errors import A2Error
from a2sql.execute import AnyRow
from a2sql.ops.append import duplicate_ids
from a2sql.ops.attempts import (
    COMPLETE_IF_CURRENT,
    FAIL_IF_CURRENT,
    NOW,
    counted_failure,
    fail_params,
    promote_lane_head,
    returned_id_taken,
)
from a2sql.ops.claims import claim, claimed_events
from a2sql.ops.events import (
    HAS_PENDING,
    INSERTED_COLUMNS,
    ValidEvent,
    last_index,
    new_stored_event,
)
from a2sql.records import AppendResult, ClaimResult, CompleteResult, EventCause, FailResult
from a2sql.schema import events as E

T = TypeVar("T")


class Fused(NamedTuple, Generic[T]):
    """A call's common case: one statement, and what its rows answer (``None``: not
    the common case, nothing was written, the full path decides)."""

    statement: Executable
    params: Mapping[str, Any]
    answer: Callable[[Sequence[AnyRow]], T | None]
    # The error to raise when the statement hits the unique event id index;
    # ``None``: the driver's error, translated as any other.
    collided: Callable[[BaseException], A2Error] | None = None


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
# other from both ends (a deadlock), as a2sql.ops.events.insert_events does.
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


def _rows(batch: _Batch, after: Any, cause: Any) -> Select[Any]:
    """The batch's rows numbered from ``after`` + 1, without lanes."""
    return select(
        # Typed as where it is compared (VARCHAR): one parameter, one type.
        bindparam("sid", type_=E.c.session_id.type),
        after + batch.offset,
        batch.type,
        cast(batch.payload, postgresql.JSON),
        batch.id,
        NOW,
        cause,
        null(),
        true(),
        case((batch.settled, NOW), else_=null()),
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
    (whether a lane's event is ready depends on the lane's events) and no id comes
    twice. An append's events must also have no cause (a2sql.calls): causes are
    checked against their attempts first."""
    for event in batch:
        if event.lane is not None:
            return False
    return duplicate_ids([event.id for event in batch if event.id is not None]) is None


# --- append ------------------------------------------------------------------


def _append(batch: _Batch, taken: Any) -> Insert:
    """One row per event appended (none: an id was taken, nothing appended): its
    index, and whether the session had unprocessed events before (a subquery in
    RETURNING sees the session as it was before the statement)."""
    return (
        insert(E)
        .from_select(
            INSERTED_COLUMNS, _rows(batch, func.coalesce(last_index(), 0), null()).where(~taken)
        )
        .returning(E.c.idx, HAS_PENDING)
    )


APPEND_ONE = _append(_ONE, exists().where(E.c.event_id == _ONE.id))
APPEND_MANY = _append(
    _MANY, exists().where(E.c.event_id == any_(bindparam("supplied", type_=_TEXTS)))
)


def append(
    session_id: str, batch: Sequence[ValidEvent], *, now: datetime, new_id: Callable[[], str]
) -> Fused[AppendResult]:
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
        pending = rows[0][1]
        return AppendResult(
            events=[
                new_stored_event(session_id, event, event_id, first + offset, now)
                for offset, (event, event_id) in enumerate(zip(batch, ids, strict=True))
            ],
            has_pending=bool(pending) or any(not event.settled for event in batch),
        )

    return Fused(APPEND_ONE if len(batch) == 1 else APPEND_MANY, params, answer)


# --- complete_attempt --------------------------------------------------------

_DONE = COMPLETE_IF_CURRENT.cte("done")
# The lane's next event, read from an alias: the completed one left out,
# which the statement still sees unprocessed.
_PROMOTED = promote_lane_head(_DONE.c.lane, E.alias("lane_event"), besides=bindparam("index")).cte(
    "promoted"
)


def _complete(batch: _Batch | None) -> Select[Any]:
    """The session's last index before the completion; no row: not completed."""
    statement = select(_DONE.c.last_index).add_cte(_PROMOTED)
    if batch is None:
        return statement
    returned = insert(E).from_select(
        INSERTED_COLUMNS,
        _rows(batch, _DONE.c.last_index, bindparam("caused_by", type_=Text)).select_from(
            _DONE if batch is _ONE else _DONE.join(_ROWS, true())
        ),
    )
    return statement.add_cte(returned.cte("returned"))


COMPLETE_NONE = _complete(None)
COMPLETE_ONE = _complete(_ONE)
COMPLETE_MANY = _complete(_MANY)


def complete(
    session_id: str,
    *,
    index: int,
    attempt: int,
    batch: Sequence[ValidEvent],
    now: datetime,
    new_id: Callable[[], str],
) -> Fused[CompleteResult]:
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
        last = rows[0][0]
        return CompleteResult(
            "completed",
            [
                new_stored_event(session_id, event, event_id, last + 1 + offset, now)
                for offset, (event, event_id) in enumerate(zip(batch, ids, strict=True))
            ],
        )

    statement = COMPLETE_NONE if not batch else COMPLETE_ONE if len(batch) == 1 else COMPLETE_MANY
    return Fused(statement, params, answer, lambda error: returned_id_taken(batch, error))


# --- claim_available and fail_attempt ----------------------------------------


def claim_available(
    session_id: str,
    *,
    holder: str,
    now: datetime,
    expires_at: datetime,
    exclude_indexes: Sequence[int],
    limit: int | None,
) -> Fused[ClaimResult]:
    """A claim that takes something; when nothing is free, the full path says until when."""
    statement, params = claim(
        session_id,
        holder=holder,
        now=now,
        expires_at=expires_at,
        exclude_indexes=exclude_indexes,
        limit=limit,
    )

    def answer(rows: Sequence[AnyRow]) -> ClaimResult | None:
        if not rows:
            return None
        return ClaimResult(
            "claimed",
            claimed_events(rows, session_id, holder=holder, now=now, expires_at=expires_at),
        )

    return Fused(statement, params, answer)


def fail_attempt(
    session_id: str,
    *,
    index: int,
    attempt: int,
    error: str,
    max_failures: int,
    now: datetime,
    retry_at: datetime | None,
) -> Fused[FailResult]:
    """A failure of the attempt that holds the event."""
    params = fail_params(
        session_id,
        index=index,
        attempt=attempt,
        error=error,
        max_failures=max_failures,
        now=now,
        retry_at=retry_at,
    )

    def answer(rows: Sequence[AnyRow]) -> FailResult | None:
        if not rows:
            return None
        return counted_failure(rows[0], max_failures=max_failures, retry_at=retry_at)

    return Fused(FAIL_IF_CURRENT, params, answer)
