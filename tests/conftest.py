"""One fixture family for every engine: SQLite file, SQLite memory, PostgreSQL.

PostgreSQL comes from ``A2SQL_TEST_POSTGRES_URL``; else from testcontainers
when a Docker engine answers; else its tests skip, saying why. With
``CI=true`` a PostgreSQL test that cannot run fails instead of skipping.
Each PostgreSQL test gets a schema of its own, dropped afterwards (while the next
test runs); under pytest-xdist each test process has a database of its own.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.pool import NullPool

import a2sql
import a2sql.migrate
from a2sql.config import resolve_url
from a2sql.testing import FakeClock
from a2sql.testing.facades import open_through
from bench.databases import ensure_postgres_database

ENGINES = ("sqlite_file", "sqlite_memory", "postgres")
FACADES = ("sync", "async", "observed")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"PostgreSQL is required in CI (CI=true) but {reason}", pytrace=False)
    pytest.skip(reason)


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _own_database(server: URL) -> URL:
    """``server`` itself, or under pytest-xdist a database of this test process's own
    beside it (made if missing): advisory locks and NOTIFY channels are per database,
    so tests running at once in two processes must not share one, even in schemas of
    their own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return server
    own = server.set(database=f"{server.database}_{worker}")
    ensure_postgres_database(own.set(drivername="postgresql").render_as_string(False))
    return own


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[URL | str]:
    """The URL of a PostgreSQL server for tests, or the reason there is none (a str)."""
    env_url = os.environ.get("A2SQL_TEST_POSTGRES_URL")
    if env_url:
        yield _own_database(resolve_url(env_url))
        return
    if not _docker_answers():
        yield (
            "no PostgreSQL: A2SQL_TEST_POSTGRES_URL is unset and no Docker engine answers "
            "for testcontainers"
        )
        return
    from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]

    with PostgresContainer("postgres:16-alpine", driver="psycopg") as container:
        yield resolve_url(container.get_connection_url())


class _Schemas:
    """Each test's schema, made and dropped on one pooled engine: a connection kept open
    saves a connection to the server twice per test. Its connections are checked
    before use, so a server restart (torture tests) costs nothing but a reconnect.

    A schema is dropped in a thread of its own while the next test runs: a drop keeps
    the server busy for some milliseconds, seconds over a whole run. A drop that
    fails (the server restarting) is tried again at the end."""

    def __init__(self, server: URL) -> None:
        self.engine = create_engine(server, pool_size=2, pool_pre_ping=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drop-schema")
        self._failed: list[str] = []

    def drop(self, schema: str) -> None:
        self._executor.submit(self._drop, schema)

    def _drop(self, schema: str) -> None:
        try:
            with self.engine.begin() as connection:
                connection.execute(text(f'drop schema if exists "{schema}" cascade'))
        except Exception:
            self._failed.append(schema)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        failed, self._failed = self._failed, []
        for schema in failed:
            self._drop(schema)
        self.engine.dispose()


@pytest.fixture(scope="session")
def postgres_schemas(postgres_server: URL | str) -> Iterator[_Schemas]:
    """Where every PostgreSQL test's schema is made and dropped."""
    if isinstance(postgres_server, str):
        _unavailable(postgres_server)
        raise AssertionError("unreachable")
    schemas = _Schemas(postgres_server)
    yield schemas
    schemas.close()


@pytest.fixture
def postgres_url(postgres_server: URL | str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL whose connections live in a fresh schema of their own, dropped after the test."""
    if isinstance(postgres_server, str):
        _unavailable(postgres_server)
        raise AssertionError("unreachable")
    schemas: _Schemas = request.getfixturevalue("postgres_schemas")
    schema = f"a2test_{uuid.uuid4().hex[:12]}"
    try:
        with schemas.engine.begin() as connection:
            connection.execute(text(f'create schema "{schema}"'))
    except Exception as error:  # the server is down or refuses us
        _unavailable(f"PostgreSQL at {postgres_server.render_as_string()} failed: {error}")
    url = postgres_server.update_query_dict({"options": f"{SEARCH_PATH}{schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        schemas.drop(schema)


SEARCH_PATH = "-csearch_path="


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
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=FACADES)
def facade(request: pytest.FixtureRequest) -> str:
    """``sync``: ``Store``; ``async``: ``AsyncStore`` driven through a blocking adapter;
    ``observed``: ``Store`` on an engine with a listener, so that its transactions run
    through SQLAlchemy ``Connection``s instead of on the driver's cursor (a2sql.direct)."""
    return str(request.param)


def _create(facade: str, url: str, **kwargs: Any) -> a2sql.Store:
    return open_through(facade, url, **kwargs)


@pytest.fixture(scope="session")
def migrated_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the newest revision, made once: stores of the conformance suite
    start from a copy of it instead of running every migration again (the migrations
    themselves are tested in tests/test_migrations.py and tests/test_migration_0002.py)."""
    path = tmp_path_factory.mktemp("template") / "migrated.db"
    a2sql.create_store(f"sqlite:///{path}", migrate=True).close()
    return path


@pytest.fixture(scope="session")
def migrated_postgres_ddl(
    postgres_server: URL | str, request: pytest.FixtureRequest
) -> Iterator[str]:
    """The SQL the migrations send to bring an empty PostgreSQL schema to the newest
    revision, recorded once: conformance stores start from it in one round trip instead
    of running every migration (as SQLite ones start from ``migrated_sqlite_file``)."""
    if isinstance(postgres_server, str):
        _unavailable(postgres_server)
        raise AssertionError("unreachable")
    schemas: _Schemas = request.getfixturevalue("postgres_schemas")
    schema = f"a2template_{uuid.uuid4().hex[:12]}"
    url = postgres_server.update_query_dict({"options": f"{SEARCH_PATH}{schema}"})
    engine = create_engine(url, poolclass=NullPool)
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_rest: Any) -> None:
        # The DDL and the version row carry no parameters; reflection queries do.
        if not params and statement.lstrip().split(None, 1)[0].upper() in WRITES:
            sent.append(statement)

    try:
        with schemas.engine.begin() as connection:
            connection.execute(text(f'create schema "{schema}"'))
        event.listen(engine, "before_cursor_execute", record)
        a2sql.migrate.upgrade(engine)
        yield ";\n".join(sent)
    finally:
        engine.dispose()
        schemas.drop(schema)


WRITES = ("CREATE", "INSERT", "UPDATE", "ALTER")


def _replay_ddl(admin: Engine, url: str, script: str) -> None:
    schema = make_url(url).query["options"]
    assert isinstance(schema, str) and schema.startswith(SEARCH_PATH), url
    connection = admin.raw_connection()
    try:
        with connection.cursor() as cursor:
            # No parameters: several statements in one round trip.
            cursor.execute(
                f'SET LOCAL search_path TO "{schema.removeprefix(SEARCH_PATH)}";\n{script}'
            )
        connection.commit()
    finally:
        connection.close()


@pytest.fixture
def store(
    db_url: str,
    engine_kind: str,
    clock: FakeClock,
    facade: str,
    request: pytest.FixtureRequest,
) -> Iterator[a2sql.Store]:
    """A migrated store on each engine and through each facade, with a fake clock.

    Tests are typed against ``Store``; the async facade answers the same calls.
    """
    if engine_kind == "sqlite_file":
        template: Path = request.getfixturevalue("migrated_sqlite_file")
        shutil.copyfile(template, db_url.removeprefix("sqlite:///"))
    elif engine_kind == "postgres":
        _replay_ddl(
            request.getfixturevalue("postgres_schemas").engine,
            db_url,
            request.getfixturevalue("migrated_postgres_ddl"),
        )
    with _create(facade, db_url, clock=clock, migrate=True) as opened:
        yield opened


@pytest.fixture
def open_store(
    db_url: str, engine_kind: str, clock: FakeClock, facade: str
) -> Iterator[Callable[..., a2sql.Store]]:
    """Open further stores on the same database as ``store`` (not for SQLite memory)."""
    opened: list[a2sql.Store] = []

    def _open(**kwargs: Any) -> a2sql.Store:
        if engine_kind == "sqlite_memory":
            pytest.skip("a SQLite memory database belongs to one store")
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("migrate", True)
        new = _create(facade, db_url, **kwargs)
        opened.append(new)
        return new

    yield _open
    for each in opened:
        each.close()


def backend_of(url: str) -> str:
    return make_url(url).get_backend_name()


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
