"""``--skew MS``: writers whose clocks are apart, as on hosts a few milliseconds apart.

Every bench and torture process shares the machine's clock; in production
each writer's host has its own. ``SkewedClock(offset_ms)`` is the system
clock shifted by ``offset_ms`` (picklable, for the spawn start method), given
to a writer's store as ``create_store(url, clock=...)``.

The spreading rule (``offset_ms``): writer ``i`` (0, 1, 2, ...) gets 0 when
``i`` is even and ``-skew`` when it is odd. Clocks are never ahead of the
machine's: the bench's own judgements of time (a torture worker's view of
when its lease ends, say) stay sound lower bounds, and every pair of
adjacent writers is ``skew`` ms apart.

``count_backwards`` counts adjacent events of a session (by index) whose
``created_at`` goes backwards: what skew shows in the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from a2sql.core.clock import SystemClock

_SYSTEM = SystemClock()


@dataclass(frozen=True)
class SkewedClock:
    """The system clock (UTC, to the millisecond) shifted by ``offset_ms``."""

    offset_ms: float = 0.0

    def now(self) -> datetime:
        return _SYSTEM.now() + timedelta(milliseconds=self.offset_ms)


def offset_ms(worker: int, skew_ms: float | None) -> float:
    """Writer ``worker``'s clock offset: 0 for even writers, ``-skew_ms`` for odd ones."""
    if not skew_ms or worker % 2 == 0:
        return 0.0
    return -float(skew_ms)


def clock_for(worker: int, skew_ms: float | None) -> SkewedClock | None:
    """The clock of writer ``worker``'s store; None (the store's default) without skew."""
    return SkewedClock(offset_ms(worker, skew_ms)) if skew_ms else None


def backwards_sql(like: str = "%") -> str:
    """A query counting adjacent pairs going backwards in sessions ``like`` (a literal)."""
    pattern = like.replace("'", "''")
    return (
        "select count(*) from (select created_at, lag(created_at) over "
        "(partition by session_id order by idx) as previous from a2_events "
        f"where session_id like '{pattern}') pairs where created_at < previous"
    )


def count_backwards(conn: Any, like: str = "%") -> int:
    """On a driver connection (sqlite3, psycopg) or a SQLAlchemy ``Connection``."""
    sql = backwards_sql(like)
    if hasattr(conn, "exec_driver_sql"):
        from sqlalchemy import text

        row = conn.execute(text(sql)).fetchone()
    else:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0
