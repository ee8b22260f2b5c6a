"""Events that wait for a signal: a2_events.wake_on and its partial index.

Revision ID: 0004_wake_on
Revises: 0003_retired_attempts
Create Date: 2026-12-07

A waiting event names the signal it waits for in ``wake_on``; a signal's own
event (settled when appended) names itself there, so that an event appended
to wait for a signal that already came is woken at once. The column goes at
the end of the table, nullable: the seed's store, which names every column
it reads and writes, never sees it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from a2sql.backends.column_types import KeyText

revision: str = "0004_wake_on"
down_revision: str | None = "0003_retired_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than taken from a2sql.sql.schema, as in the baseline.
WAKES = "wake_on is not null"


def upgrade() -> None:
    op.add_column("a2_events", sa.Column("wake_on", KeyText, nullable=True))
    op.create_index(
        "a2_events_waiting",
        "a2_events",
        ["session_id", "wake_on", "idx"],
        sqlite_where=sa.text(WAKES),
        postgresql_where=sa.text(WAKES),
    )


def downgrade() -> None:
    op.drop_index("a2_events_waiting", table_name="a2_events")
    op.drop_column("a2_events", "wake_on")
