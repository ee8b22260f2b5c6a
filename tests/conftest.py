"""One fixture family for every engine: SQLite file, SQLite memory, PostgreSQL.

PostgreSQL is the one the tests were given (tests/plugin.py: ``A2SQL_TEST_POSTGRES_URL``,
else testcontainers; else its tests skip, saying why, or fail under ``CI=true``).
Each PostgreSQL test gets a schema of its own, dropped afterwards (while the next
test runs); under pytest-xdist each test process has a database of its own. The
schemas, and the migrated templates stores start from, are made as a2sql's pytest
plugin makes the conformance suite's (a2sql.testing.plugin, ``a2sql_databases``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, Connection, Engine, create_engine, make_url

import a2sql
import a2sql.migrate
from a2sql.execution.engines import resolve_url
from a2sql.testing import FakeClock
from a2sql.testing.facades import open_through
from a2sql.testing.plugin import (
    FreshDatabases,
    PostgresSchemas,
    own_database,
    schema_of,
    with_schema,
)
from tests.plugin import ENGINES, unavailable

# The facades of tests/ (the conformance suite runs through all of a2sql.testing.facades').
FACADES = ("sync", "async", "observed")


def _unavailable(reason: str) -> None:
    unavailable(reason)


@pytest.fixture(scope="session")
def postgres_server(postgres_given: URL | str) -> URL | str:
    """The URL of a PostgreSQL database for tests (under pytest-xdist, this test
    process's own), or the reason there is none (a str)."""
    if isinstance(postgres_given, str):
        return postgres_given
    return own_database(postgres_given)


@pytest.fixture(scope="session")
def postgres_schemas(postgres_given: URL | str, a2sql_databases: FreshDatabases) -> PostgresSchemas:
    """Where every PostgreSQL test's schema is made and dropped."""
    if isinstance(postgres_given, str):
        _unavailable(postgres_given)
        raise AssertionError("unreachable")
    return a2sql_databases.postgres(postgres_given)


@pytest.fixture
def postgres_url(postgres_server: URL | str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL whose connections live in a fresh schema of their own, dropped after the test."""
    if isinstance(postgres_server, str):
        _unavailable(postgres_server)
        raise AssertionError("unreachable")
    schemas: PostgresSchemas = request.getfixturevalue("postgres_schemas")
    try:
        schema = schemas.create()
    except Exception as error:  # the server is down or refuses us
        _unavailable(f"PostgreSQL at {postgres_server.render_as_string()} failed: {error}")
        raise AssertionError("unreachable") from error
    try:
        yield with_schema(schemas.server, schema).render_as_string(hide_password=False)
    finally:
        schemas.drop(schema)


@pytest.fixture
def migrated_postgres_url(postgres_url: str) -> str:
    """``postgres_url``, its schema brought to the newest revision."""
    a2sql.create_store(postgres_url, migrate=True).close()
    return postgres_url


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Which engine a test runs on; every store test runs on each."""
    return str(request.param)


@pytest.fixture
def db_url(engine_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A URL of an empty database of ``engine_kind``."""
    if engine_kind == "sqlite_file":
        return f"sqlite:///{tmp_path / 'a2.db'}"
    if engine_kind == "sqlite_memory":
        return "sqlite://"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(params=["sqlite_file", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database that other connections and processes can reach too:
    a SQLite file, or PostgreSQL."""
    if request.param == "sqlite_file":
        return f"sqlite:///{tmp_path / 'a2.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    """A SQLAlchemy engine on ``url``'s database (the migration tests write and read rows
    below a2sql with it), disposed after the test."""
    opened = create_engine(resolve_url(url))
    try:
        yield opened
    finally:
        opened.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=FACADES)
def facade(request: pytest.FixtureRequest) -> str:
    """``sync``: ``Store``; ``async``: ``AsyncStore`` driven through a blocking adapter;
    ``observed``: ``Store`` on an engine with a listener, so that its transactions run
    through SQLAlchemy ``Connection``s instead of on the driver's cursor (a2sql.execution.raw)."""
    return str(request.param)


def _create(facade: str, url: str, **kwargs: Any) -> a2sql.Store:
    return open_through(facade, url, **kwargs)


@pytest.fixture
def store(
    db_url: str,
    engine_kind: str,
    clock: FakeClock,
    facade: str,
    a2sql_databases: FreshDatabases,
    request: pytest.FixtureRequest,
) -> Iterator[a2sql.Store]:
    """A migrated store on each engine and through each facade, with a fake clock.

    Tests are typed against ``Store``; the async facade answers the same calls. It
    starts from a migrated template (a SQLite file copied, PostgreSQL's recorded DDL
    replayed) rather than running every migration again (the migrations themselves
    are tested in tests/test_migrations.py and tests/test_migration_0002.py).
    """
    if engine_kind == "sqlite_file":
        shutil.copyfile(a2sql_databases.sqlite_template(), db_url.removeprefix("sqlite:///"))
    elif engine_kind == "postgres":
        schemas: PostgresSchemas = request.getfixturevalue("postgres_schemas")
        schemas.migrate(schema_of(db_url))
    with _create(facade, db_url, clock=clock, migrate=True) as opened:
        yield opened


def with_server_option(url: str, option: str) -> str:
    """``url`` with one more ``-c`` setting for every connection."""
    parsed = make_url(url)
    options = " ".join(filter(None, [parsed.query.get("options", ""), f"-c{option}"]))
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


@pytest.fixture
def holder(postgres_url: str) -> Iterator[Connection]:
    """A plain connection to the test's PostgreSQL schema, to hold locks with."""
    engine = create_engine(resolve_url(postgres_url))
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()
