"""read_state, put_snapshot and list_snapshots."""

from __future__ import annotations

from datetime import datetime
from functools import cache

from sqlalchemy import Insert, bindparam, select

from a2sql.backends.base import Backend
from a2sql.core.errors import invalid
from a2sql.core.records import Event, Snapshot, SnapshotInfo, StateRead
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.events import SESSION, session_status
from a2sql.sql.schema import events as E
from a2sql.sql.schema import snapshots as S

SNAPSHOT_OF = select(S.c.up_to_index, S.c.state).where(
    S.c.session_id == SESSION, S.c.reducer_name == bindparam("reducer")
)

# What a reducer sees of an event: the six columns of ``Event``, no more.
EVENTS_AFTER = (
    select(E.c.event_id, E.c.event_type, E.c.payload, E.c.idx, E.c.session_id, E.c.created_at)
    .where(E.c.session_id == SESSION, E.c.idx > bindparam("after"))
    .order_by(E.c.idx)
)

SNAPSHOTS_OF_SESSION = (
    select(S.c.reducer_name, S.c.up_to_index, S.c.updated_at)
    .where(S.c.session_id == SESSION)
    .order_by(S.c.reducer_name)
)


def read_state(tx: Transaction, session_id: str, reducer_name: str) -> StateRead:
    """The reducer's snapshot (or None) and every event after it, by index."""
    row = tx.first(SNAPSHOT_OF, {"sid": session_id, "reducer": reducer_name})
    snapshot = None if row is None else Snapshot(index=row[0], state=row[1])
    rows = tx.rows(
        EVENTS_AFTER,
        {"sid": session_id, "after": 0 if snapshot is None else snapshot.index},
    )
    return StateRead(snapshot=snapshot, events=[Event(*row) for row in rows])


@cache
def _upsert_snapshot(backend: Backend) -> Insert:
    snapshot = backend.insert(S)
    upsert: Insert = snapshot.on_conflict_do_update(
        index_elements=[S.c.session_id, S.c.reducer_name],
        set_={
            "up_to_index": snapshot.excluded.up_to_index,
            "state": snapshot.excluded.state,
            "updated_at": snapshot.excluded.updated_at,
        },
        # A slow writer never clobbers a further-along snapshot.
        where=snapshot.excluded.up_to_index > S.c.up_to_index,
    )
    return upsert


def put_snapshot(
    tx: Transaction,
    backend: Backend,
    session_id: str,
    reducer_name: str,
    index: int,
    state_json: str,
    now: datetime,
) -> None:
    """Store the snapshot unless a stored one is at the same or a later index."""
    last_index, _ = session_status(tx, session_id)
    if index > last_index:
        raise invalid(
            "index",
            f"must be at most the session's last index ({last_index}) "
            f"for session {session_id!r}, got {index}",
        )
    tx.run(
        _upsert_snapshot(backend),
        {
            "session_id": session_id,
            "reducer_name": reducer_name,
            "up_to_index": index,
            "state": state_json,
            "updated_at": now,
        },
    )


def list_snapshots(tx: Transaction, session_id: str) -> list[SnapshotInfo]:
    return [
        SnapshotInfo(reducer_name=name, index=index, updated_at=updated_at)
        for name, index, updated_at in tx.rows(SNAPSHOTS_OF_SESSION, {"sid": session_id})
    ]
