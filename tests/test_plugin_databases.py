"""The PostgreSQL databases and schemas the test plugin makes (a2sql.testing.plugin): a test
process's own database under pytest-xdist, made afresh once a run and kept when another
client is connected to it; each test's schema, replayed from the migrations' SQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import URL, create_engine, text
from sqlalchemy.pool import NullPool

import a2sql
from a2sql.testing import plugin
from tests.plugin import unavailable


@pytest.fixture
def server(postgres_given: URL | str) -> URL:
    if isinstance(postgres_given, str):
        unavailable(postgres_given)
        raise AssertionError("unreachable")
    return postgres_given


@pytest.fixture
def worker(server: URL, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A test process name of this test's own, and its database dropped afterwards."""
    name = f"own{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
    monkeypatch.setattr(plugin, "_MADE_AFRESH", set())
    yield name
    engine = create_engine(server, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'drop database if exists "{server.database}_{name}"'))
    engine.dispose()


def _marked(url: URL) -> bool:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return bool(connection.execute(text("select to_regclass('left_behind')")).scalar())
    finally:
        engine.dispose()


def _mark(url: URL) -> None:
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as connection:
        connection.execute(text("create table left_behind (x int)"))
    engine.dispose()


def test_a_database_an_earlier_run_left_is_made_afresh(
    server: URL, worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = plugin.own_database(server)
    assert own.database == f"{server.database}_{worker}"
    _mark(own)
    # Again in the same run: the same database, as it is.
    assert plugin.own_database(server) == own
    assert _marked(own)
    # The next run (a new process): a fresh database.
    monkeypatch.setattr(plugin, "_MADE_AFRESH", set())
    assert plugin.own_database(server) == own
    assert not _marked(own)


def test_a_database_another_client_uses_is_kept(
    server: URL, worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = plugin.own_database(server)
    _mark(own)
    monkeypatch.setattr(plugin, "_MADE_AFRESH", set())
    engine = create_engine(own, poolclass=NullPool)
    try:
        with engine.connect():
            assert plugin.own_database(server) == own
    finally:
        engine.dispose()
    assert _marked(own)


def _schema_of(url: str) -> dict[str, list[str]]:
    """Each a2sql table's index definitions and column names, in the URL's schema."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            indexes = connection.execute(
                text(
                    "select tablename, indexname || ' ' || split_part(indexdef, ' USING ', 2)"
                    " from pg_indexes where schemaname = current_schema() order by 1, 2"
                )
            ).all()
            columns = connection.execute(
                text(
                    "select table_name, column_name || ' ' || data_type from"
                    " information_schema.columns where table_schema = current_schema()"
                    " order by 1, ordinal_position"
                )
            ).all()
    finally:
        engine.dispose()
    found: dict[str, list[str]] = {}
    for table, what in [*indexes, *columns]:
        found.setdefault(table, []).append(what)
    return found


def test_a_replayed_schema_is_the_migrated_one(
    server: URL, postgres_schemas: plugin.PostgresSchemas
) -> None:
    """The SQL the plugin records from the migrations and replays into each test's schema
    gives what the migrations give: the indexes a revision drops included."""
    with postgres_schemas.fresh(migrated=False) as empty:
        a2sql.create_store(empty, migrate=True).close()
        migrated = _schema_of(empty)
    with postgres_schemas.fresh(migrated=True) as replayed:
        assert _schema_of(replayed) == migrated
    assert any(index.startswith("a2_events_dispatch_free ") for index in migrated["a2_events"])
