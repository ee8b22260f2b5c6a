"""claim_next's index: dispatchable events by age, across sessions.

Revision ID: 0002_dispatch_age
Revises: 0001_baseline
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_dispatch_age"
down_revision: str | None = "0001_baseline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than taken from a2sql.sql.schema, as in the baseline.
DISPATCHABLE_SQLITE = "lane_ready = 1 and processed_at is null and failed_at is null"
DISPATCHABLE_POSTGRES = "lane_ready and processed_at is null and failed_at is null"


def upgrade() -> None:
    op.create_index(
        "a2_events_dispatch_age",
        "a2_events",
        ["created_at", "session_id", "claim_expires_at"],
        sqlite_where=sa.text(DISPATCHABLE_SQLITE),
        postgresql_where=sa.text(DISPATCHABLE_POSTGRES),
    )


def downgrade() -> None:
    op.drop_index("a2_events_dispatch_age", table_name="a2_events")
