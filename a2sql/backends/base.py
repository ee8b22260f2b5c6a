"""The seam between a2sql and the engines it runs on: a ``Backend`` per engine.

A backend holds everything a2sql does differently per engine: the statements
whose SQL differs (session locks, upserts, the latest of several times), the
steps around a transaction (how it begins, at which isolation level), what a
URL of the engine means (its drivers, its file, its engine's arguments) and
what the engine can do (``Capabilities``). The rest of a2sql asks the backend
of its engine (``backend_of``) and never compares an engine's name.

Backends are registered by SQLAlchemy's dialect name
(a2sql.backends.registry): an engine with none is refused up front
(``INVALID_ARGUMENT`` naming the supported engines), never run as if it were
another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    URL,
    BindParameter,
    Connection,
    Select,
    Table,
    bindparam,
)
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.compiler import SQLCompiler

from a2sql.core.errors import A2Error, invalid

if TYPE_CHECKING:
    from a2sql.core.arguments import Lease
    from a2sql.core.records import AppendResult, ClaimResult, CompleteResult, FailResult
    from a2sql.plans.kinds import Context, OneStatement
    from a2sql.sql.executor import Transaction
    from a2sql.sql.queries.events import ValidEvent


@dataclass(frozen=True, slots=True)
class Storage:
    """What the engine says of a2sql's tables (``Overview.appended_total`` and
    ``table_bytes``)."""

    appended_total: int | None
    table_bytes: dict[str, int]


# What a2sql's writes on a connection whose driver commits each statement would not do.
UNHELD = "so a2sql's writes would not commit or roll back with yours"
NOT_AUTOCOMMIT = 'without isolation_level="AUTOCOMMIT" (store.begin())'


def _driver_autocommits(connection: Connection) -> bool:
    dbapi_connection = connection.connection.dbapi_connection
    if dbapi_connection is None:
        return False
    try:
        return bool(connection.dialect.detect_autocommit_setting(dbapi_connection))
    except NotImplementedError:
        return False


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine can do that a2sql's statements and ways of running them rely on."""

    # LISTEN/NOTIFY: a commit wakes other processes' streams of its session.
    listen_notify: bool
    # A lock per session (advisory locks); without, writers take the database's one lock.
    advisory_locks: bool
    # ``UPDATE … RETURNING`` and ``INSERT … RETURNING``.
    update_returning: bool
    # Indexes over the rows a ``WHERE`` selects.
    partial_indexes: bool
    # The hot writes' common case in one statement sent with its lock
    # (a2sql.backends.postgresql.one_statement):
    # where a round trip to a server costs more than the statement.
    one_statement_writes: bool
    # The server checks that stored JSON is JSON (``jsonb``).
    json_validation: bool
    # One writer at a time for the whole database: a write is quick and local,
    # so an ``AsyncStore`` runs it on the event loop's thread.
    one_writer: bool
    # Connections go over a network: opening one takes round trips, and a
    # connect cancelled midway must still be closed once open.
    network_connections: bool
    # A statement running on the asyncio driver can be cancelled midway.
    cancellable_statements: bool


class Backend:
    """Everything a2sql does differently per engine, and the only place that knows which
    engine it runs on. Subclasses fill in the statements and the connection steps."""

    # SQLAlchemy's name for the engine (``Engine.dialect.name``): the registry's key.
    name: ClassVar[str]
    # What a person calls it, in messages.
    title: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    # The drivers a2sql runs the engine on (SQLAlchemy's names), the first a
    # URL that names none means; and the one an ``AsyncStore`` opens it with.
    drivers: ClassVar[tuple[str, ...]]
    async_driver: ClassVar[str]
    # The driver a2sql runs statements on directly, past SQLAlchemy's
    # ``Connection`` (a2sql.execution.raw), and the paramstyle it builds for.
    direct_driver: ClassVar[tuple[str, str] | None] = None
    # Whether the direct path opens and ends its transactions with statements of
    # its own (``BEGIN``, ``COMMIT``: SQLite), rather than the driver in
    # autocommit mode with a2sql's pipelines (a2sql.execution.raw).
    direct_begins_itself: ClassVar[bool] = False
    # Whether ``ALTER TABLE`` changes a table in place; where not (SQLite),
    # migrations copy the table and move it (Alembic's batch mode).
    alters_in_place: ClassVar[bool] = True
    # Whether a database written by the seed's store (SQLite files) may be
    # adopted: stamped as the baseline revision when its tables match it.
    adopts_seed_databases: ClassVar[bool] = False
    # What to install for the engine's driver, said when it is missing.
    install_hint: ClassVar[str] = ""
    # How long a stream waits between reads when nothing wakes it.
    stream_poll_interval: ClassVar[float]
    # Whether a store opened without ``migrate=`` brings the schema up to date
    # itself (a development database), or only checks it.
    upgrades_on_open: ClassVar[bool] = False
    # The isolation level of a2sql's own transactions, where the engine's
    # default may be another.
    own_isolation_level: ClassVar[str | None] = None
    # The dialect's ``insert(table)``, whose INSERT can say what to do on a conflict
    # (``on_conflict_do_update``): a2sql's upserts (a2sql.sql.queries) are built on it.
    insert: Callable[[Table], Any]

    def lock_session(
        self, tx: Transaction, session_id: str, *, announce: bool, lock_timeout_ms: int | None
    ) -> None:
        """First statement of every mutating transaction on a session.

        ``announce``: the transaction may add events, so other processes'
        streams of the session are to be woken when it commits.
        ``lock_timeout_ms``: how long a transaction of a2sql's own waits for
        the lock (and may then sit idle); ``None`` in the caller's
        transaction, whose own settings apply.
        """

    def own_lock(
        self, session_id: str, *, announce: bool, lock_timeout_ms: int
    ) -> tuple[Select[Any], dict[str, Any]]:
        """``lock_session``'s statement in a transaction of a2sql's own, and its
        parameters (PostgreSQL: sent ahead of a fused statement,
        a2sql.backends.postgresql.one_statement)."""
        raise NotImplementedError

    def announcement(self, session_id: str) -> tuple[Select[Any], dict[str, Any]]:
        """A statement that wakes other processes' streams of the session, in a
        transaction of its own sent right after one that committed with its lock
        taken without ``announce`` (PostgreSQL, a2sql.execution.running)."""
        raise NotImplementedError

    def try_lock_session(self, tx: Transaction, session_id: str) -> bool:
        """Lock the session for writing if no other transaction holds it; never wait."""
        raise NotImplementedError

    def check_isolation(self, tx: Transaction) -> None:
        """Refuse the caller's transaction if its isolation level breaks a2sql's writes."""

    def latest_timestamp(self, *columns: ColumnElement[Any]) -> ColumnElement[Any]:
        """The latest of ``columns`` that are set; the first is never NULL."""
        raise NotImplementedError

    def plus_millis(
        self, time: ColumnElement[Any], millis: ColumnElement[Any]
    ) -> ColumnElement[Any]:
        """``time`` plus ``millis`` milliseconds; NULL if either is."""
        raise NotImplementedError

    def opaque_to_planner(self, value: BindParameter[Any]) -> ColumnElement[Any]:
        """``value``, hidden from the planner's estimates where it has any."""
        return value

    # --- URLs and engines ---------------------------------------------------------

    def resolved(self, url: URL) -> URL:
        """``url`` as a2sql opens it, its driver named; ``INVALID_ARGUMENT`` for a driver
        a2sql does not run the engine on."""
        driver = url.get_driver_name()
        if driver not in self.drivers:
            supported = " or ".join(f"{self.name}+{name}" for name in self.drivers)
            raise invalid(
                "url",
                f"a2sql runs {self.name} on {supported}, not {url.drivername!r}"
                + self.install_hint,
            )
        return url

    def is_memory(self, url: URL) -> bool:
        """Whether ``url`` names a database that lives in the process (one connection)."""
        return False

    def database_file(self, url: URL) -> Path | None:
        """The file ``url`` names, for an engine whose database is a file; else ``None``."""
        return None

    def engine_arguments(self, url: URL) -> dict[str, Any]:
        """Keyword arguments for ``create_engine`` / ``create_async_engine`` of ``url``."""
        if self.own_isolation_level is None:
            return {}
        return {"isolation_level": self.own_isolation_level}

    def async_url(self, url: URL) -> URL:
        """``url`` with the driver an ``AsyncStore`` opens it with."""
        return url.set(drivername=f"{self.name}+{self.async_driver}")

    def database_key(self, url: URL, engine_id: int) -> str:
        """What identifies the database of an engine on ``url`` within this process
        (``engine_id``: the engine's ``id``, for a database only it can reach)."""
        return url.set(drivername=self.name).render_as_string(hide_password=True)

    def unopenable(self, url: URL, error: BaseException) -> A2Error | None:
        """The URL's fault, if the first connection's failure (``error``) was one."""
        return None

    # --- transactions ---------------------------------------------------------------

    def own_connection(self, connection: Connection) -> Connection:
        """``connection``, set to run a2sql's own transactions, before ``begin()``.

        SQLAlchemy puts the connection's level back when it returns to the pool,
        so an application's engine keeps its own."""
        if self.own_isolation_level is not None:
            connection.execution_options(isolation_level=self.own_isolation_level)
        return connection

    def begin_own(self, connection: Connection, *, read_only: bool, busy_timeout_ms: int) -> None:
        """Open the driver's transaction of a transaction a2sql runs itself: called inside
        ``connection.begin()``, before the first statement."""

    def prepare_driver_connection(
        self, info: dict[Any, Any], scalar: Callable[[str], Any], *, busy_timeout_ms: int
    ) -> None:
        """Settings a driver connection of the direct path needs before a transaction
        (``info``: the pool's dictionary of that connection; ``scalar`` runs SQL text)."""

    def hold_write_lock(self, connection: Connection, *, busy_timeout_ms: int) -> None:
        """Before a write of a2sql's in the caller's transaction on ``connection``, where
        the engine's write lock must be held before a2sql reads."""

    def unheld(self, connection: Connection) -> str:
        """Why nothing would hold a2sql's statements in the caller's transaction on
        ``connection`` (the driver commits each statement on its own); ``""`` when
        something would."""
        if not _driver_autocommits(connection):
            return ""
        return f"is in AUTOCOMMIT mode, {UNHELD}: begin the transaction {NOT_AUTOCOMMIT}"

    def lock_for_migration(self, connection: Connection) -> None:
        """Serialize concurrent migrations: the first statement of a migrating transaction."""
        raise NotImplementedError

    # --- operations a backend may send as one statement ------------------------------
    # Each gives the operation's common case as one statement sent after the
    # session's lock (a2sql.plans.kinds.OneStatement), built when it is sent, or
    # ``None`` where the backend runs the operation's shared statements only.

    def one_statement_append(
        self, ctx: Context, session_id: str, batch: Sequence[ValidEvent]
    ) -> Callable[[], OneStatement[AppendResult]] | None:
        """``append``'s."""
        return None

    def one_statement_claim(
        self,
        ctx: Context,
        session_id: str,
        *,
        holder: str,
        lease: Lease,
        exclude_indexes: Sequence[int],
        limit: int | None,
    ) -> Callable[[], OneStatement[ClaimResult]] | None:
        """``claim_available``'s."""
        return None

    def one_statement_complete(
        self, ctx: Context, session_id: str, index: int, attempt: int, batch: Sequence[ValidEvent]
    ) -> Callable[[], OneStatement[CompleteResult]] | None:
        """``complete_attempt``'s."""
        return None

    def one_statement_fail(
        self,
        ctx: Context,
        session_id: str,
        index: int,
        attempt: int,
        *,
        error: str,
        max_failures: int,
        retry_after_ms: int | None,
    ) -> Callable[[], OneStatement[FailResult]] | None:
        """``fail_attempt``'s."""
        return None

    # --- statements -----------------------------------------------------------------

    def read_once(self, element: Any, compiler: SQLCompiler, **kw: Any) -> str:
        """``column IN (rows)`` of a2sql.sql.queries.claims.ReadOnce, as this engine reads
        it once."""
        return compiler.process(element.column.in_(element.rows), **kw)

    def under_prefix_by_age(
        self, statement: Select[Any], key: ColumnElement[str], lower: bool, upper: bool
    ) -> Select[Any]:
        """``statement`` kept to keys from ``:lower`` (inclusive) to ``:upper`` (exclusive),
        each bound where given, for a read that walks claimable events in age order
        (a2sql.sql.queries.dispatch): a range, checked on the index's entries as it walks."""
        if lower:
            statement = statement.where(key >= bindparam("lower"))
        if upper:
            statement = statement.where(key < bindparam("upper"))
        return statement

    def storage(self, tx: Transaction) -> Storage:
        """The engine's running count of rows inserted into a2_events and the size of
        a2sql's tables, from its own bookkeeping (no scan)."""
        return Storage(appended_total=None, table_bytes={})
