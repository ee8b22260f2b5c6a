"""create_store's configuration (SPEC §2, §5): URLs, engines, SQLite settings, schema checks."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.pool import Pool, QueuePool

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, migrate
from a2sql.backends.sqlite_begin import DEFAULT_LOCK_TIMEOUT_MS
from a2sql.execution.engines import resolve_url
from a2sql.testing import FakeClock

A2_TABLES = {"a2_events", "a2_snapshots", "a2_presence"}
VERSION_TABLE = "a2sql_alembic_version"
BOGUS_REVISION = "9999_from_the_future"


def table_names(url: str) -> set[str]:
    engine = create_engine(resolve_url(url))
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


# --- URL resolution ------------------------------------------------------------------


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty folder with no A2SQL_DATABASE_URL set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A2SQL_DATABASE_URL", raising=False)
    return tmp_path


def test_url_argument_beats_environment_variable(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit url wins over A2SQL_DATABASE_URL and the default."""
    monkeypatch.setenv("A2SQL_DATABASE_URL", f"sqlite:///{in_tmp / 'env.db'}")
    with a2sql.create_store(f"sqlite:///{in_tmp / 'arg.db'}") as store:
        assert store.engine.url.database == str(in_tmp / "arg.db")
    assert (in_tmp / "arg.db").exists()
    assert not (in_tmp / "env.db").exists()
    assert not (in_tmp / ".a2").exists()


def test_environment_variable_beats_default(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """url=None takes A2SQL_DATABASE_URL before the .a2/dev.db default."""
    monkeypatch.setenv("A2SQL_DATABASE_URL", f"sqlite:///{in_tmp / 'env.db'}")
    with a2sql.create_store() as store:
        assert store.engine.url.database == str(in_tmp / "env.db")
    assert (in_tmp / "env.db").exists()
    assert not (in_tmp / ".a2").exists()


def test_default_url_is_dev_db_and_its_folder_is_created(in_tmp: Path) -> None:
    """With neither, the store opens sqlite:///.a2/dev.db, creating .a2/."""
    assert not (in_tmp / ".a2").exists()
    with a2sql.create_store() as store:
        store.append("s", [NewEvent("t", 1, id="e1")])
    dev_db = in_tmp / ".a2" / "dev.db"
    assert dev_db.is_file()
    assert table_names(f"sqlite:///{dev_db}") >= A2_TABLES


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        (
            "postgres://u:secret@h:5433/db?sslmode=require",
            "postgresql+psycopg://u:secret@h:5433/db?sslmode=require",
        ),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:///some/file.db", "sqlite:///some/file.db"),
    ],
)
def test_postgres_urls_mean_psycopg_3(given: str, expected: str) -> None:
    """postgresql:// and postgres:// are normalized to postgresql+psycopg://."""
    assert resolve_url(given).render_as_string(hide_password=False) == expected


def test_postgres_scheme_opens_with_psycopg(postgres_url: str) -> None:
    """create_store('postgres://...') opens the server through psycopg 3."""
    short = "postgres://" + postgres_url.split("://", 1)[1]
    with a2sql.create_store(short, migrate=True) as store:
        assert store.engine.url.drivername == "postgresql+psycopg"
        assert store.engine.dialect.driver == "psycopg"
        store.append("s", [NewEvent("t", 1, id="e1")])


@pytest.mark.parametrize(
    "url", ["mysql://u@h/db", "mssql+pyodbc://u@h/db", "oracle://u@h/db", "not a url"]
)
def test_unsupported_url_is_invalid_argument(url: str, in_tmp: Path) -> None:
    """Only sqlite and postgresql are supported; anything else is INVALID_ARGUMENT."""
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url)
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert "url" in raised.value.message


def test_unsupported_url_from_environment_is_invalid_argument(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A2SQL_DATABASE_URL is checked like an argument."""
    monkeypatch.setenv("A2SQL_DATABASE_URL", "mysql://u@h/db")
    with pytest.raises(A2Error) as raised:
        a2sql.create_store()
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert not (in_tmp / ".a2").exists()


@pytest.mark.parametrize("migrate_value", ["yes", 1, 0])
def test_migrate_must_be_bool_or_none(migrate_value: object, tmp_path: Path) -> None:
    """migrate takes True, False or None only."""
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(f"sqlite:///{tmp_path / 'a.db'}", migrate=migrate_value)  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT


def test_a_listen_url_is_for_a_postgres_store(tmp_path: Path) -> None:
    """A SQLite store given a URL to LISTEN through is told its own database is not
    PostgreSQL (the message named the listen URL, which was fine)."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, listen="postgresql://app@db/app")
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert raised.value.message == (
        f"listen: a URL to LISTEN through is for a PostgreSQL store; this store's database is {url}"
    )


# --- Engines passed in, memory databases, closing -------------------------------------


def checked_in(pool: Pool) -> int:
    """Idle connections held by a queue pool."""
    assert isinstance(pool, QueuePool), type(pool)
    return pool.checkedin()


def test_engine_passed_in_is_used_and_left_open_after_close(tmp_path: Path) -> None:
    """An Engine given by the caller is the store's engine; close() does not dispose it."""
    engine = create_engine(f"sqlite:///{tmp_path / 'own.db'}", poolclass=QueuePool)
    try:
        with a2sql.create_store(engine) as store:
            assert store.engine is engine
            store.append("s", [NewEvent("t", 1, id="e1")])
            pool = engine.pool
            # The caller's pool is shared: between calls the store holds none of it.
            assert pool.checkedout() == 0
        assert engine.pool is pool, "the caller's engine was disposed"
        assert pool.checkedout() == 0
        assert checked_in(pool) >= 1
        with engine.connect() as connection:
            count = connection.execute(text("select count(*) from a2_events")).scalar_one()
        assert count == 1
    finally:
        engine.dispose()


def test_engine_passed_in_gets_sqlite_settings(tmp_path: Path) -> None:
    """A SQLite Engine given by the caller gets WAL and BEGIN IMMEDIATE writes too."""
    engine = create_engine(f"sqlite:///{tmp_path / 'own.db'}")
    try:
        with a2sql.create_store(engine) as store:
            statements = record_statements(engine)
            store.append("s", [NewEvent("t", 1, id="e1")])
            assert statements[0].upper() == "BEGIN IMMEDIATE"
            with engine.connect() as connection:
                mode = connection.exec_driver_sql("pragma journal_mode").scalar_one()
            assert mode == "wal"
    finally:
        engine.dispose()


def test_close_releases_an_engine_the_store_created(tmp_path: Path) -> None:
    """close() disposes the engine the store opened itself: no pooled connection stays."""
    store = a2sql.create_store(f"sqlite:///{tmp_path / 'a.db'}")
    store.append("s", [NewEvent("t", 1, id="e1")])
    pool = store.engine.pool
    assert pool.checkedout() + checked_in(pool) >= 1
    store.close()
    assert (pool.checkedout(), checked_in(pool)) == (0, 0)


def test_sqlite_memory_is_one_database_for_the_store_lifetime() -> None:
    """sqlite:// is one database shared by every operation, from any thread."""
    clock = FakeClock()
    with a2sql.create_store("sqlite://", clock=clock) as store:
        store.append("first", [NewEvent("t", 1, id="e0")])

        def append(n: int) -> None:
            store.append(f"s{n}", [NewEvent("t", n, id=f"e{n + 1}")])

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(append, range(8)))
        sessions = store.inspect.list_sessions().sessions
        assert [s.session_id for s in sessions] == ["first", *(f"s{n}" for n in range(8))]
        assert [e.id for e in store.read("first")] == ["e0"]
        store.put_snapshot("first", "r", 1, {"n": 1})
        assert store.read_state("first", "r").snapshot is not None


def test_two_sqlite_memory_stores_are_separate_databases() -> None:
    """Each sqlite:// store has its own memory database."""
    with a2sql.create_store("sqlite://") as one, a2sql.create_store("sqlite://") as two:
        one.append("s", [NewEvent("t", 1, id="e1")])
        assert two.read("s") == []


def test_engine_passed_in_keeps_beginning_its_own_transactions_as_it_did(
    tmp_path: Path,
) -> None:
    """a2sql adds no ``begin`` listener and leaves the driver's isolation level: the
    application's transactions begin as before (pysqlite opens none for a SELECT), while
    a2sql's own writes still take the write lock up front."""
    engine = create_engine(f"sqlite:///{tmp_path / 'own.db'}")
    try:
        with engine.connect() as connection:
            level = connection.connection.driver_connection.isolation_level  # type: ignore[union-attr]
        with a2sql.create_store(engine) as store:
            statements = record_statements(engine)
            store.append("s", [NewEvent("t", 1, id="e1")])
            assert statements[0].upper() == "BEGIN IMMEDIATE"
            with engine.connect() as connection, connection.begin():
                driver = connection.connection.driver_connection
                assert connection.execute(text("select count(*) from a2_events")).scalar() == 1
                assert driver.isolation_level == level  # type: ignore[union-attr]
                assert not driver.in_transaction  # type: ignore[union-attr]
                # The application holds no lock: a2sql's writer goes ahead meanwhile.
                store.append("s", [NewEvent("t", 2, id="e2")])
    finally:
        engine.dispose()


def test_engine_with_sqlalchemys_pysqlite_begin_recipe(tmp_path: Path) -> None:
    """An engine that begins its own transactions (SQLAlchemy's documented recipe: no
    driver transactions, ``BEGIN`` from a ``begin`` listener) opens a new file, gets
    WAL, and a2sql's writes still take the lock up front; the app's own transactions
    keep beginning with its ``BEGIN``."""
    engine = create_engine(f"sqlite:///{tmp_path / 'recipe.db'}")

    @event.listens_for(engine, "connect")
    def no_driver_transactions(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN")

    try:
        with a2sql.create_store(engine) as store:
            statements = record_statements(engine)
            store.append("s", [NewEvent("t", 1, id="e1")])
            assert [s.upper() for s in statements if s.upper().startswith("BEGIN")] == [
                "BEGIN",
                "BEGIN IMMEDIATE",
            ]
            with engine.connect() as connection, connection.begin():
                mode = connection.exec_driver_sql("pragma journal_mode").scalar_one()
            assert mode == "wal"
            assert [e.id for e in store.read("s")] == ["e1"]
    finally:
        engine.dispose()


@pytest.mark.parametrize("listener", [False, True])
def test_engine_passed_in_gets_the_pragmas_whatever_listeners_it_has(
    tmp_path: Path, listener: bool
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'own.db'}")
    if listener:
        record_statements(engine)
    try:
        with a2sql.create_store(engine) as store:
            store.append("s", [NewEvent("t", 1, id="e1")])
            with store.begin() as connection:
                pragma = connection.exec_driver_sql
                assert pragma("pragma journal_mode").scalar_one() == "wal"
                assert pragma("pragma busy_timeout").scalar_one() == (DEFAULT_LOCK_TIMEOUT_MS)
    finally:
        engine.dispose()


# --- SQLite pragmas and transactions --------------------------------------------------


def record_statements(engine: Engine) -> list[str]:
    """Every statement sent on ``engine`` from now on, in order."""
    statements: list[str] = []

    def _record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement.strip())

    event.listen(engine, "before_cursor_execute", _record)
    return statements


@pytest.fixture
def file_store(tmp_path: Path, clock: FakeClock) -> Iterator[a2sql.Store]:
    with a2sql.create_store(f"sqlite:///{tmp_path / 'a2.db'}", clock=clock) as store:
        yield store


def test_sqlite_connections_use_wal_synchronous_normal_and_busy_timeout(
    file_store: a2sql.Store, tmp_path: Path
) -> None:
    """SQLite: journal_mode=wal, synchronous=normal, busy_timeout set on the store's connections."""
    with file_store.engine.connect() as connection:
        pragma = connection.exec_driver_sql
        assert pragma("pragma journal_mode").scalar_one() == "wal"
        assert pragma("pragma synchronous").scalar_one() == 1
        busy = pragma("pragma busy_timeout").scalar_one()
    assert busy == DEFAULT_LOCK_TIMEOUT_MS
    assert busy >= 1000
    raw = sqlite3.connect(tmp_path / "a2.db")
    try:
        assert raw.execute("pragma journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def traced_by_sqlite(engine: Engine) -> list[str]:
    """Every statement SQLite runs on connections checked out from now on (its trace
    callback: no SQLAlchemy listener, so the store keeps its pooled-connection path).
    The store must check a connection out for each call (``MAX_IDLE_S`` below 0)."""
    statements: list[str] = []

    def _trace(dbapi_connection: sqlite3.Connection, *_args: object) -> None:
        dbapi_connection.set_trace_callback(lambda sql: statements.append(sql.strip()))

    event.listen(engine, "checkout", _trace)
    return statements


@pytest.mark.parametrize("traced_by", [record_statements, traced_by_sqlite])
def test_sqlite_write_transactions_begin_immediate(
    file_store: a2sql.Store,
    clock: FakeClock,
    traced_by: Callable[[Engine], list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every write operation begins IMMEDIATE, on SQLAlchemy Connections (listeners
    attached) and on a2sql's pooled path alike."""
    monkeypatch.setattr(a2sql.execution.transactions, "MAX_IDLE_S", -1.0)
    store = file_store
    store.append("s", [NewEvent("t", 1, id="e1")])
    writes: dict[str, Callable[[], object]] = {
        "append": lambda: store.append("s", [NewEvent("t", 2, id="e2")]),
        "claim_available": lambda: store.claim_available("s", holder="w", ttl_ms=1000),
        "renew_claims": lambda: store.renew_claims(
            "s", holder="w", claims=[a2sql.ClaimRef(1, 1)], ttl_ms=1000
        ),
        "complete_attempt": lambda: store.complete_attempt("s", index=1, attempt=1, events=[]),
        "fail_attempt": lambda: store.fail_attempt(
            "s", index=2, attempt=1, error="boom", max_failures=3
        ),
        "put_snapshot": lambda: store.put_snapshot("s", "r", 1, {"n": 1}),
        "presence.set": lambda: store.presence.set(
            "ns", "p", {"f": 1}, at=clock.now(), seen=1, ttl_ms=1000
        ),
    }
    traced = traced_by(store.engine)
    for name, call in writes.items():
        traced.clear()
        call()
        # A connection a2sql has not used before gets its pragmas first (once).
        statements = [s for s in traced if not s.lower().startswith("pragma")]
        assert statements, f"{name}: sent nothing"
        begins = [s.upper() for s in statements if s.upper().startswith("BEGIN")]
        assert statements[0].upper() == "BEGIN IMMEDIATE", f"{name}: began with {statements[0]!r}"
        assert set(begins) == {"BEGIN IMMEDIATE"}, f"{name}: {begins}"


# A lock timeout short enough for a test to wait it out.
SHORT_LOCK_TIMEOUT_MS = 300


def test_sqlite_write_waits_busy_timeout_then_store_unavailable(tmp_path: Path) -> None:
    """A write blocked by another writer's lock fails after lock_timeout_ms with
    STORE_UNAVAILABLE."""
    path = tmp_path / "locked.db"
    with a2sql.create_store(f"sqlite:///{path}", lock_timeout_ms=SHORT_LOCK_TIMEOUT_MS) as store:
        store.append("s", [NewEvent("t", 1, id="e1")])
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("begin immediate")
            started = time.monotonic()
            with pytest.raises(A2Error) as raised:
                store.append("s", [NewEvent("t", 2, id="e2")])
            waited = time.monotonic() - started
            assert raised.value.code == ErrorCode.STORE_UNAVAILABLE
            assert "locked by another writer" in str(raised.value)
            assert "locked" in str(raised.value.__cause__)
            assert SHORT_LOCK_TIMEOUT_MS / 1000 * 0.8 <= waited < 5
            # WAL: a reader is not blocked by the writer.
            assert [e.id for e in store.read("s")] == ["e1"]
        finally:
            other.execute("rollback")
            other.close()
        store.append("s", [NewEvent("t", 2, id="e2")])
        assert [e.id for e in store.read("s")] == ["e1", "e2"]


def test_sqlite_file_held_in_exclusive_locking_mode_fails_after_the_lock_timeout(
    tmp_path: Path,
) -> None:
    """Another process holding the file under locking_mode=EXCLUSIVE: opening gives up after
    lock_timeout_ms in all, not after one busy timeout per attempt to switch to WAL."""
    path = tmp_path / "exclusive.db"
    sqlite3.connect(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "c.execute('pragma locking_mode = exclusive')\n"
            "c.execute('create table held (x)')\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(A2Error) as raised:
            a2sql.create_store(f"sqlite:///{path}", lock_timeout_ms=SHORT_LOCK_TIMEOUT_MS)
        waited = time.monotonic() - started
        assert raised.value.code == ErrorCode.STORE_UNAVAILABLE
        assert "locked" in str(raised.value)
        # The old bound was 100 attempts of one busy timeout each: 30 s here.
        assert waited < 3
    finally:
        holder.kill()
        holder.wait()


# --- Schema checks on open ------------------------------------------------------------


def _assert_mismatch(error: A2Error, *mentions: str) -> None:
    assert error.code == ErrorCode.SCHEMA_MISMATCH
    for mention in mentions:
        assert mention in error.message, f"{mention!r} not in {error.message!r}"


@pytest.mark.parametrize("migrate_value", [None, False])
def test_unmigrated_postgres_is_schema_mismatch_naming_revisions_and_command(
    postgres_url: str, migrate_value: bool | None
) -> None:
    """PostgreSQL is only checked by default: an empty one raises SCHEMA_MISMATCH."""
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(postgres_url, migrate=migrate_value)
    _assert_mismatch(raised.value, migrate.head_revision(), "none", "a2sql migrate")
    assert not table_names(postgres_url) & (A2_TABLES | {VERSION_TABLE})


def test_migrate_true_upgrades_postgres(postgres_url: str) -> None:
    """migrate=True upgrades PostgreSQL to head; later opens with the default just check."""
    with a2sql.create_store(postgres_url, migrate=True) as store:
        store.append("s", [NewEvent("t", 1, id="e1")])
    assert table_names(postgres_url) >= A2_TABLES | {VERSION_TABLE}
    with a2sql.create_store(postgres_url) as store:
        assert [e.id for e in store.read("s")] == ["e1"]


def test_migrate_none_upgrades_sqlite(tmp_path: Path) -> None:
    """SQLite is upgraded by default."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    a2sql.create_store(url).close()
    assert table_names(url) >= A2_TABLES | {VERSION_TABLE}


def test_migrate_false_on_unmigrated_sqlite_is_schema_mismatch(tmp_path: Path) -> None:
    """migrate=False only checks: an empty SQLite file raises SCHEMA_MISMATCH, unchanged.
    (A missing one is not created: tests/test_sqlite_file.py.)"""
    sqlite3.connect(tmp_path / "a.db").close()
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, migrate=False)
    _assert_mismatch(raised.value, migrate.head_revision(), "a2sql migrate")
    assert not table_names(url) & (A2_TABLES | {VERSION_TABLE})


@pytest.fixture(params=["sqlite_file", "postgres"])
def stamped_unknown_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database whose version table names a revision a2sql does not know."""
    if request.param == "sqlite_file":
        url = f"sqlite:///{tmp_path / 'future.db'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    a2sql.create_store(url, migrate=True).close()
    engine = create_engine(resolve_url(url))
    try:
        with engine.begin() as connection:
            connection.execute(
                text(f"update {VERSION_TABLE} set version_num = :v"), {"v": BOGUS_REVISION}
            )
    finally:
        engine.dispose()
    return url


@pytest.mark.parametrize("migrate_value", [None, False, True])
def test_unknown_revision_is_schema_mismatch(
    stamped_unknown_url: str, migrate_value: bool | None
) -> None:
    """A database at a revision this a2sql does not know raises SCHEMA_MISMATCH naming both."""
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(stamped_unknown_url, migrate=migrate_value)
    _assert_mismatch(raised.value, BOGUS_REVISION, migrate.head_revision())
    engine = create_engine(resolve_url(stamped_unknown_url))
    try:
        with engine.connect() as connection:
            found = connection.execute(text(f"select version_num from {VERSION_TABLE}")).all()
        assert [row[0] for row in found] == [BOGUS_REVISION]
    finally:
        engine.dispose()


@pytest.mark.parametrize("migrate_value", [None, False, True])
def test_postgres_tables_without_version_table_are_schema_mismatch(
    postgres_url: str, migrate_value: bool | None
) -> None:
    """a2 tables on PostgreSQL that no a2sql migration made raise SCHEMA_MISMATCH."""
    engine = create_engine(resolve_url(postgres_url))
    try:
        with engine.begin() as connection:
            connection.execute(text("create table a2_events (session_id text)"))
    finally:
        engine.dispose()
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(postgres_url, migrate=migrate_value)
    assert raised.value.code == ErrorCode.SCHEMA_MISMATCH
    assert VERSION_TABLE not in table_names(postgres_url)
