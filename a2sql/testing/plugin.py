"""The pytest plugin of a2sql's contract, the conformance suite (a2sql.testing.conformance).

Run the contract against a database, from any directory::

    A2SQL_CONFORMANCE_URL=postgresql://user@host/db pytest --pyargs a2sql.testing.conformance

Every test gets a fresh database of its own, with a2sql's tables at the newest
revision and no rows, and runs once through each facade (``FACADES``). The
suite's ``conftest.py`` loads this plugin; nothing of it is imported by
``import a2sql`` (it needs pytest: ``pip install 'a2sql[testing]'``).

Its fixtures are defaults: a ``conftest.py`` of the directory pytest runs from
overrides any of them, once it loads this plugin first (``pytest_plugins =
["a2sql.testing.plugin"]`` in it, or ``pytest -p a2sql.testing.plugin``):
pytest 9 ranks fixtures of one level by when they were registered, and a
default that would shadow an override stops the run, saying so.

- ``a2sql_conformance_url``: the database to run against: ``A2SQL_CONFORMANCE_URL``,
  else ``DEFAULT_URL``, a SQLite file per test in pytest's temporary directory.
- ``a2sql_database``: the URL of this test's fresh database, made from that one:
  for a SQLite file URL a new file per test (in the folder the URL names, if it
  names one, else in pytest's temporary directory); for SQLite memory (``sqlite://``)
  the URL itself, every store opened on it a database of its own; for PostgreSQL a
  new schema per test in the database the URL names (``options=-csearch_path=...``),
  dropped afterwards (under pytest-xdist, in a database of each test process's own
  beside it: ``own_database``). Another engine has no recipe here: override this.
- ``a2sql_facade``: how the store is reached, parametrized over ``FACADES``.
- ``a2sql_make_store``: ``make(**keywords) -> Store``, which opens a store on this
  test's database through the facade, with ``create_store``'s keywords (``clock``,
  ``ids``, ``max_json_chars``...; ``migrate=True`` unless given), and closes every
  store it opened after the test. The hook for a backend of another engine, or
  another way of opening a store. A store it makes answers ``Store``'s calls and
  has ``engine`` (a SQLAlchemy ``Engine`` or ``AsyncEngine``: the suite asks its
  backend's ``Capabilities``, and forges rows a2sql would never write through it);
  every store it opens shares the test's database, except on a memory database.

A test that does not apply to a facade is marked so
(``@pytest.mark.a2sql_not_through_using(reason)``): it is skipped there, saying why.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, create_engine, event, make_url, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

import a2sql
import a2sql.migrate
from a2sql import A2Error, Store
from a2sql.backends import backend_of
from a2sql.testing.facades import FACADES, open_through

ENV_URL = "A2SQL_CONFORMANCE_URL"
# Without A2SQL_CONFORMANCE_URL: a SQLite file per test, named a2.db, in pytest's
# temporary directory (tmp_path).
DEFAULT_URL = "sqlite:///a2.db"
NOT_THROUGH_USING = "a2sql_not_through_using"
# Marks a test whose checks all come before the store sends anything (argument
# checks): on a run over several engines, one engine shows them all.
BEFORE_THE_DATABASE = "a2sql_before_the_database"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{NOT_THROUGH_USING}(reason): the test does not apply to the facade 'using' "
        "(store.using(connection)), where it is skipped with the reason",
    )
    config.addinivalue_line(
        "markers",
        f"{BEFORE_THE_DATABASE}: what the test checks happens before the store sends "
        "anything to the database (argument checks); a run over several engines may "
        "run it on one",
    )


# The fixtures a conftest.py overrides to run the contract its own way.
HOOKS = ("a2sql_conformance_url", "a2sql_database", "a2sql_facade", "a2sql_make_store")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _check_overrides(items)
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("a2sql_facade") != "using":
            continue
        marker = item.get_closest_marker(NOT_THROUGH_USING)
        if marker is not None:
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason=f"not through using(): {reason}"))


def _check_overrides(items: list[pytest.Item]) -> None:
    """Refuse to run the contract where this plugin's default of a hook shadows another
    definition: an override in a conftest.py loaded before this plugin was (pytest 9
    ranks fixtures of the same level by when they were registered, and this plugin is
    registered as the suite is collected, unless loaded first)."""
    for item in items:
        # pytest's record of the fixtures each name resolves to, least specific first.
        info = getattr(item, "_fixtureinfo", None)
        found = getattr(info, "name2fixturedefs", None) or {}
        for name in HOOKS:
            definitions = found.get(name, ())
            if len(definitions) < 2 or _module_of(definitions[-1]) != __name__:
                continue
            shadowed = next((_module_of(d) for d in definitions if _module_of(d) != __name__), "")
            if not shadowed:
                continue
            raise pytest.UsageError(
                f"the fixture {name} of {shadowed} is shadowed by the default of "
                f"{__name__}, loaded after it: load the plugin first, with "
                f'pytest_plugins = ["{__name__}"] in that conftest.py (or pytest -p {__name__})'
            )


def _module_of(definition: Any) -> str:
    return str(getattr(getattr(definition, "func", None), "__module__", ""))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say what the contract ran against (only pytest's own process knows: under
    pytest-xdist the test processes' fixtures are not seen here)."""
    for line in sorted(_RAN_AGAINST):
        terminalreporter.write_line(f"a2sql conformance: {line}")


_RAN_AGAINST: set[str] = set()


# --- the fixtures -------------------------------------------------------------------------


@pytest.fixture
def a2sql_conformance_url() -> str:
    """The database the contract runs against: ``A2SQL_CONFORMANCE_URL``, else
    ``DEFAULT_URL`` (a SQLite file per test in pytest's temporary directory)."""
    return os.environ.get(ENV_URL) or DEFAULT_URL


@pytest.fixture(scope="session")
def a2sql_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshDatabases]:
    """What makes each test's fresh database, with what it keeps for the whole session
    (migrated templates, the engines that make and drop PostgreSQL schemas)."""
    databases = FreshDatabases(tmp_path_factory)
    yield databases
    databases.close()


@pytest.fixture
def a2sql_database(
    a2sql_conformance_url: str, a2sql_databases: FreshDatabases, tmp_path: Path
) -> Iterator[str]:
    """The URL of this test's fresh database: a2sql's tables at the newest revision, no
    rows (SQLite memory: every store opened on the URL is a database of its own)."""
    with a2sql_databases.fresh(a2sql_conformance_url, tmp_path) as url:
        yield url


@pytest.fixture(params=FACADES)
def a2sql_facade(request: pytest.FixtureRequest) -> str:
    """How the test reaches the store (a2sql.testing.facades): ``sync``, ``async``,
    ``observed``, ``async_observed``, ``using``."""
    return str(request.param)


@pytest.fixture
def a2sql_make_store(a2sql_database: str, a2sql_facade: str) -> Iterator[Callable[..., Store]]:
    """``make(**keywords) -> Store``: a store on this test's database through the facade,
    opened with ``create_store``'s keywords (``migrate=True`` unless given); every store
    it opened is closed after the test."""
    with ExitStack() as opened:

        def make(**keywords: Any) -> Store:
            keywords.setdefault("migrate", True)
            store = open_through(a2sql_facade, a2sql_database, **keywords)
            opened.callback(store.close)
            return store

        yield make


# --- fresh databases ----------------------------------------------------------------------


class FreshDatabases:
    """Fresh databases for tests, one per test, by the URL's engine: a SQLite file copied
    from a migrated template, a PostgreSQL schema the migrations' recorded SQL is
    replayed into (``PostgresSchemas``), or SQLite memory as it is."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp_path_factory = tmp_path_factory
        self._sqlite_template: Path | None = None
        self._servers: dict[str, PostgresSchemas] = {}
        self._lock = threading.Lock()

    @contextmanager
    def fresh(self, url: str, tmp_path: Path) -> Iterator[str]:
        """The URL of a new database of ``url``'s engine, a2sql's tables at the newest
        revision and no rows; a file or schema is removed afterwards where ``url`` names
        where it goes."""
        try:
            parsed = _parsed(url)
        except A2Error as error:
            pytest.fail(
                f"{error.message} (override the fixture a2sql_database, or a2sql_make_store, "
                "in your conftest.py for a database this plugin cannot make)",
                pytrace=False,
            )
        backend = backend_of(parsed)
        if backend.is_memory(parsed):
            _RAN_AGAINST.add(f"{_shown(parsed)}: SQLite memory, a database per store")
            yield url
            return
        path = backend.database_file(parsed)
        if path is not None:
            with self._sqlite_file(parsed, path, tmp_path) as fresh:
                yield fresh
            return
        if backend.name in SCHEMA_PER_TEST:
            schemas = self.postgres(parsed)
            _RAN_AGAINST.add(f"{_shown(schemas.server)}: a schema per test")
            with schemas.fresh(migrated=True) as fresh:
                yield fresh
            return
        pytest.fail(
            f"a2sql's conformance plugin makes fresh databases for SQLite and PostgreSQL, "
            f"not {backend.title} ({_shown(parsed)}): override the fixture a2sql_database "
            "(or a2sql_make_store) in your conftest.py",
            pytrace=False,
        )

    @contextmanager
    def _sqlite_file(self, url: URL, path: Path, tmp_path: Path) -> Iterator[str]:
        if path.is_dir():
            # The URL names a folder: the test's file goes there, and is removed after.
            _RAN_AGAINST.add(f"{_shown(url)}: a SQLite file per test in {path}")
            target = path / f"a2sql-{uuid.uuid4().hex[:12]}.db"
            keep = False
        else:
            _RAN_AGAINST.add(
                f"{_shown(url)}: a SQLite file per test ({path.name}) in pytest's "
                "temporary directory"
            )
            target = tmp_path / path.name
            keep = True
        shutil.copyfile(self.sqlite_template(), target)
        try:
            yield url.set(database=str(target)).render_as_string(hide_password=False)
        finally:
            if not keep:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{target}{suffix}").unlink(missing_ok=True)

    def sqlite_template(self) -> Path:
        """A SQLite file at the newest revision, made once: a test's file is a copy of it,
        rather than every migration run again."""
        with self._lock:
            if self._sqlite_template is None:
                path = self._tmp_path_factory.mktemp("a2sql-template") / "migrated.db"
                a2sql.create_store(f"sqlite:///{path}", migrate=True).close()
                self._sqlite_template = path
            return self._sqlite_template

    def postgres(self, server: URL) -> PostgresSchemas:
        """The schemas of the PostgreSQL database ``server`` names (under pytest-xdist,
        of this test process's own database beside it: ``own_database``)."""
        key = server.render_as_string(hide_password=False)
        with self._lock:
            if key not in self._servers:
                self._servers[key] = PostgresSchemas(own_database(server))
            return self._servers[key]

    def close(self) -> None:
        for schemas in self._servers.values():
            schemas.close()
        self._servers.clear()


def _parsed(url: str | URL) -> URL:
    parsed = make_url(url) if isinstance(url, str) else url
    return backend_of(parsed, argument=ENV_URL).resolved(parsed)


def _shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


# --- PostgreSQL: a schema per test ----------------------------------------------------------

SEARCH_PATH = "-csearch_path="
# The statements of the migrations worth replaying: the DDL and the version row.
WRITES = ("CREATE", "INSERT", "UPDATE", "ALTER", "DROP")


# The databases ``own_database`` has made afresh in this process (each once a run).
_MADE_AFRESH: set[str] = set()


def own_database(server: URL) -> URL:
    """``server`` itself, or under pytest-xdist a database of this test process's own
    beside it (``<database>_gw0``): advisory locks and NOTIFY channels are per
    database, so tests running at once in two processes must not share one, even in
    schemas of their own.

    It is made afresh once a run: one an earlier run left is dropped first, unless
    another client is connected to it (then it is used as it is). Each test makes
    and drops a schema in it, and a catalogue that thousands of those went through
    makes every later one slower."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return server
    own = server.set(database=f"{server.database}_{worker}")
    name = str(own.database)
    engine = create_engine(server, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:

            def exists() -> bool:
                return (
                    connection.execute(
                        text("select 1 from pg_database where datname = :name"), {"name": name}
                    ).first()
                    is not None
                )

            if name not in _MADE_AFRESH:
                _MADE_AFRESH.add(name)
                try:
                    connection.execute(text(f'drop database if exists "{name}"'))
                except DBAPIError:
                    return own  # in use (another run of this name): kept as it is
            if not exists():
                try:
                    connection.execute(text(f'create database "{name}"'))
                except DBAPIError:
                    # Made meanwhile by another run of the same test process name.
                    if not exists():
                        raise
    finally:
        engine.dispose()
    return own


def with_schema(server: URL, schema: str) -> URL:
    """``server`` with every connection's search path set to ``schema`` (on top of the
    URL's own ``options``)."""
    options = " ".join(filter(None, [str(server.query.get("options", "")), SEARCH_PATH + schema]))
    return server.update_query_dict({"options": options})


def schema_of(url: str | URL) -> str:
    """The schema a URL of ``with_schema`` sets its connections' search path to."""
    parsed = make_url(url) if isinstance(url, str) else url
    for option in str(parsed.query.get("options", "")).split():
        if option.startswith(SEARCH_PATH):
            return option.removeprefix(SEARCH_PATH)
    raise ValueError(f"{_shown(parsed)} sets no search path ({SEARCH_PATH}...)")


class PostgresSchemas:
    """Each test's schema in one PostgreSQL database, made and dropped on one pooled
    engine: a connection kept open saves two connections to the server per test. Its
    connections are checked before use, so a server restart costs only a reconnect.

    A schema is dropped in a thread of its own while the next test runs (a drop keeps
    the server busy for some milliseconds, seconds over a whole run); a drop that fails
    (the server restarting) is tried again at the end. A migrated schema gets its
    tables from the SQL the migrations sent to a template schema, recorded once and
    replayed in one round trip, instead of running every migration again."""

    def __init__(self, server: URL) -> None:
        self.server = server
        self.engine = create_engine(server, pool_size=2, pool_pre_ping=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drop-schema")
        self._failed: list[str] = []
        self._ddl: str | None = None
        self._lock = threading.Lock()

    def create(self, prefix: str = "a2test") -> str:
        """A new, empty schema; its name."""
        schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with self.engine.begin() as connection:
            connection.execute(text(f'create schema "{schema}"'))
        return schema

    def drop(self, schema: str) -> None:
        """Drop ``schema`` and all in it, in the background."""
        self._executor.submit(self._drop, schema)

    @contextmanager
    def fresh(self, *, migrated: bool) -> Iterator[str]:
        """The URL of a new schema (its tables at the newest revision if ``migrated``),
        dropped afterwards."""
        schema = self.create()
        try:
            if migrated:
                self.migrate(schema)
            yield with_schema(self.server, schema).render_as_string(hide_password=False)
        finally:
            self.drop(schema)

    def migrate(self, schema: str) -> None:
        """Bring the empty ``schema`` to the newest revision: the recorded SQL, replayed."""
        script = self.migration_sql()
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            try:
                # No parameters: several statements in one round trip.
                cursor.execute(f'SET LOCAL search_path TO "{schema}";\n{script}')
            finally:
                cursor.close()
            connection.commit()
        finally:
            connection.close()

    def migration_sql(self) -> str:
        """The SQL the migrations send to bring an empty schema to the newest revision,
        recorded once on a template schema."""
        with self._lock:
            if self._ddl is None:
                self._ddl = self._record_migrations()
            return self._ddl

    def _record_migrations(self) -> str:
        schema = self.create("a2template")
        engine = create_engine(with_schema(self.server, schema), poolclass=NullPool)
        sent: list[str] = []

        def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_rest: Any) -> None:
            # The DDL and the version row carry no parameters; reflection queries do.
            if not params and statement.lstrip().split(None, 1)[0].upper() in WRITES:
                sent.append(statement)

        try:
            event.listen(engine, "before_cursor_execute", record)
            a2sql.migrate.upgrade(engine)
            return ";\n".join(sent)
        finally:
            engine.dispose()
            self.drop(schema)

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


# The engines (SQLAlchemy's dialect names) whose fresh databases are PostgresSchemas'.
SCHEMA_PER_TEST = frozenset({"postgresql"})

__all__ = [
    "DEFAULT_URL",
    "ENV_URL",
    "NOT_THROUGH_USING",
    "FreshDatabases",
    "PostgresSchemas",
    "own_database",
    "schema_of",
    "with_schema",
]
