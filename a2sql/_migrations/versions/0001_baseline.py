"""Baseline: the seed's tables and indexes (a2_events, a2_snapshots, a2_presence).

Revision ID: 0001_baseline
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from a2sql.backends.column_types import BigInt, Flag, JSONText, KeyText, Timestamp

revision: str = "0001_baseline"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than taken from a2sql.sql.schema: a revision must keep
# creating the schema as it was, whatever the metadata becomes later.
UNPROCESSED = "processed_at is null"
DISPATCHABLE_SQLITE = "lane_ready = 1 and processed_at is null and failed_at is null"
DISPATCHABLE_POSTGRES = "lane_ready and processed_at is null and failed_at is null"


def _partial(where_sqlite: str, where_postgres: str) -> dict[str, sa.TextClause]:
    return {
        "sqlite_where": sa.text(where_sqlite),
        "postgresql_where": sa.text(where_postgres),
    }


def upgrade() -> None:
    op.create_table(
        "a2_events",
        sa.Column("session_id", KeyText, nullable=False),
        sa.Column("idx", BigInt, nullable=False),
        sa.Column("event_type", KeyText, nullable=False),
        sa.Column("payload", JSONText, nullable=False),
        sa.Column("event_id", KeyText, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("cause", sa.Text),
        sa.Column("lane", KeyText),
        sa.Column("lane_ready", Flag, nullable=False, server_default=sa.false()),
        sa.Column("processed_at", Timestamp),
        sa.Column("processed_by_attempt", BigInt),
        sa.Column("returned_event_ids", sa.Text),
        sa.Column("first_claimed_at", Timestamp),
        sa.Column("last_claimed_at", Timestamp),
        sa.Column("attempt_count", BigInt, nullable=False, server_default=sa.text("0")),
        sa.Column("failure_count", BigInt, nullable=False, server_default=sa.text("0")),
        sa.Column("last_failed_at", Timestamp),
        sa.Column("last_failed_attempt", BigInt),
        sa.Column("last_error", sa.Text),
        sa.Column("failed_at", Timestamp),
        sa.Column("claim_holder", KeyText),
        sa.Column("claim_expires_at", Timestamp),
        sa.PrimaryKeyConstraint("session_id", "idx"),
        sqlite_strict=True,
    )
    op.create_index("a2_events_event_id", "a2_events", ["event_id"], unique=True)
    op.create_index(
        "a2_events_unprocessed",
        "a2_events",
        ["session_id", "idx"],
        **_partial(UNPROCESSED, UNPROCESSED),
    )
    op.create_index(
        "a2_events_lane_pending",
        "a2_events",
        ["session_id", "lane", "idx"],
        **_partial(UNPROCESSED, UNPROCESSED),
    )
    op.create_index(
        "a2_events_dispatch_ready",
        "a2_events",
        ["session_id", "idx"],
        **_partial(DISPATCHABLE_SQLITE, DISPATCHABLE_POSTGRES),
    )
    op.create_index(
        "a2_events_claim_expiry",
        "a2_events",
        ["session_id", "claim_expires_at"],
        **_partial(DISPATCHABLE_SQLITE, DISPATCHABLE_POSTGRES),
    )
    op.create_table(
        "a2_snapshots",
        sa.Column("session_id", KeyText, nullable=False),
        sa.Column("reducer_name", KeyText, nullable=False),
        sa.Column("up_to_index", BigInt, nullable=False),
        sa.Column("state", JSONText, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "reducer_name"),
        sqlite_strict=True,
    )
    op.create_table(
        "a2_presence",
        sa.Column("ns", KeyText, nullable=False),
        sa.Column("participant", KeyText, nullable=False),
        sa.Column("field", KeyText, nullable=False),
        sa.Column("value", JSONText, nullable=False),
        sa.Column("seen", BigInt, nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("ns", "participant", "field"),
        sqlite_strict=True,
    )


def downgrade() -> None:
    op.drop_table("a2_presence")
    op.drop_table("a2_snapshots")
    op.drop_index("a2_events_claim_expiry", table_name="a2_events")
    op.drop_index("a2_events_dispatch_ready", table_name="a2_events")
    op.drop_index("a2_events_lane_pending", table_name="a2_events")
    op.drop_index("a2_events_unprocessed", table_name="a2_events")
    op.drop_index("a2_events_event_id", table_name="a2_events")
    op.drop_table("a2_events")
