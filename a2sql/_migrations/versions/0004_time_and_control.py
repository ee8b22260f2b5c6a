"""Time and control: events that wait for a signal, and claim_next's order past
scheduled and waiting events.

Revision ID: 0004_time_and_control
Revises: 0003_retired_attempts
Create Date: 2026-12-07

A waiting event names the signal it waits for in ``a2_events.wake_on``; a
signal's own event (settled when appended) names itself there, so that an event
appended to wait for a signal that already came is woken at once. The column
goes at the end of the table, nullable: the seed's store, which names every
column it reads and writes, never sees it. ``a2_events_waiting`` finds both.

claim_next's index of dispatchable events by age (0002) held scheduled and
waiting events too, and walking it in age order read every one of them that
was older than the first claimable event. It is split in two:
``a2_events_dispatch_free``, events never held (no claim expiry), by age, all
claimable; and ``a2_events_dispatch_due``, the others, by claim expiry, of which
a read takes those due now. Future runs and waits are never read.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from a2sql.backends.column_types import KeyText

revision: str = "0004_time_and_control"
down_revision: str | None = "0003_retired_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than taken from a2sql.sql.schema, as in the baseline.
WAKES = "wake_on is not null"
DISPATCHABLE_SQLITE = "lane_ready = 1 and processed_at is null and failed_at is null"
DISPATCHABLE_POSTGRES = "lane_ready and processed_at is null and failed_at is null"
FREE = "claim_expires_at is null"
HELD = "claim_expires_at is not null"


def upgrade() -> None:
    op.add_column("a2_events", sa.Column("wake_on", KeyText, nullable=True))
    op.create_index(
        "a2_events_waiting",
        "a2_events",
        ["session_id", "wake_on", "idx"],
        sqlite_where=sa.text(WAKES),
        postgresql_where=sa.text(WAKES),
    )
    op.create_index(
        "a2_events_dispatch_free",
        "a2_events",
        ["created_at", "session_id"],
        sqlite_where=sa.text(f"{DISPATCHABLE_SQLITE} and {FREE}"),
        postgresql_where=sa.text(f"{DISPATCHABLE_POSTGRES} and {FREE}"),
    )
    op.create_index(
        "a2_events_dispatch_due",
        "a2_events",
        ["claim_expires_at", "created_at", "session_id"],
        sqlite_where=sa.text(f"{DISPATCHABLE_SQLITE} and {HELD}"),
        postgresql_where=sa.text(f"{DISPATCHABLE_POSTGRES} and {HELD}"),
    )
    op.drop_index("a2_events_dispatch_age", table_name="a2_events")


def downgrade() -> None:
    op.create_index(
        "a2_events_dispatch_age",
        "a2_events",
        ["created_at", "session_id", "claim_expires_at"],
        sqlite_where=sa.text(DISPATCHABLE_SQLITE),
        postgresql_where=sa.text(DISPATCHABLE_POSTGRES),
    )
    op.drop_index("a2_events_dispatch_due", table_name="a2_events")
    op.drop_index("a2_events_dispatch_free", table_name="a2_events")
    op.drop_index("a2_events_waiting", table_name="a2_events")
    op.drop_column("a2_events", "wake_on")
