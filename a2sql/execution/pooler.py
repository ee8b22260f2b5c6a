"""Whether statements are prepared on the PostgreSQL server: on a direct connection
yes, behind a connection pooler never, decided once as each connection opens.

psycopg prepares a statement on the server once it has run five times on a
connection (its ``prepare_threshold``): the server then skips parsing and
planning it, about a quarter of a cycle here (BENCHMARKS.md). A prepared
statement lives on one server connection, under a name psycopg chose. Behind
a transaction pooler (PgBouncer's ``pool_mode = transaction``) each
transaction may reach another server connection, where that name is missing,
taken, or another client's statement, run with this client's parameters.

a2sql tells the two apart as a connection opens. On a direct connection the
server process id announced at connection time (the key a cancel request is
sent with) is the server process's own, ``pg_backend_pid()``; a pooler
answers the connection itself and announces a key of its own. On an engine
a2sql creates, a connection behind a pooler never prepares, from the moment
it opens, whoever runs a statement on it: a2sql, or the application on the
store's connection (``store.begin()``, a transactional handler's own writes).
On an engine the application passes in, a2sql changes nothing: behind a
pooler it is created with ``connect_args={"prepare_threshold": None}``, as
the docs say, and a2sql's errors name that setting when a prepared statement
went missing (a2sql.core.errors.POOLER_HINT).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.pool import ConnectionPoolEntry

# Key in the pool's ``info`` of a driver connection: whether it goes through a pooler.
_BEHIND_POOLER = "a2sql_behind_pooler"
# And whether a2sql's pipelines may go without BEGIN and COMMIT on it.
_IMPLICIT = "a2sql_implicit_transactions"


def answered_by_pooler(backend_pid: int, driver: Any) -> bool:
    """Whether the server process id a connection's server gave (``pg_backend_pid()``) is
    not the one psycopg's ``driver`` was announced at connection time: a pooler's."""
    return bool(backend_pid != driver.info.backend_pid)


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


def known_behind_pooler(info: dict[Any, Any]) -> bool:
    """Whether the connection whose pool dictionary is ``info`` was found to go through a
    pooler (``behind_pooler`` asked, as a connection of a2sql's engines opens and at a
    store's first transaction on any connection)."""
    return bool(info.get(_BEHIND_POOLER))


def implicit_at(default_isolation: str) -> bool:
    """Whether a pipeline's statements may go without BEGIN and COMMIT at the session's
    ``default_transaction_isolation``: their implicit transaction must be READ COMMITTED."""
    return default_isolation == "read committed"


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


def decide_at_connect(engine: Engine) -> None:
    """On an engine a2sql creates (psycopg's): each connection asks once, as it opens,
    whether it goes through a pooler, and there never prepares a statement, whoever
    runs it.

    A pool event, which leaves the engine unobserved (a2sql.execution.raw.observed)."""

    def connect(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        driver: Any = record.driver_connection
        if getattr(driver, "prepare_threshold", None) is None:
            return  # a driver that never prepares (SQLite), or told not to

        def scalar(sql: str) -> Any:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute(sql)
                return cursor.fetchone()[0]
            finally:
                cursor.close()
                dbapi_connection.rollback()  # the SELECT began a transaction

        if behind_pooler(record.info, driver, scalar):
            driver.prepare_threshold = None  # for good: the connection is a2sql's engine's

    event.listen(engine, "connect", connect)
