"""SQLite: one writer at a time, the database a local file (or the process's memory)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Select, bindparam, func, literal_column, select, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import ColumnElement

from a2sql.backends import sqlite_begin as begin
from a2sql.backends.base import NOT_AUTOCOMMIT, UNHELD, Backend, Capabilities, Storage
from a2sql.backends.registry import register
from a2sql.backends.sqlite_file import file_of, make_ready
from a2sql.core.errors import A2Error, invalid
from a2sql.sql.executor import Transaction
from a2sql.sql.schema import events

# No cross-process wake-up on SQLite: streams poll, briefly.
POLL_INTERVAL_S = 0.1


class SqliteBackend(Backend):
    name = "sqlite"
    title = "SQLite"
    capabilities = Capabilities(
        listen_notify=False,
        advisory_locks=False,
        update_returning=True,
        partial_indexes=True,
        one_statement_writes=False,
        json_validation=False,
        one_writer=True,
        network_connections=False,
        cancellable_statements=False,
    )
    drivers = ("pysqlite", "aiosqlite")
    async_driver = "aiosqlite"
    insert = staticmethod(sqlite.insert)
    direct_driver = ("pysqlite", "qmark")
    direct_begins_itself = True
    alters_in_place = False
    adopts_seed_databases = True
    stream_poll_interval = POLL_INTERVAL_S
    # The development database: a store brings it up to date as it opens it.
    upgrades_on_open = True

    # --- URLs and engines ---------------------------------------------------------

    def resolved(self, url: URL) -> URL:
        # sqlite+aiosqlite names the same file: a Store opens it with sqlite3.
        if url.drivername == f"sqlite+{self.async_driver}":
            url = url.set(drivername="sqlite")
        return super().resolved(url)

    def is_memory(self, url: URL) -> bool:
        return url.database in (None, "", ":memory:")

    def database_file(self, url: URL) -> Path | None:
        return file_of(url)

    def engine_arguments(self, url: URL) -> dict[str, Any]:
        if self.is_memory(url):
            # One connection for the engine's lifetime: every operation sees the
            # same in-memory database.
            return {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        path = file_of(url)
        assert path is not None
        make_ready(path, create=True)
        return {"connect_args": {"timeout": begin.DEFAULT_LOCK_TIMEOUT_MS / 1000}}

    def async_url(self, url: URL) -> URL:
        return url.set(drivername=f"sqlite+{self.async_driver}")

    def database_key(self, url: URL, engine_id: int) -> str:
        if self.is_memory(url):
            return f"sqlite-memory:{engine_id}"
        # The same file, whatever the driver (Store and AsyncStore) or spelling.
        return f"sqlite:{os.path.realpath(str(url.database))}"

    def unopenable(self, url: URL, error: BaseException) -> A2Error | None:
        if "unable to open database file" in str(error):
            return invalid("url", f"cannot open the SQLite database {url.database}: check the path")
        return None

    # --- transactions ---------------------------------------------------------------

    def begin_own(self, connection: Connection, *, read_only: bool, busy_timeout_ms: int) -> None:
        begin.begin_own(connection, read_only=read_only, busy_timeout_ms=busy_timeout_ms)

    def prepare_driver_connection(
        self, info: dict[Any, Any], scalar: Callable[[str], Any], *, busy_timeout_ms: int
    ) -> None:
        begin.prepare(info, scalar, in_transaction=False, busy_timeout_ms=busy_timeout_ms)

    def hold_write_lock(self, connection: Connection, *, busy_timeout_ms: int) -> None:
        begin.hold_write_lock(connection, busy_timeout_ms=busy_timeout_ms)

    def unheld(self, connection: Connection) -> str:
        # pysqlite's autocommit setting is also SQLAlchemy's recipe for a
        # transaction its ``begin`` event opens itself: there a transaction is open
        # at the driver, unless an error of the caller's rolled it back (``INSERT OR
        # ROLLBACK``).
        if not super().unheld(connection) or begin.in_driver_transaction(connection):
            return ""
        return (
            "has no transaction open in the SQLite driver (AUTOCOMMIT mode, or an error "
            f"rolled it back), {UNHELD}: roll back, and begin the transaction again "
            f"{NOT_AUTOCOMMIT}"
        )

    def lock_for_migration(self, connection: Connection) -> None:
        # The database's write lock (BEGIN IMMEDIATE).
        begin.begin_own(connection, read_only=False, busy_timeout_ms=begin.DEFAULT_LOCK_TIMEOUT_MS)

    # --- statements -----------------------------------------------------------------

    def lock_session(
        self, tx: Transaction, session_id: str, *, announce: bool, lock_timeout_ms: int | None
    ) -> None:
        # BEGIN IMMEDIATE (a2sql.backends.sqlite_begin) already holds the database's write lock,
        # waiting for it up to the busy timeout, and other processes' streams poll.
        return None

    def try_lock_session(self, tx: Transaction, session_id: str) -> bool:
        # The write lock, held since BEGIN IMMEDIATE, covers every session.
        return True

    def latest_timestamp(self, *columns: ColumnElement[Any]) -> ColumnElement[Any]:
        # SQLite's scalar max() is NULL if any argument is: an unset time counts
        # as the first (never unset), not as 0, which is 1970 and later than
        # any time before it.
        first, *rest = columns
        return func.max(first, *(func.coalesce(c, first) for c in rest))

    def plus_millis(
        self, time: ColumnElement[Any], millis: ColumnElement[Any]
    ) -> ColumnElement[Any]:
        # Times are integer epoch milliseconds.
        return time + millis

    def under_prefix_by_age(
        self, statement: Select[Any], key: ColumnElement[str], lower: bool, upper: bool
    ) -> Select[Any]:
        # A range would make the planner seek it in a2_events_claim_expiry and
        # sort everything claimable under the prefix, however much; the same
        # test as a comparison of the first characters keeps it walking the age
        # order, stopping at the first few.
        if lower:
            return statement.where(
                func.substr(key, 1, bindparam("prefix_chars")) == bindparam("lower")
            )
        return super().under_prefix_by_age(statement, key, lower, upper)

    def storage(self, tx: Transaction) -> Storage:
        # a2_events has rowids (the seed's table, not WITHOUT ROWID): a new row
        # takes the largest plus one, so the largest is the rows ever inserted
        # but for those deleted at the end; read from the b-tree's last entry.
        [appended, pages, page_size] = tx.first(_STORAGE, {}) or (None, 0, 0)
        return Storage(
            appended_total=None if appended is None else int(appended),
            table_bytes={"database": int(pages) * int(page_size)},
        )


_STORAGE = select(
    select(func.max(literal_column("rowid"))).select_from(events).scalar_subquery(),
    select(literal_column("page_count")).select_from(text("pragma_page_count()")).scalar_subquery(),
    select(literal_column("page_size")).select_from(text("pragma_page_size()")).scalar_subquery(),
)

SQLITE = register(SqliteBackend())
