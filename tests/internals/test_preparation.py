"""Statements prepared on the PostgreSQL server, on a direct connection.

psycopg prepares a statement on the server once it has run five times on a
connection; a2sql keeps that on a direct connection (it is worth about a
quarter of a cycle) and turns it off behind a pooler (tests/test_pgbouncer.py).
A prepared statement that goes missing, as it does behind a pooler a2sql did
not recognise, fails with a message naming the setting that avoids it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent


@pytest.fixture
def one_connection(postgres_url: str) -> Iterator[Engine]:
    """An application's engine of one connection, psycopg's default preparation on."""
    a2sql.create_store(postgres_url, migrate=True).close()
    engine = create_engine(postgres_url, pool_size=1, max_overflow=0)
    try:
        yield engine
    finally:
        engine.dispose()


def prepared_statements(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(
            connection.execute(text("select statement from pg_prepared_statements")).scalars()
        )


@pytest.mark.parametrize("path", ["store", "using"])
def test_a_direct_connection_prepares_a2sqls_statements(one_connection: Engine, path: str) -> None:
    with a2sql.create_store(one_connection, migrate=False) as store:
        for n in range(10):
            if path == "store":
                store.append("s", [NewEvent("t", n)])
            else:
                with store.begin() as connection:
                    store.using(connection).append("s", [NewEvent("t", n)])
        assert len(store.read("s")) == 10
    statements = prepared_statements(one_connection)
    assert any("a2_events" in statement for statement in statements), statements


def test_an_engine_that_never_prepares_is_followed(postgres_url: str) -> None:
    a2sql.create_store(postgres_url, migrate=True).close()
    engine = create_engine(
        postgres_url, pool_size=1, max_overflow=0, connect_args={"prepare_threshold": None}
    )
    try:
        with a2sql.create_store(engine, migrate=False) as store:
            for n in range(10):
                store.append("s", [NewEvent("t", n)])
                store.read("s")
        assert prepared_statements(engine) == []
    finally:
        engine.dispose()


def _deallocate_all(engine: Engine) -> None:
    """Every statement prepared on the engine's one connection dropped behind the
    store's back, as a pooler's other server connection would not have them."""
    with engine.connect() as connection:
        names = connection.execute(text("select name from pg_prepared_statements")).scalars()
        for name in list(names):
            connection.exec_driver_sql(f'deallocate "{name}"')
        connection.commit()


def test_a_lost_prepared_statement_names_the_setting_that_avoids_it(
    one_connection: Engine,
) -> None:
    """A statement psycopg prepared (a read's) is lost: the failure says what to do."""
    with a2sql.create_store(one_connection, migrate=False) as store:
        store.append("s", [NewEvent("t", 0)])
        for _ in range(10):
            store.read("s")
        _deallocate_all(one_connection)
        with pytest.raises(A2Error) as raised:
            store.read("s")
    assert raised.value.code is ErrorCode.STORE_UNAVAILABLE
    assert "does not exist" in raised.value.message
    assert "connect_args={'prepare_threshold': None}" in raised.value.message


def test_the_hot_writes_prepare_their_lost_statements_again(one_connection: Engine) -> None:
    """The statements a2sql prepares for its hot writes (a2sql.execution.wire), lost the same way:
    the call that finds them gone sends them again, prepared anew, and commits once."""
    with a2sql.create_store(one_connection, migrate=False) as store:
        for n in range(10):
            store.append("s", [NewEvent("t", n)])
        _deallocate_all(one_connection)
        appended = store.append("s", [NewEvent("t", "after")])
        assert [e.index for e in appended.events] == [11]
        assert [e.payload for e in store.read("s")][-2:] == [9, "after"]
