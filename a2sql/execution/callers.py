"""What ``using(connection)`` needs of the caller's connection, and what it says when the
connection cannot serve.

A connection that cannot serve is the program's mistake, not an outage: it is
``INVALID_ARGUMENT`` (``SCHEMA_MISMATCH`` for a database without a2sql's tables),
which no worker retries, where a lost connection or a lock that timed out stays
``STORE_UNAVAILABLE``. Every check reads state the connection already holds, or
the error a statement already raised: a call on a connection that serves sends
nothing more for them.
"""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from a2sql.backends import backend_of
from a2sql.backends.base import Backend
from a2sql.core.errors import A2Error, ErrorCode, invalid

# PostgreSQL's in_failed_sql_transaction: an earlier statement of the transaction
# failed, and every statement is refused until the transaction is rolled back.
_IN_FAILED_TRANSACTION = "25P02"
# PostgreSQL's undefined_table and undefined_column.
_UNDEFINED = ("42P01", "42703")
# SQLite's messages for the same.
_SQLITE_UNDEFINED = ("no such table:", "no such column:", "has no column named")


def check_connection(connection: Connection, backend: Backend) -> None:
    """Refuse ``connection`` unless a2sql's statements can run in the caller's transaction
    on it (``backend``: the store's database's)."""
    if connection.closed:
        raise invalid("connection", "is closed; pass one with a transaction begun on it")
    if connection.invalidated:
        raise invalid(
            "connection",
            "was invalidated (its database connection was lost or closed): roll its "
            "transaction back and begin a new one",
        )
    if not connection.in_transaction():
        raise invalid(
            "connection",
            "must have a transaction the caller began (engine.begin(), connection.begin() "
            "or store.begin()); a2sql neither begins nor commits it",
        )
    if backend_of(connection, argument="connection") is not backend:
        raise invalid(
            "connection",
            f"is a {connection.dialect.name} connection; the store's database is {backend.name}",
        )
    unheld = backend.unheld(connection)
    if unheld:
        raise invalid("connection", unheld)


def refusal(error: DBAPIError) -> A2Error | None:
    """What a statement of a2sql's failing in the caller's transaction says of the
    connection, if the failure is the connection's and not the database's: ``None``
    for a failure of the database (``STORE_UNAVAILABLE``)."""
    orig = error.orig
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate == _IN_FAILED_TRANSACTION:
        return invalid(
            "connection",
            "its transaction is aborted (a statement in it failed and was not rolled back): "
            "roll it back, or back to your savepoint, before calling a2sql",
        )
    detail = str(orig).strip()
    if sqlstate in _UNDEFINED or any(words in detail for words in _SQLITE_UNDEFINED):
        first_line = detail.splitlines()[0] if detail else type(orig).__name__
        return A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"connection: its database lacks a2sql's tables ({first_line}): connect it to "
            "the store's database and schema, migrated to this a2sql's revision",
        )
    return None
