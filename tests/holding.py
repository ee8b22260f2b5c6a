"""Helpers for tests that hold a lock against a call (with the ``holder`` fixture,
tests/conftest.py, or a transaction of their own) and watch the event loop meanwhile:
waits until a call is blocked on the lock, and a ticker that counts the loop's turns."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import Connection, create_engine, text

# Bound on every wait, so that a broken cancellation fails instead of hanging.
DEADLINE_S = 5.0


async def wait_until_blocked_by(holder: Connection) -> list[int]:
    """Until a backend waits on a lock ``holder`` holds; the process ids of those that do."""
    pid = holder.execute(text("select pg_backend_pid()")).scalar_one()
    query = text(
        "select coalesce(array_agg(pid order by pid), '{}') from pg_stat_activity"
        " where cast(:pid as int) = any(pg_blocking_pids(pid))"
    )
    # Another connection; each look in a transaction of its own (pg_stat_activity
    # is a snapshot per transaction).
    engine = create_engine(holder.engine.url)
    try:
        with engine.connect() as probe:
            for _ in range(int(DEADLINE_S / 0.02)):
                blocked: list[int] = probe.execute(query, {"pid": pid}).scalar_one()
                if blocked:
                    return blocked
                probe.rollback()
                await asyncio.sleep(0.02)
    finally:
        engine.dispose()
    raise AssertionError("the call never blocked on the held lock")


# The backends of this database waiting for a lock of a type (a session's lock:
# advisory): pg_locks shows the whole cluster's, where the other test processes, each
# on a database of its own, may be waiting for locks of their own meanwhile (and a
# transaction id's lock names no database, so the backend's is looked up).
_AWAITING = text(
    "select l.pid from pg_locks l join pg_stat_activity a on a.pid = l.pid"
    " where l.locktype = :type and not l.granted and a.datname = current_database()"
)


def _awaiting(probe: Connection, locktype: str) -> list[int]:
    """Each look in a transaction of its own (pg_locks is a snapshot per transaction)."""
    pids = list(probe.execute(_AWAITING, {"type": locktype}).scalars())
    probe.rollback()
    return pids


def wait_until_a_lock_is_awaited(url: str, locktype: str = "advisory") -> None:
    """Until a backend waits for a lock of ``locktype`` (a session's lock: advisory)."""
    engine = create_engine(url)
    try:
        with engine.connect() as probe:
            for _ in range(500):
                if _awaiting(probe, locktype):
                    return
                time.sleep(0.01)
    finally:
        engine.dispose()
    raise AssertionError("the call never waited for the session's lock")


async def a_lock_awaited(url: str, locktype: str = "advisory") -> list[int]:
    """``wait_until_a_lock_is_awaited`` that lets the event loop run meanwhile; the
    process ids of the backends waiting."""
    engine = create_engine(url)
    try:
        with engine.connect() as probe:
            for _ in range(int(DEADLINE_S / 0.02)):
                waiting = _awaiting(probe, locktype)
                if waiting:
                    return waiting
                await asyncio.sleep(0.02)
    finally:
        engine.dispose()
    raise AssertionError("the call never waited for the session's lock")


class Ticks:
    """How many times a ticker task woke, every 10 ms, while the loop ran it."""

    count = 0


@asynccontextmanager
async def ticking() -> AsyncIterator[Ticks]:
    """A task ticking every 10 ms for the length of the block: a loop frozen meanwhile
    shows as too few ticks."""
    ticks = Ticks()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.01)
            ticks.count += 1

    task = asyncio.create_task(ticker())
    try:
        yield ticks
    finally:
        task.cancel()
