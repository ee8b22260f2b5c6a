"""The one declaration of a2sql's tables and indexes, for every engine.

On SQLite the tables are exactly those of the TypeScript seed store a2sql was
drawn from: same names, same column order, strict tables, so that a database
file written by either store can be opened by the other. a2sql adds indexes of
its own (claim_next's, revisions 0002 and 0004), which the seed neither needs
nor minds, and two of the seed's indexes hold fewer rows (revision 0005), which
its reads still find; one table (``a2_retired_attempts``, revision 0003) that the seed's
store does not read: a session it deletes leaves no row there; and a nullable
column at the end of ``a2_events`` (``wake_on``, revision 0004): the seed names
the columns it writes and reads, and a waiting event keeps a claim expiry
ahead, so the seed's claim query leaves it alone.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, MetaData, Table, Text, false, text

from a2sql.backends.column_types import BigInt, Flag, JSONText, KeyText, Timestamp

metadata = MetaData()

# The predicates of the partial indexes. Queries that want these indexes
# must spell the same conditions with literals, never bound parameters, or
# the planner cannot prove the index applies.
UNPROCESSED = "processed_at is null"
DISPATCHABLE_SQLITE = "lane_ready = 1 and processed_at is null and failed_at is null"
DISPATCHABLE_POSTGRES = "lane_ready and processed_at is null and failed_at is null"

events = Table(
    "a2_events",
    metadata,
    Column("session_id", KeyText, nullable=False, primary_key=True),
    Column("idx", BigInt, nullable=False, primary_key=True),
    Column("event_type", KeyText, nullable=False),
    Column("payload", JSONText, nullable=False),
    Column("event_id", KeyText, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("cause", Text),
    Column("lane", KeyText),
    Column("lane_ready", Flag, nullable=False, server_default=false()),
    Column("processed_at", Timestamp),
    Column("processed_by_attempt", BigInt),
    Column("returned_event_ids", Text),
    Column("first_claimed_at", Timestamp),
    Column("last_claimed_at", Timestamp),
    Column("attempt_count", BigInt, nullable=False, server_default=text("0")),
    Column("failure_count", BigInt, nullable=False, server_default=text("0")),
    Column("last_failed_at", Timestamp),
    Column("last_failed_attempt", BigInt),
    Column("last_error", Text),
    Column("failed_at", Timestamp),
    Column("claim_holder", KeyText),
    Column("claim_expires_at", Timestamp),
    # Revision 0004: the signal a waiting event waits for; on a signal's own event
    # (settled at once, never claimed), the signal's name.
    Column("wake_on", KeyText),
    sqlite_strict=True,
)

Index("a2_events_event_id", events.c.event_id, unique=True)
Index(
    "a2_events_unprocessed",
    events.c.session_id,
    events.c.idx,
    sqlite_where=text(UNPROCESSED),
    postgresql_where=text(UNPROCESSED),
)
# The seed's two indexes below held every pending event; since revision 0005
# each holds only the rows its reads look for (events in a lane; events with a
# claim expiry), so that an append writes neither (two pages fewer to commit).
LANED = "lane is not null"
HELD = "claim_expires_at is not null"
Index(
    "a2_events_lane_pending",
    events.c.session_id,
    events.c.lane,
    events.c.idx,
    sqlite_where=text(f"{UNPROCESSED} and {LANED}"),
    postgresql_where=text(f"{UNPROCESSED} and {LANED}"),
)
Index(
    "a2_events_dispatch_ready",
    events.c.session_id,
    events.c.idx,
    sqlite_where=text(DISPATCHABLE_SQLITE),
    postgresql_where=text(DISPATCHABLE_POSTGRES),
)
Index(
    "a2_events_claim_expiry",
    events.c.session_id,
    events.c.claim_expires_at,
    sqlite_where=text(f"{DISPATCHABLE_SQLITE} and {HELD}"),
    postgresql_where=text(f"{DISPATCHABLE_POSTGRES} and {HELD}"),
)
# claim_next's order across sessions, the oldest claimable events first
# (revision 0004): the dispatchable events never held, all free, by age; and
# those with a claim expiry (claimed, retrying later, scheduled, waiting), by
# that expiry, of which a read takes the ones due now and never the rest.
FREE = "claim_expires_at is null"
Index(
    "a2_events_dispatch_free",
    events.c.created_at,
    events.c.session_id,
    sqlite_where=text(f"{DISPATCHABLE_SQLITE} and {FREE}"),
    postgresql_where=text(f"{DISPATCHABLE_POSTGRES} and {FREE}"),
)
Index(
    "a2_events_dispatch_due",
    events.c.claim_expires_at,
    events.c.created_at,
    events.c.session_id,
    sqlite_where=text(f"{DISPATCHABLE_SQLITE} and {HELD}"),
    postgresql_where=text(f"{DISPATCHABLE_POSTGRES} and {HELD}"),
)

# Waiting events by the signal they wait for, and signals by name (revision 0004):
# only the few rows with ``wake_on`` set.
WAKES = "wake_on is not null"
Index(
    "a2_events_waiting",
    events.c.session_id,
    events.c.wake_on,
    events.c.idx,
    sqlite_where=text(WAKES),
    postgresql_where=text(WAKES),
)

snapshots = Table(
    "a2_snapshots",
    metadata,
    Column("session_id", KeyText, nullable=False, primary_key=True),
    Column("reducer_name", KeyText, nullable=False, primary_key=True),
    Column("up_to_index", BigInt, nullable=False),
    Column("state", JSONText, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    sqlite_strict=True,
)

presence = Table(
    "a2_presence",
    metadata,
    Column("ns", KeyText, nullable=False, primary_key=True),
    Column("participant", KeyText, nullable=False, primary_key=True),
    Column("field", KeyText, nullable=False, primary_key=True),
    Column("value", JSONText, nullable=False),
    Column("seen", BigInt, nullable=False),
    Column("at", Timestamp, nullable=False),
    Column("expires_at", Timestamp, nullable=False),
    sqlite_strict=True,
)

# A deleted session's attempt numbers (revision 0003): per session id that
# delete_session or prune deleted after a claim, the highest attempt number
# its events ever had. Events appended under that id again start their attempt
# count there, so an attempt of the deleted session, still held by a worker,
# never matches one of the new session's (its indexes start over at 1). One
# row per such session id, kept for good: any row removed would let a stale
# worker's attempt fence the new session's events again.
retired_attempts = Table(
    "a2_retired_attempts",
    metadata,
    Column("session_id", KeyText, nullable=False, primary_key=True),
    Column("last_attempt", BigInt, nullable=False),
    sqlite_strict=True,
)

TABLE_NAMES = ("a2_events", "a2_snapshots", "a2_presence", "a2_retired_attempts")
