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
