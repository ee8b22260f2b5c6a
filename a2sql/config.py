"""Engine configuration: URL resolution, engine creation, SQLite pragmas and transactions."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from a2sql.driver import Tx
from a2sql.errors import invalid

ENV_URL = "A2SQL_DATABASE_URL"
DEFAULT_URL = "sqlite:///.a2/dev.db"

# Waiting for a SQLite write lock: long enough that a burst of writers from
# several processes queues rather than fails.
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Switching to WAL takes an exclusive lock and may answer SQLITE_BUSY without
# consulting the busy handler while several connections race it (cold starts
# of many processes on one file); the seed retries it, boundedly, too.
WAL_SWITCH_ATTEMPTS = 100
WAL_SWITCH_PAUSE_S = 0.005

# Execution option that marks a transaction as read-only: on SQLite it then
# begins DEFERRED (a consistent snapshot, no write lock) instead of IMMEDIATE.
READ_ONLY = "a2sql_read_only"

_HOOKED = "_a2sql_sqlite_hooks"


def resolve_url(url: str | URL | None) -> URL:
    """The URL a store opens: the argument, else ``A2SQL_DATABASE_URL``, else ``.a2/dev.db``.

    ``postgresql://`` and ``postgres://`` are taken to mean psycopg 3.
    """
    if url is None:
        url = os.environ.get(ENV_URL) or DEFAULT_URL
    if isinstance(url, str):
        if url.startswith("postgres://"):
            url = "postgresql://" + url[len("postgres://") :]
        try:
            parsed = make_url(url)
        except ArgumentError as error:
            raise invalid("url", f"is not a database URL: {error}") from None
    else:
        parsed = url
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise invalid("url", f"a2sql supports sqlite and postgresql, not {parsed.drivername!r}")
    return parsed


def is_sqlite_memory(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _engine_arguments(url: URL) -> dict[str, Any]:
    """Keyword arguments for ``create_engine`` / ``create_async_engine`` of ``url``."""
    if url.get_backend_name() != "sqlite":
        return {}
    if is_sqlite_memory(url):
        # One connection for the engine's lifetime: every operation sees the
        # same in-memory database.
        return {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    assert url.database is not None
    Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}}


def build_engine(url: URL) -> Engine:
    """A new engine for ``url``, configured for a2sql."""
    engine = create_engine(url, **_engine_arguments(url))
    if url.get_backend_name() == "sqlite":
        install_sqlite_hooks(engine)
    return engine


def async_url(url: URL) -> URL:
    """The asyncio driver of ``url``: aiosqlite for SQLite; psycopg 3 serves both modes."""
    if url.get_backend_name() == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    return url


def build_async_engine(url: URL) -> AsyncEngine:
    """A new asyncio engine for ``url``, configured for a2sql."""
    url = async_url(url)
    engine = create_async_engine(url, **_engine_arguments(url))
    if url.get_backend_name() == "sqlite":
        install_sqlite_hooks(engine.sync_engine)
    return engine


def _set_wal(cursor: sqlite3.Cursor) -> None:
    for attempt in range(WAL_SWITCH_ATTEMPTS):
        try:
            cursor.execute("pragma journal_mode = wal")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            if attempt == WAL_SWITCH_ATTEMPTS - 1:
                raise
            time.sleep(WAL_SWITCH_PAUSE_S)


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    # The driver must not open transactions on its own: a2sql sends BEGIN
    # itself (SQLAlchemy's documented pysqlite recipe).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: everything after it may wait on a lock.
        cursor.execute(f"pragma busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        _set_wal(cursor)
        cursor.execute("pragma synchronous = normal")
    finally:
        cursor.close()


def sqlite_begin(*, read_only: bool) -> str:
    """How a2sql opens a SQLite transaction.

    A deferred transaction that later writes can fail with "database is
    locked" whatever the busy timeout; writers take the lock up front.
    """
    return "BEGIN" if read_only else "BEGIN IMMEDIATE"


def _on_begin(connection: Any) -> None:
    read_only = bool(connection.get_execution_options().get(READ_ONLY))
    with Tx.on(connection) as tx:
        tx.execute(sqlite_begin(read_only=read_only), ())


def install_sqlite_hooks(engine: Engine) -> None:
    """Give a SQLite engine a2sql's pragmas and ``BEGIN IMMEDIATE`` writes (idempotent)."""
    if getattr(engine, _HOOKED, False):
        return
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _on_begin)
    setattr(engine, _HOOKED, True)
