"""The raw path's compiled statements (a2sql.execution.raw.prepared): each statement
compiled once per driver, and none kept alive without end."""

from __future__ import annotations

import gc
import weakref

from sqlalchemy import create_engine, literal_column, select

from a2sql.execution import raw


def test_a_statement_built_once_is_compiled_once() -> None:
    dialect = create_engine("sqlite://").dialect
    statement = select(literal_column("1"))
    assert raw.prepared(statement, dialect) is raw.prepared(statement, dialect)


def test_statements_built_for_each_call_do_not_stay_alive() -> None:
    """A statement built anew for each call (none of a2sql's is; a change could make
    one) is compiled each time, with its own SQL, and does not stay alive in the cache
    past its bound."""
    dialect = create_engine("sqlite://").dialect
    alive = []
    for n in range(2 * raw.MAX_PREPARED + 1):
        statement = select(literal_column(str(n)))
        alive.append(weakref.ref(statement))
        assert raw.prepared(statement, dialect).sql == f"SELECT {n}"
        del statement
    gc.collect()
    assert sum(ref() is None for ref in alive) >= raw.MAX_PREPARED
    assert len(raw._prepared) <= raw.MAX_PREPARED


def test_sqlalchemy_takes_the_column_types_own_processors() -> None:
    """Timestamp and JSONText override TypeDecorator's bind_processor/result_processor,
    which SQLAlchemy's documentation leaves to process_bind_param/process_result_value
    (a2sql.backends.column_types says why). Pinned here: SQLAlchemy's dialect
    implementation of each type hands back those very functions, on both engines."""
    from a2sql.backends.column_types import JSONText, Timestamp, _decode_stored_json, _utc
    from a2sql.core.clock import from_millis, to_millis

    sqlite = create_engine("sqlite://").dialect
    postgres = create_engine("postgresql+psycopg://").dialect
    on_sqlite = Timestamp().dialect_impl(sqlite)
    assert on_sqlite.bind_processor(sqlite) is to_millis
    assert on_sqlite.result_processor(sqlite, None) is from_millis
    on_postgres = Timestamp().dialect_impl(postgres)
    assert on_postgres.bind_processor(postgres) is None
    assert on_postgres.result_processor(postgres, None) is _utc
    for dialect in (sqlite, postgres):
        json = JSONText().dialect_impl(dialect)
        assert json.result_processor(dialect, None) is _decode_stored_json
