"""A deleted session's attempt numbers: a2_retired_attempts.

Revision ID: 0003_retired_attempts
Revises: 0002_dispatch_age
Create Date: 2026-12-06

delete_session and prune record there, per session id, the highest attempt
number the deleted session issued; events appended under the id again start
their attempt count there (a2sql.sql.schema). Sessions deleted before this
revision left no row: their attempts are not known any more.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from a2sql.backends.column_types import BigInt, KeyText

revision: str = "0003_retired_attempts"
down_revision: str | None = "0002_dispatch_age"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "a2_retired_attempts",
        sa.Column("session_id", KeyText, nullable=False),
        sa.Column("last_attempt", BigInt, nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
        sqlite_strict=True,
    )


def downgrade() -> None:
    op.drop_table("a2_retired_attempts")
