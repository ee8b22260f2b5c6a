"""Whether a2sql's statements are prepared on the PostgreSQL server: on a direct
connection yes, behind a connection pooler never.

psycopg prepares a statement on the server once it has run five times on a
connection (its ``prepare_threshold``): the server then skips parsing and
planning it, about a quarter of a cycle here (BENCHMARKS.md). A prepared
statement lives on one server connection, under a name psycopg chose. Behind
a transaction pooler (PgBouncer's ``pool_mode = transaction``) each
transaction may reach another server connection, where that name is missing,
taken, or another client's statement, run with this client's parameters.

a2sql tells the two apart once per connection. On a direct connection the
server process id announced at connection time (the key a cancel request is
sent with) is the server process's own, ``pg_backend_pid()``; a pooler
answers the connection itself and announces a key of its own. On an engine
a2sql creates, a connection behind a pooler never prepares, from the moment
it opens (``decide_at_connect``). On an engine the application passes in,
a2sql turns preparation off for its own statements only and puts the
connection's setting back after. An engine created with
``connect_args={"prepare_threshold": None}`` never prepares at all: the
setting for an application's own engine behind a pooler, and for a pooler
that passes the server's key on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.pool import ConnectionPoolEntry

# psycopg's threshold of a connection that never prepares statements.
UNPREPARED = None

# Key in the pool's ``info`` of a driver connection: whether it goes through a pooler.
_BEHIND_POOLER = "a2sql_behind_pooler"
# And whether a2sql's pipelines may go without BEGIN and COMMIT on it.
_IMPLICIT = "a2sql_implicit_transactions"


def answered_by_pooler(backend_pid: int, driver: Any) -> bool:
    """Whether the server process id a connection's server gave (``pg_backend_pid()``) is
    not the one psycopg's ``driver`` was announced at connection time: a pooler's."""
    return bool(backend_pid != driver.info.backend_pid)


def decide_at_connect(engine: Engine) -> None:
    """On an engine a2sql creates: each connection asks once, as it opens, whether it goes
    through a pooler, and there never prepares a statement, whoever runs it: a2sql, or
    the application on the store's connection (``store.begin()``, a transactional
    handler's own writes). On an engine the application passes in, a2sql leaves the
    setting alone (and turns preparation off around its own statements only:
    ``unprepared_behind_pooler``).

    A pool event, which leaves the engine unobserved (a2sql.execution.raw.observed);
    on a driver that never prepares (SQLite) it asks nothing."""

    def connect(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        def scalar(sql: str) -> Any:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute(sql)
                return cursor.fetchone()[0]
            finally:
                cursor.close()
                dbapi_connection.rollback()  # the SELECT began a transaction

        # Never restored: the connection is the engine's, a2sql's own.
        unprepare(record.info, record.driver_connection, scalar)

    event.listen(engine, "connect", connect)


def implicit_at(default_isolation: str) -> bool:
    """Whether a pipeline's statements may go without BEGIN and COMMIT at the session's
    ``default_transaction_isolation``: their implicit transaction must be READ COMMITTED."""
    return default_isolation == "read committed"


def behind_pooler(info: dict[Any, Any], driver: Any, scalar: Callable[[str], Any]) -> bool:
    """Whether the psycopg connection ``driver`` reaches PostgreSQL through a pooler;
    asked of the server once per connection (``info``: the pool's dictionary of it),
    with ``scalar`` running SQL text and giving its first value."""
    behind = info.get(_BEHIND_POOLER)
    if behind is None:
        behind = info[_BEHIND_POOLER] = answered_by_pooler(
            scalar("SELECT pg_backend_pid()"), driver
        )
    return bool(behind)


def implicit_transactions(info: dict[Any, Any], driver: Any, scalar: Callable[[str], Any]) -> bool:
    """Whether a transaction a2sql sends whole in one pipeline may go without BEGIN and
    COMMIT on the psycopg connection ``driver``: its statements up to the pipeline's
    Sync then form one transaction, at the session's default isolation level, which
    must be READ COMMITTED. Asked once per connection, as ``behind_pooler``, and never
    behind a pooler (where a2sql keeps to what poolers are known to pass on).

    The default is a setting of the server, the database, the role or the connection's
    options, all fixed when the connection opens; an application that changes it later
    on a connection it shares with a2sql (``SET default_transaction_isolation``) should
    dispose of the engine's pool after."""
    implicit = info.get(_IMPLICIT)
    if implicit is None:
        implicit = info[_IMPLICIT] = not behind_pooler(info, driver, scalar) and implicit_at(
            scalar("SELECT current_setting('default_transaction_isolation')")
        )
    return bool(implicit)


def unprepare(info: dict[Any, Any], driver: Any, scalar: Callable[[str], Any]) -> Any:
    """Turn server-side preparation off on ``driver`` if it goes through a pooler.

    Returns the threshold to put back after a2sql's statements (``restore``),
    ``UNPREPARED`` when nothing changed: on SQLite, on a connection that never
    prepares, and on a direct one.
    """
    threshold = getattr(driver, "prepare_threshold", UNPREPARED)
    if threshold is UNPREPARED or not behind_pooler(info, driver, scalar):
        return UNPREPARED
    driver.prepare_threshold = UNPREPARED
    return threshold


def restore(driver: Any, threshold: Any) -> None:
    """Put back the threshold ``unprepare`` changed."""
    if threshold is not UNPREPARED:
        driver.prepare_threshold = threshold


@contextmanager
def unprepared_behind_pooler(connection: Connection) -> Iterator[None]:
    """``unprepare`` for a2sql's statements on ``connection``, ``restore`` after."""

    def scalar(sql: str) -> Any:
        return connection.exec_driver_sql(sql).scalar()

    driver = connection.connection.driver_connection
    threshold = unprepare(connection.connection.info, driver, scalar)
    try:
        yield
    finally:
        restore(driver, threshold)
