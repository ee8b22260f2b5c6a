"""Column types that differ per engine.

SQLite keeps the seed's DDL (strict tables: integers and text only);
PostgreSQL gets native types. In Python a column has one representation on
every engine: timestamps are aware UTC datetimes, JSON columns are bound as
already-encoded text and read back as Python values.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, DateTime, Integer, Text, literal_column
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.sql.expression import cast, type_coerce
from sqlalchemy.types import TypeDecorator, TypeEngine, UserDefinedType

from a2sql.core.clock import from_millis, to_millis
from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.jsontext import decode_json

# Text keys (session ids, lanes, names): byte order on PostgreSQL, so that
# ordering and range seeks are by code point as they are on SQLite.
KeyText = Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")

# Indexes and counters can outgrow 32 bits; SQLite's strict tables only know
# INTEGER (which is 64-bit there anyway).
BigInt = BigInteger().with_variant(Integer(), "sqlite")

# lane_ready: the seed stores 0/1 in an integer column.
Flag = Boolean().with_variant(Integer(), "sqlite")


class Timestamp(TypeDecorator[datetime]):
    """Integer epoch milliseconds on SQLite, ``timestamptz`` on PostgreSQL."""

    impl = Integer
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.TIMESTAMP(timezone=True))
        return dialect.type_descriptor(Integer())

    def column_expression(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        # Read as UTC wall-clock time (``timestamp``, no zone), whatever the
        # connection's TimeZone: a timestamptz reaches the driver rendered in
        # that zone, and near year 1 or 9999 the rendering lies outside
        # Python's datetime (9999-12-31 23:59 UTC is year 10000 at +14:00).
        if not isinstance(self.impl_instance, DateTime):
            return column  # SQLite: integers
        return column.op("AT TIME ZONE", return_type=self)(_UTC)

    def bind_processor(self, dialect: Dialect) -> Any:
        # Every write binds several timestamps, and rows are decoded by the
        # thousand when paging: one function per engine and direction,
        # without TypeDecorator's generic chain. SQLAlchemy's documentation
        # asks a TypeDecorator for process_bind_param/process_result_value
        # instead, which would add a call per value; both overrides are pinned
        # by tests/internals/test_compiled_statements.py, which fails if
        # SQLAlchemy stops using them.
        if dialect.name == "postgresql":
            return None
        return to_millis

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        if dialect.name == "postgresql":
            return _utc
        return from_millis


_UTC: ColumnElement[str] = literal_column("'UTC'")


def _utc(value: datetime | None) -> datetime | None:
    """A PostgreSQL time as read: UTC wall-clock time, or aware (raw SQL reads)."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class _PostgresJSON(UserDefinedType[str]):
    """PostgreSQL ``json`` (not ``jsonb``: it keeps ``\\u0000`` and ``-0.0``)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "JSON"

    def bind_expression(self, bindvalue: BindParameter[str]) -> ColumnElement[str]:
        # The value arrives already encoded; the cast turns the text into json.
        return cast(bindvalue, postgresql.JSON)


class JSONText(TypeDecorator[Any]):
    """A JSON document: text on SQLite, ``json`` on PostgreSQL.

    Bind values are JSON text encoded by the caller (validation encodes once
    and measures the size of that text); results are decoded values.
    """

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(_PostgresJSON())
        return dialect.type_descriptor(Text())

    def column_expression(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        # PostgreSQL's json is read as text and decoded by a2sql, not by the
        # driver: json.loads fails on ints past Python's digit limit, which a
        # process can lower below what a2sql stores (a2sql.core.jsontext).
        if not isinstance(self.impl_instance, _PostgresJSON):
            return column  # SQLite: text already
        return type_coerce(cast(column, Text), self)

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        # As Timestamp's: one function, pinned by the same test.
        return _decode_stored_json


def _decode_stored_json(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return decode_json(value)
    except ValueError:
        # Only text written around a2sql fails here: it encodes every value itself.
        raise A2Error(
            ErrorCode.CORRUPT_RECORD, f"a stored JSON value does not decode: {value[:80]!r}"
        ) from None
