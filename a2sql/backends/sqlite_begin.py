"""How a2sql's transactions begin on SQLite: the connection's pragmas, the write lock up front.

SQLite has one writer at a time. A deferred transaction that reads and then
writes fails with "database is locked", whatever the busy timeout, when
another writer committed in between; so a2sql's writing transactions take
the write lock before their first read (``BEGIN IMMEDIATE``), and its
reading ones begin deferred, for one consistent snapshot.

This happens in a2sql's own transactions, statement by statement through
SQLAlchemy, and nowhere else: an engine the application passes in gets no
``begin`` listener and no change of the driver's isolation level, so the
application's own transactions begin as they always did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from a2sql.core.errors import invalid

log = logging.getLogger("a2sql")

# How long a2sql's own transactions wait for a lock unless create_store is
# told otherwise: on SQLite the busy timeout, long enough that a burst of
# writers from several processes queues rather than fails.
DEFAULT_LOCK_TIMEOUT_MS = 30_000
# Switching to WAL takes an exclusive lock and may answer SQLITE_BUSY without
# consulting the busy handler while several connections race it (cold starts
# of many processes on one file); the seed retries it too. The retries stop
# once the busy timeout has passed: a file another process holds under
# ``locking_mode = EXCLUSIVE`` makes every attempt wait out the whole timeout.
WAL_SWITCH_PAUSE_S = 0.005

# Key in the driver connection's ``info``: its pragmas are set.
_PREPARED = "a2sql_sqlite_prepared"

# A write that changes nothing. It takes the write lock for the transaction
# it runs in, waiting up to the busy timeout; in a transaction whose snapshot
# is already stale (it read before another writer committed) it fails at once.
TAKE_WRITE_LOCK = "DELETE FROM a2_presence WHERE 0"


def in_driver_transaction(connection: Connection) -> bool:
    """Whether the SQLite driver connection under ``connection`` has a transaction open."""
    return bool(connection.connection.driver_connection.in_transaction)  # type: ignore[union-attr]


# Runs SQL text and gives the first column of its first row.
Scalar = Callable[[str], Any]


def prepare(
    info: dict[Any, Any], scalar: Scalar, *, in_transaction: bool, busy_timeout_ms: int
) -> None:
    """The busy timeout, WAL and ``synchronous = normal``, once per driver connection
    (``info``: the pool's dictionary of that connection); the busy timeout again
    when another store on the same engine asks for another.

    WAL cannot be switched on inside a transaction: then it is tried on the
    next transaction a2sql begins itself, and a file that stays out of WAL is
    logged.
    """
    prepared = info.get(_PREPARED)
    if prepared == busy_timeout_ms:
        return
    scalar(f"pragma busy_timeout = {busy_timeout_ms}")
    if prepared is not None or in_transaction:
        if prepared is not None:
            info[_PREPARED] = busy_timeout_ms
        return
    mode = _switch_to_wal(scalar, deadline=time.monotonic() + busy_timeout_ms / 1000)
    if mode not in ("wal", "memory"):
        log.warning(
            "a2sql: the SQLite database is in journal mode %r, not WAL: readers and the "
            "writer will block each other",
            mode,
        )
    scalar("pragma synchronous = normal")
    info[_PREPARED] = busy_timeout_ms


def _switch_to_wal(scalar: Scalar, *, deadline: float) -> str:
    while True:
        try:
            return str(scalar("pragma journal_mode = wal"))
        except OperationalError as error:
            message = str(error.orig)
            busy = "locked" in message or "busy" in message
            if not busy or time.monotonic() + WAL_SWITCH_PAUSE_S >= deadline:
                raise
            time.sleep(WAL_SWITCH_PAUSE_S)


def _prepare_connection(connection: Connection, busy_timeout_ms: int) -> None:
    def scalar(sql: str) -> Any:
        result = connection.exec_driver_sql(sql)
        return result.scalar() if result.returns_rows else None

    prepare(
        connection.info,
        scalar,
        in_transaction=in_driver_transaction(connection),
        busy_timeout_ms=busy_timeout_ms,
    )


def begin_own(connection: Connection, *, read_only: bool, busy_timeout_ms: int) -> None:
    """Open the driver's transaction of a transaction a2sql runs itself on SQLite
    (a2sql.backends.sqlite): called inside ``connection.begin()``, before the first
    statement."""
    if not read_only and in_driver_transaction(connection):
        # The engine's own ``begin`` listener opened one (SQLAlchemy's pysqlite
        # recipe), deferred most likely. It has run nothing yet: ending it and
        # beginning IMMEDIATE in its place changes nothing but the lock.
        connection.exec_driver_sql("COMMIT")
    _prepare_connection(connection, busy_timeout_ms)
    if not in_driver_transaction(connection):
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def hold_write_lock(connection: Connection, *, busy_timeout_ms: int) -> None:
    """Make the caller's transaction on ``connection`` hold the write lock before a2sql reads.

    A transaction the driver has not opened yet (pysqlite opens one only
    before the first INSERT, UPDATE or DELETE) is opened IMMEDIATE; an open
    one takes the lock now. That fails only where the caller's transaction
    began deferred and read before another writer committed: a2sql would be
    reading stale rows, and says so.
    """
    _prepare_connection(connection, busy_timeout_ms)
    if not in_driver_transaction(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")
        return
    try:
        connection.exec_driver_sql(TAKE_WRITE_LOCK)
    except OperationalError as error:
        if getattr(error.orig, "sqlite_errorname", None) != "SQLITE_BUSY_SNAPSHOT":
            raise
        raise invalid(
            "connection",
            "on SQLite the transaction must hold the write lock before a2sql reads: it began "
            "deferred and read before another writer committed. Begin it with store.begin() "
            "(or BEGIN IMMEDIATE), or let a2sql's operation come before your reads",
        ) from None
