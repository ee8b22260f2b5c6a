"""presence.set and presence.read: per-field last-writer-wins with a TTL."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import BindParameter, bindparam, delete, select

from a2sql import execute
from a2sql.dialects import Dialect
from a2sql.execute import Transaction
from a2sql.records import PresenceEntry
from a2sql.schema import presence as P
from a2sql.types import Timestamp

NS: BindParameter[str] = bindparam("ns")
NOW = bindparam("now", type_=Timestamp())

DELETE_FIELD = delete(P).where(
    P.c.ns == NS,
    P.c.participant == bindparam("participant"),
    P.c.field == bindparam("field"),
    P.c.at <= bindparam("at", type_=Timestamp()),
)

SWEEP = delete(P).where(P.c.ns == NS, P.c.expires_at <= NOW)

LIVE = (
    select(P.c.participant, P.c.field, P.c.value, P.c.seen, P.c.at, P.c.expires_at)
    .where(P.c.ns == NS, P.c.expires_at > NOW)
    .order_by(P.c.participant, P.c.field)
)


def set_fields(
    tx: Transaction,
    dialect: Dialect,
    ns: str,
    participant: str,
    fields: Sequence[tuple[str, str | None]],
    *,
    at: datetime,
    seen: int,
    expires_at: datetime,
) -> None:
    """Upsert or delete each field; ``fields`` holds (field, encoded value or None for delete).

    Fields are written in sorted order so that concurrent writers of the same
    participant take row locks in one order and cannot deadlock.
    """
    upserts = []
    for field, value_json in sorted(fields, key=lambda item: item[0]):
        if value_json is None:
            execute.run(
                tx,
                DELETE_FIELD,
                {"ns": ns, "participant": participant, "field": field, "at": at},
            )
        else:
            upserts.append(
                {
                    "ns": ns,
                    "participant": participant,
                    "field": field,
                    "value": value_json,
                    "seen": seen,
                    "at": at,
                    "expires_at": expires_at,
                }
            )
    if upserts:
        execute.run_many(tx, dialect.upsert_presence, upserts)


def read(tx: Transaction, ns: str, now: datetime) -> list[PresenceEntry]:
    """Sweep the namespace's expired fields, then return the live ones."""
    execute.run(tx, SWEEP, {"ns": ns, "now": now})
    return [
        PresenceEntry(participant, field, value, seen, at, expires_at)
        for participant, field, value, seen, at, expires_at in execute.rows(
            tx, LIVE, {"ns": ns, "now": now}
        )
    ]
