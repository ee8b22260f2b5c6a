"""presence.set and presence.read: per-field last-writer-wins with a TTL.

An expired field is gone: a read never returns it and a write treats it as
absent, whether or not it was swept yet. Sweeping is only housekeeping, done
by writes, so that reading needs no write access (a read-only SQLite file),
a bounded batch each, so that no write pays for everything expired before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import BindParameter, Insert, bindparam, delete, literal_column, or_, select, tuple_

from a2sql.backends.base import Backend
from a2sql.backends.column_types import Timestamp
from a2sql.core.clock import to_millis
from a2sql.core.records import PresenceEntry
from a2sql.sql.executor import Transaction
from a2sql.sql.schema import presence as P


def default_seen(at: datetime) -> int:
    """``seen`` for a write that gives none: its ``at`` in ms since the Unix epoch.

    The store orders nothing by ``seen``: it keeps it as given, for the
    application (a heartbeat counter, the last event index a participant saw).
    Derived from ``at``, the default orders as ``at`` does, so a reader that
    compares ``seen`` agrees with the store's last-writer-wins, and a newer
    write of a caller that never gives ``seen`` never carries a smaller one.
    Any ``at`` (years 1 to 9999) fits the column's 64 bits.
    """
    return to_millis(at)


NS: BindParameter[str] = bindparam("ns")
NOW = bindparam("now", type_=Timestamp())

DELETE_FIELD = delete(P).where(
    P.c.ns == NS,
    P.c.participant == bindparam("participant"),
    P.c.field == bindparam("field"),
    or_(P.c.at <= bindparam("at", type_=Timestamp()), P.c.expires_at <= NOW),
)

# How many expired rows one write sweeps at most: what a write costs must not
# depend on how much expired before it (a million rows took seconds, every
# SQLite writer waiting meanwhile). Each write sweeps up to this many, so rows
# go away as fast as writes that leave them come.
SWEEP_BATCH = 500

# Up to SWEEP_BATCH of the namespace's expired rows, in primary key order (the
# index's order: no sort, the scan stops at the batch), but none another
# transaction holds: a sweep never waits, so it cannot deadlock with writes
# (or other sweeps) that take the same rows in another order; what it skips,
# a later write sweeps. SQLite has no FOR UPDATE (its writers are serialized)
# and renders none. The bound is written into the SQL, so that PostgreSQL's
# generic plan of the prepared statement knows it (as a2sql.sql.queries.events.ONE_ROW).
_EXPIRED = (
    select(P.c.ns, P.c.participant, P.c.field)
    .where(P.c.ns == NS, P.c.expires_at <= NOW)
    .order_by(P.c.ns, P.c.participant, P.c.field)
    .limit(literal_column(str(SWEEP_BATCH)))
    .with_for_update(skip_locked=True)
)
SWEEP = delete(P).where(
    P.c.ns == NS,
    P.c.expires_at <= NOW,
    tuple_(P.c.ns, P.c.participant, P.c.field).in_(_EXPIRED),
)

LIVE = (
    select(P.c.participant, P.c.field, P.c.value, P.c.seen, P.c.at, P.c.expires_at)
    .where(P.c.ns == NS, P.c.expires_at > NOW)
    .order_by(P.c.participant, P.c.field)
)


def set_fields(
    tx: Transaction,
    backend: Backend,
    ns: str,
    participant: str,
    fields: Sequence[tuple[str, str | None]],
    *,
    at: datetime,
    seen: int,
    now: datetime,
    expires_at: datetime,
) -> None:
    """Upsert or delete each field, then sweep up to ``SWEEP_BATCH`` of the namespace's
    expired rows; ``fields`` holds (field, encoded value or None for delete).

    Fields are written in sorted order, deletions and upserts alike, so that
    concurrent writers of the same participant take row locks in one order
    and cannot deadlock; the sweep comes last and never waits.
    """
    upserts: list[dict[str, Any]] = []
    for field, value_json in sorted(fields, key=lambda item: item[0]):
        if value_json is not None:
            upserts.append(
                {
                    "ns": ns,
                    "participant": participant,
                    "field": field,
                    "value": value_json,
                    "seen": seen,
                    "at": at,
                    "now": now,
                    "expires_at": expires_at,
                }
            )
            continue
        # Upserts of the fields before this one first: one order for every row.
        _upsert(tx, backend, upserts)
        upserts = []
        tx.run(
            DELETE_FIELD,
            {"ns": ns, "participant": participant, "field": field, "at": at, "now": now},
        )
    _upsert(tx, backend, upserts)
    tx.run(SWEEP, {"ns": ns, "now": now})


@cache
def _upsert_presence(backend: Backend) -> Insert:
    entry = backend.insert(P)
    upsert: Insert = entry.on_conflict_do_update(
        index_elements=[P.c.ns, P.c.participant, P.c.field],
        set_={
            "value": entry.excluded.value,
            "seen": entry.excluded.seen,
            "at": entry.excluded.at,
            "expires_at": entry.excluded.expires_at,
        },
        # Last writer wins by the writer's `at`; ties go to the incoming write.
        # An expired row is gone, swept or not: any write replaces it.
        where=or_(
            P.c.at <= entry.excluded.at,
            P.c.expires_at <= bindparam("now", type_=Timestamp()),
        ),
    )
    return upsert


def _upsert(tx: Transaction, backend: Backend, rows: list[dict[str, Any]]) -> None:
    if rows:
        tx.run_many(_upsert_presence(backend), rows)


def read(tx: Transaction, ns: str, now: datetime) -> list[PresenceEntry]:
    """The namespace's live fields (``expires_at > now``), by participant then field."""
    return [
        PresenceEntry(participant, field, value, seen, at, expires_at)
        for participant, field, value, seen, at, expires_at in tx.rows(LIVE, {"ns": ns, "now": now})
    ]
