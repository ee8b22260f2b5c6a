"""PostgreSQL: a lock per session, LISTEN/NOTIFY, the hot writes in one statement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    URL,
    BindParameter,
    Connection,
    Float,
    Select,
    any_,
    bindparam,
    cast,
    func,
    literal_column,
    select,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.compiler import SQLCompiler

from a2sql.backends.base import Backend, Capabilities, Storage
from a2sql.backends.column_types import Timestamp
from a2sql.backends.postgresql import one_statement
from a2sql.backends.registry import register
from a2sql.core.arguments import Lease
from a2sql.core.errors import invalid
from a2sql.core.records import AppendResult, ClaimResult, CompleteResult, FailResult
from a2sql.plans.kinds import OneStatement
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.events import ValidEvent

if TYPE_CHECKING:
    from a2sql.plans.kinds import Context

# LISTEN/NOTIFY wakes streams; polling only covers a lost notification.
POLL_INTERVAL_S = 2.0
# The channel a2sql notifies on; the payload is the session id.
CHANNEL = "a2sql_events"
# The level of a2sql's own transactions, whatever the database's default:
# each statement sees what the session lock's previous holder committed (at
# a higher level the snapshot predates the lock).
ISOLATION = "READ COMMITTED"
# Key of the advisory lock (one bigint) that serializes migrations: the
# ASCII bytes of "a2sqlmig".
MIGRATION_LOCK_KEY = 0x6132_7371_6C6D_6967
_MILLISECOND: ColumnElement[Any] = literal_column("interval '1 millisecond'")
# Class id of a2sql's session locks in PostgreSQL's two-key advisory lock
# space (which never overlaps the one-bigint space applications tend to use).
SESSION_LOCK_CLASS = 0x6132


class PostgresBackend(Backend):
    name = "postgresql"
    title = "PostgreSQL"
    capabilities = Capabilities(
        listen_notify=True,
        advisory_locks=True,
        update_returning=True,
        partial_indexes=True,
        one_statement_writes=True,
        json_validation=True,
        one_writer=False,
        network_connections=True,
        cancellable_statements=True,
    )
    # psycopg 3 serves both: a URL that names no driver means it.
    drivers = ("psycopg",)
    async_driver = "psycopg"
    insert = staticmethod(postgresql.insert)
    direct_driver = ("psycopg", "pyformat")
    install_hint = " (psycopg 3: pip install 'a2sql[postgres]')"
    # LISTEN/NOTIFY wakes streams; polling only covers a lost notification.
    stream_poll_interval = POLL_INTERVAL_S
    own_isolation_level = ISOLATION
    _lock_call = func.pg_advisory_xact_lock(
        literal_column(str(SESSION_LOCK_CLASS)), func.hashtext(bindparam("sid"))
    )
    _try_lock_call = func.pg_try_advisory_xact_lock(
        literal_column(str(SESSION_LOCK_CLASS)), func.hashtext(bindparam("sid"))
    )
    # The notification rides on the lock statement: no round trip of its own.
    # NOTIFY is delivered at commit and only then, so a rolled back append
    # wakes nobody; a commit that added nothing (a replay) wakes streams for
    # a re-read that finds nothing. But a transaction that notifies commits
    # under a lock of the whole database's, held while its commit record is
    # flushed to disk: notifying writers commit one at a time. A transaction
    # a2sql sends whole therefore notifies in a transaction of its own, sent
    # with it (``announcement``): writing nothing, it holds that lock for no
    # flush.
    _notify_call = func.pg_notify(literal_column(f"'{CHANNEL}'"), bindparam("sid"))
    _announcement = select(_notify_call)
    # In a2sql's own transactions the lock statement first bounds, for this
    # transaction only (set_config's ``true``), how long it waits for a lock
    # and how long it may then sit idle: a frozen holder is cut off by the
    # server after that long, and its waiters give up after as long. Target
    # list entries are evaluated in order, so both hold before the wait.
    # Set per transaction, they survive a transaction pooler, which hands
    # each transaction a different server connection.
    _bounds = (
        func.set_config(literal_column("'lock_timeout'"), bindparam("wait"), True),
        func.set_config(
            literal_column("'idle_in_transaction_session_timeout'"), bindparam("wait"), True
        ),
    )
    # In the caller's transaction the lock statement reports its isolation
    # level, which must be READ COMMITTED: at a higher level the snapshot
    # is taken before the lock is granted, and what the lock's previous
    # holder committed stays unseen.
    _isolation = func.current_setting(literal_column("'transaction_isolation'"))
    _own_lock: ClassVar[dict[bool, Select[Any]]] = {
        False: select(*_bounds, _lock_call),
        True: select(*_bounds, _lock_call, _notify_call),
    }
    _callers_lock: ClassVar[dict[bool, Select[Any]]] = {
        False: select(_isolation, _lock_call),
        True: select(_isolation, _lock_call, _notify_call),
    }
    _try_lock = select(_try_lock_call)
    _isolation_level = select(_isolation)

    # --- URLs and transactions ------------------------------------------------------

    def resolved(self, url: URL) -> URL:
        if url.drivername == "postgresql":
            url = url.set(drivername=f"postgresql+{self.drivers[0]}")
        return super().resolved(url)

    def lock_for_migration(self, connection: Connection) -> None:
        # An advisory lock of a2sql's migrations, held to the transaction's end.
        connection.execute(text("select pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})

    # --- operations as one statement (a2sql.backends.postgresql.one_statement) ------

    def one_statement_append(
        self, ctx: Context, session_id: str, batch: Sequence[ValidEvent]
    ) -> Callable[[], OneStatement[AppendResult]] | None:
        if not one_statement.fuses(batch) or any(e.cause is not None for e in batch):
            return None
        return lambda: one_statement.append(session_id, batch, now=ctx.now(), new_id=ctx.ids)

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
        return lambda: one_statement.claim_available(
            session_id,
            holder=holder,
            now=ctx.now(),
            lease=lease,
            exclude_indexes=exclude_indexes,
            limit=limit,
        )

    def one_statement_complete(
        self, ctx: Context, session_id: str, index: int, attempt: int, batch: Sequence[ValidEvent]
    ) -> Callable[[], OneStatement[CompleteResult]] | None:
        if not one_statement.fuses(batch):
            return None
        return lambda: one_statement.complete(
            session_id, index=index, attempt=attempt, batch=batch, now=ctx.now(), new_id=ctx.ids
        )

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
        return lambda: one_statement.fail_attempt(
            session_id,
            index=index,
            attempt=attempt,
            error=error,
            max_failures=max_failures,
            now=ctx.now(),
            retry_after_ms=retry_after_ms,
        )

    # --- statements -----------------------------------------------------------------

    def read_once(self, element: Any, compiler: SQLCompiler, **kw: Any) -> str:
        # Computed once, before any row is read (an InitPlan): no join the planner
        # could run as a nested loop over a backlog (a2sql.sql.queries.claims.ReadOnce).
        array = func.array(element.rows.scalar_subquery())
        return compiler.process(element.column == any_(array), **kw)

    def lock_session(
        self, tx: Transaction, session_id: str, *, announce: bool, lock_timeout_ms: int | None
    ) -> None:
        if lock_timeout_ms is not None:
            tx.run(*self.own_lock(session_id, announce=announce, lock_timeout_ms=lock_timeout_ms))
            return
        [(level, *_)] = tx.rows(self._callers_lock[announce], {"sid": session_id})
        _check_isolation(level)

    def own_lock(
        self, session_id: str, *, announce: bool, lock_timeout_ms: int
    ) -> tuple[Select[Any], dict[str, Any]]:
        return self._own_lock[announce], {"sid": session_id, "wait": str(lock_timeout_ms)}

    def announcement(self, session_id: str) -> tuple[Select[Any], dict[str, Any]]:
        return self._announcement, {"sid": session_id}

    def try_lock_session(self, tx: Transaction, session_id: str) -> bool:
        [(locked,)] = tx.rows(self._try_lock, {"sid": session_id})
        return bool(locked)

    def check_isolation(self, tx: Transaction) -> None:
        [(level,)] = tx.rows(self._isolation_level, {})
        _check_isolation(level)

    def latest_timestamp(self, *columns: ColumnElement[Any]) -> ColumnElement[Any]:
        # greatest() skips NULLs.
        return func.greatest(*columns, type_=Timestamp())

    def plus_millis(
        self, time: ColumnElement[Any], millis: ColumnElement[Any]
    ) -> ColumnElement[Any]:
        # A whole number of milliseconds times an interval of one: exact to the
        # microsecond (an interval's resolution).
        return (time + cast(millis, Float) * _MILLISECOND).cast(Timestamp())

    def opaque_to_planner(self, value: BindParameter[Any]) -> ColumnElement[Any]:
        # A scalar subquery is a value the planner only learns when the
        # statement runs. A page of sessions under a prefix is a key range
        # (prefix, successor): estimated from the histogram, a prefix holding
        # a sliver of a bucket's key space comes out a few rows wide however
        # many it holds, and the planner then reads the whole range with a
        # bitmap scan and sorts it instead of walking the key in order and
        # stopping at the page. With one bound unknown it takes the default
        # range estimate (0.5% of the table), and walks.
        return select(value).scalar_subquery()

    def storage(self, tx: Transaction) -> Storage:
        # From the catalogue and the statistics collector, found the way the
        # search path finds a2sql's tables: sizes of each table with its indexes
        # and TOAST, and the rows ever inserted into a2_events (since the
        # statistics were last reset, and up to a second behind).
        row = tx.first(_STORAGE, {})
        assert row is not None
        *sizes, inserted = row
        return Storage(
            appended_total=None if inserted is None else int(inserted),
            table_bytes={
                name: int(size)
                for name, size in zip(_TABLES, sizes, strict=True)
                if size is not None
            },
        )


_TABLES = ("a2_events", "a2_snapshots", "a2_presence", "a2_retired_attempts")
_STORAGE = select(
    *(func.pg_total_relation_size(func.to_regclass(name)) for name in _TABLES),
    func.pg_stat_get_tuples_inserted(func.to_regclass("a2_events")),
)


def _check_isolation(level: str) -> None:
    if level != "read committed":
        raise invalid(
            "connection",
            f"its transaction runs at isolation level {level.upper()}; a2sql's writes need "
            "READ COMMITTED, where each statement sees what the session lock's previous "
            "holder committed. Begin it with store.begin(), or set "
            'execution_options(isolation_level="READ COMMITTED") on the connection',
        )


POSTGRESQL = register(PostgresBackend())
