"""Programmatic Alembic: the schema's revision, upgrades, and the check on open."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, column, create_engine, inspect, select
from sqlalchemy import table as table_clause
from sqlalchemy.pool import StaticPool

from a2sql.backends import backend_of
from a2sql.backends.sqlite_begin import DEFAULT_LOCK_TIMEOUT_MS
from a2sql.core import urls
from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.escaping import command_line
from a2sql.execution.engines import build_engine, resolve_url
from a2sql.sql.schema import TABLE_NAMES

# Importing Alembic logs each of its plugins at INFO: an application that logs
# at INFO would see those lines on every start just for importing a2sql.
_ALEMBIC_PLUGINS_LOG = logging.getLogger("alembic.runtime.plugins")
_level = _ALEMBIC_PLUGINS_LOG.level
_ALEMBIC_PLUGINS_LOG.setLevel(logging.WARNING)
try:
    from alembic import command
    from alembic.config import Config
    from alembic.script import Script, ScriptDirectory
    from alembic.util import CommandError
finally:
    _ALEMBIC_PLUGINS_LOG.setLevel(_level)

VERSION_TABLE = "a2sql_alembic_version"
# Every table a2sql's migrations create: what an application's autogenerate must skip.
OWN_TABLES = frozenset((*TABLE_NAMES, VERSION_TABLE))
BASELINE = "0001_baseline"
APP_VERSION_TABLE = "alembic_version"  # an application's own Alembic history, by default


def shown_url(connection: Connection) -> str:
    """The database's URL as messages show it: password hidden."""
    return urls.shown_url(connection.engine.url)


def upgrade_hint(connection: Connection) -> str:
    """The exact command that brings this database to the newest revision."""
    hidden = " (with your password for ***)" if connection.engine.url.password else ""
    return f"run `{command_line('a2sql', 'migrate', '--url', shown_url(connection))}`{hidden}"


def script_location() -> Path:
    """The folder of the Alembic scripts shipped with the package."""
    return Path(str(resources.files("a2sql._migrations")))


def alembic_config(connection: Connection | None = None, output: Any = None) -> Config:
    config = Config(output_buffer=output)
    config.set_main_option("script_location", str(script_location()))
    config.attributes["configure_logger"] = False
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


@cache
def known_revisions() -> frozenset[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return frozenset(rev.revision for rev in script.walk_revisions())


_VERSION = table_clause(VERSION_TABLE, column("version_num"))


def current_revision(connection: Connection) -> str | None:
    """The revision in a2sql's version table, ``None`` without one.

    Read with one query rather than through Alembic's ``MigrationContext``,
    which logs at INFO each time it is made: opening a store logs nothing
    unless it migrates.
    """
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    found = [row[0] for row in connection.execute(select(_VERSION.c.version_num))]
    if len(found) > 1:
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"{shown_url(connection)}: {VERSION_TABLE} holds {len(found)} revisions "
            f"({', '.join(found)}); a2sql's history has one head",
        )
    return found[0] if found else None


def lock_for_migration(connection: Connection) -> None:
    """Serialize concurrent migrations: the first statement of a migrating transaction
    (SQLite: the database's write lock; PostgreSQL: an advisory lock of a2sql's
    migrations)."""
    backend_of(connection).lock_for_migration(connection)


@contextmanager
def _transaction(
    connection: Connection, *, read_only: bool, busy_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
) -> Iterator[Connection]:
    if connection.in_transaction():
        # The caller's (an application's Alembic env.py): a2sql neither begins nor ends it.
        yield connection
        return
    with connection.begin():
        if read_only:
            backend_of(connection).begin_own(
                connection, read_only=True, busy_timeout_ms=busy_timeout_ms
            )
        yield connection


@contextmanager
def _keeping_alembic_proxies() -> Iterator[None]:
    """Run an Alembic command without taking ``alembic.context`` and ``alembic.op`` from
    the environment it may be called in.

    Those two modules are proxies of whichever environment runs now; a
    command installs its own and, when it ends, removes it, leaving an
    application's ``env.py`` that called ``a2sql.migrate.upgrade`` without
    its ``context``. Alembic has no public way to nest environments, so the
    proxies in place are put back afterwards. Private: the modules'
    ``_proxy`` global and ``_install_proxy``; pinned by
    tests/test_alembic_embedding.py.
    """
    import alembic.context
    import alembic.op

    saved = [getattr(module, "_proxy", None) for module in (alembic.context, alembic.op)]
    try:
        yield
    finally:
        for proxy in saved:
            if proxy is not None:
                proxy._install_proxy()


def upgrade(target: Engine | Connection, revision: str = "head") -> str | None:
    """Bring a2sql's schema to ``revision`` (default: the newest); return where it ends.

    Given an ``Engine``, in a transaction of its own. Given a ``Connection``,
    on it, and inside the transaction it is in, if any: call it from your
    application's Alembic ``env.py`` with the connection your migrations
    run on, and a2sql's schema comes up in the same transaction where the
    engine can do DDL in one (PostgreSQL). a2sql keeps its revision in its
    own version table (``a2sql_alembic_version``), whatever yours is.
    """
    if isinstance(target, Connection):
        return _move(target, revision)
    return move_to(target, revision)


def open_engine(url: str | URL | None = None) -> Engine:
    """The engine your application's Alembic ``env.py`` runs its migrations on, for
    a2sql's database as ``create_store`` opens it: ``url``, else ``A2SQL_DATABASE_URL``,
    else ``sqlite:///.a2/dev.db``.

    As a store does, it makes a SQLite database's folder and file when they are
    missing (a fresh checkout has no ``.a2/``), and takes ``postgresql://`` to
    mean psycopg 3. Dispose of it when the migrations are done.
    """
    return build_engine(resolve_url(url))


def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """For your env.py's ``context.configure(include_name=...)``: autogenerate and
    ``alembic check`` leave a2sql's tables (and their indexes) alone."""
    if type_ == "table":
        return name not in OWN_TABLES
    if type_ in ("index", "unique_constraint", "foreign_key_constraint", "column"):
        return parent_names.get("table_name") not in OWN_TABLES
    return True


def include_object(
    object_: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """For your env.py's ``context.configure(include_object=...)``: the same as
    ``include_name``, for objects (a2sql's tables in your metadata, if you import them)."""
    if type_ == "table":
        return name not in OWN_TABLES
    table = getattr(object_, "table", None)
    return getattr(table, "name", None) not in OWN_TABLES


def database_revision(engine: Engine) -> str | None:
    """The revision the database is at, read without changing anything."""
    with engine.connect() as connection, _transaction(connection, read_only=True):
        return current_revision(connection)


def move_to(engine: Engine, revision: str = "head") -> str | None:
    """Upgrade, or downgrade when ``revision`` is below the current one; return where it ends."""
    return migrate_database(engine, revision)[1]


def migrate_database(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """``move_to``, returning the revisions before and after, both read under the
    migration's lock: of two concurrent runs, the second finds what the first did.
    An unknown ``revision`` raises ``A2Error(INVALID_ARGUMENT)`` before connecting."""
    check_revision(revision)
    with engine.connect() as connection:
        return _moved(connection, revision)


def _unknown_revision(revision: str, error: CommandError) -> A2Error:
    return A2Error(
        ErrorCode.INVALID_ARGUMENT,
        f"revision {revision!r}: {error}; a2sql knows "
        f"{', '.join(sorted(known_revisions()))}, head and base",
    )


def check_revision(revision: str) -> None:
    """Raise ``A2Error(INVALID_ARGUMENT)`` unless ``revision`` names one of a2sql's
    revisions (an id or a unique prefix of one, ``head`` or ``base``)."""
    _target(ScriptDirectory.from_config(alembic_config()), revision)


def _target(script: ScriptDirectory, revision: str) -> Script | None:
    """The script of ``revision`` in ``script`` (``None`` for base), or
    ``INVALID_ARGUMENT``."""
    try:
        return script.get_revision(revision)
    except CommandError as error:
        raise _unknown_revision(revision, error) from None


def _move(connection: Connection, revision: str) -> str | None:
    return _moved(connection, revision)[1]


def _moved(connection: Connection, revision: str) -> tuple[str | None, str | None]:
    script = ScriptDirectory.from_config(alembic_config())
    target = _target(script, revision)
    with _keeping_alembic_proxies(), _transaction(connection, read_only=False):
        lock_for_migration(connection)
        before = current_revision(connection)
        _adopt_seed_database(connection)
        found = current_revision(connection)
        below = revision == "base" or (
            found is not None
            and target is not None
            and target.revision != found
            and target.revision in {r.revision for r in script.iterate_revisions(found, "base")}
        )
        config = alembic_config(connection)
        if below:
            command.downgrade(config, revision)
        else:
            command.upgrade(config, revision)
        return before, current_revision(connection)


def stamp(connection: Connection, revision: str) -> None:
    """Record ``revision`` in a2sql's version table without running any migration."""
    with _keeping_alembic_proxies():
        command.stamp(alembic_config(connection), revision)


def stamp_database(engine: Engine, revision: str) -> str | None:
    """``stamp`` in a locked transaction of its own; the revision recorded before."""
    if revision != "base" and revision not in known_revisions() and revision != "head":
        raise A2Error(
            ErrorCode.INVALID_ARGUMENT,
            f"revision {revision!r}: a2sql knows {', '.join(sorted(known_revisions()))}, "
            "head and base",
        )
    with engine.connect() as connection, _transaction(connection, read_only=False):
        lock_for_migration(connection)
        before = current_revision(connection)
        stamp(connection, revision)
        return before


def offline_sql(url: str, revision: str = "head") -> str:
    """The SQL that ``upgrade`` would run to bring an empty database of ``url``'s engine to
    ``revision`` (or run over a range ``FROM:TO``), for a DBA to review and apply."""
    import io

    buffer = io.StringIO()
    config = alembic_config(output=buffer)
    config.attributes["url"] = resolve_url(url)
    try:
        with _keeping_alembic_proxies():
            command.upgrade(config, revision, sql=True)
    except CommandError as error:
        raise _unknown_revision(revision, error) from None
    return buffer.getvalue()


def ensure_schema(
    engine: Engine, *, upgrade_allowed: bool, lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
) -> None:
    """Make sure the database is at the newest revision, upgrading it if allowed.

    Raises ``A2Error(SCHEMA_MISMATCH)`` when it is not and cannot be.
    ``lock_timeout_ms`` bounds the wait of reading the revision (SQLite's
    busy timeout, and its switch to WAL).
    """
    with engine.connect() as connection:
        ensure_schema_on(
            connection, upgrade_allowed=upgrade_allowed, lock_timeout_ms=lock_timeout_ms
        )


def ensure_schema_on(
    connection: Connection, *, upgrade_allowed: bool, lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
) -> None:
    """``ensure_schema`` on one connection outside a transaction (the async store's way in)."""
    head = head_revision()
    with _transaction(connection, read_only=True, busy_timeout_ms=lock_timeout_ms):
        found = current_revision(connection)
        seed_tables = found is None and _has_a2_tables(connection)
    if found == head:
        return
    if found is not None and found not in known_revisions():
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"{shown_url(connection)} is at revision {found!r}, which this version of a2sql "
            "does not know "
            f"(it needs {head!r}); upgrade a2sql, or move the database with "
            f"`a2sql migrate --revision {head}` using the a2sql that wrote it",
        )
    if not upgrade_allowed:
        # Checking only writes nothing: a seed store's file is adopted (stamped) by
        # the upgrade, which also brings it to the newest revision.
        seed_files = backend_of(connection).adopts_seed_databases
        if found is not None:
            shown = repr(found)
        elif not seed_tables:
            shown = "none (no a2sql schema)"
        else:
            with _transaction(connection, read_only=True):
                _refuse_recorded_elsewhere(connection)
                if seed_files:
                    _refuse_unlike_the_baseline(connection)
            shown = (
                "none (tables of the seed store, not yet adopted)"
                if seed_files
                else "none (a2sql's tables, without an a2sql revision)"
            )
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"{shown_url(connection)}: the schema is at revision {shown}, a2sql needs "
            f"{head!r}: {upgrade_hint(connection)}",
        )
    found = _move(connection, "head")
    if found != head:
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"{shown_url(connection)}: the schema is at revision {found!r}, a2sql needs "
            f"{head!r}: {upgrade_hint(connection)}",
        )


def _has_a2_tables(connection: Connection) -> bool:
    present = set(inspect(connection).get_table_names())
    return bool(present & set(TABLE_NAMES))


_APP_VERSION = table_clause(APP_VERSION_TABLE, column("version_num"))


def _refuse_recorded_elsewhere(connection: Connection) -> None:
    """SCHEMA_MISMATCH saying how to recover, when a2sql's tables carry no a2sql revision
    because an application's Alembic ran a2sql's migrations as its own (a2sql's
    versions in its ``version_locations``) and recorded them in its version table."""
    if not inspect(connection).has_table(APP_VERSION_TABLE):
        return
    recorded = [row[0] for row in connection.execute(select(_APP_VERSION.c.version_num))]
    ours = [revision for revision in recorded if revision in known_revisions()]
    if not ours:
        return
    url = shown_url(connection)
    raise A2Error(
        ErrorCode.SCHEMA_MISMATCH,
        f"{url}: a2sql's tables are at revision {ours[0]!r}, recorded in {APP_VERSION_TABLE} "
        "(your application's Alembic history ran a2sql's migrations as its own: a2sql's "
        f"versions are in its version_locations), while a2sql keeps its revision in "
        f"{VERSION_TABLE}. To recover: take a2sql's versions out of version_locations, "
        f"remove {ours[0]!r} from {APP_VERSION_TABLE} (`alembic stamp --purge <your head>`), "
        f"then run `{command_line('a2sql', 'stamp', ours[0], '--url', url)}`; "
        "keep a2sql's schema coming up "
        "from your env.py with `a2sql.migrate.upgrade(connection)`",
    )


def _adopt_seed_database(connection: Connection) -> None:
    """Stamp a SQLite file written by the seed's store as the baseline, if its tables match."""
    if current_revision(connection) is None and _has_a2_tables(connection):
        _refuse_recorded_elsewhere(connection)
    if not backend_of(connection).adopts_seed_databases:
        if current_revision(connection) is None and _has_a2_tables(connection):
            url = shown_url(connection)
            raise A2Error(
                ErrorCode.SCHEMA_MISMATCH,
                f"{url}: a2sql's tables exist but carry no a2sql revision ({VERSION_TABLE} "
                "is missing or empty). If a2sql's migrations made them, record the revision "
                f"they are at with `{command_line('a2sql', 'stamp', 'REVISION', '--url', url)}`",
            )
        return
    if current_revision(connection) is not None or not _has_a2_tables(connection):
        return
    _refuse_unlike_the_baseline(connection)
    stamp(connection, BASELINE)


def _refuse_unlike_the_baseline(connection: Connection) -> None:
    """SCHEMA_MISMATCH naming the difference, unless the a2 tables are the baseline's."""
    found = sqlite_schema_signature(connection)
    expected = baseline_sqlite_signature()
    if found != expected:
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            "the database has a2sql tables without an a2sql revision, and they differ from "
            f"the baseline: {describe_difference(expected, found)}",
        )


# --- SQLite schema signatures: what "the same tables" means -----------------


def _normalize_sql(fragment: str) -> str:
    return re.sub(r"\s+", " ", fragment.strip()).lower()


def _pragma(connection: Connection, name: str, argument: str) -> Sequence[Any]:
    """The rows of SQLite's ``pragma name(argument)``.

    Through its table-valued function, with ``argument`` bound: a table or
    index name of a database a2sql did not create may need quoting
    (a space, a quote, a dash), and a bound value needs none.
    """
    return connection.exec_driver_sql(f"select * from pragma_{name}(?)", (argument,)).all()


def sqlite_schema_signature(connection: Connection) -> dict[str, Any]:
    """Every a2 table's columns, STRICT flag and indexes, comparable across databases."""
    signature: dict[str, Any] = {}
    strict = {
        row[1]: bool(row[5]) for row in connection.exec_driver_sql("pragma table_list").fetchall()
    }
    for table in TABLE_NAMES:
        if table not in strict:
            continue
        columns = [
            (name, (decl or "").lower(), bool(notnull), default, pk)
            for _cid, name, decl, notnull, default, pk in _pragma(connection, "table_info", table)
        ]
        indexes: dict[str, Any] = {}
        for _seq, index_name, unique, origin, _partial in _pragma(connection, "index_list", table):
            if origin == "pk":
                continue
            index_columns = [row[2] for row in _pragma(connection, "index_info", index_name)]
            sql = connection.exec_driver_sql(
                "select sql from sqlite_master where type = 'index' and name = ?", (index_name,)
            ).scalar_one()
            match = re.search(r"\bwhere\b(.*)$", sql or "", re.IGNORECASE | re.DOTALL)
            where = _normalize_sql(match.group(1)) if match else None
            indexes[index_name] = (index_columns, bool(unique), where)
        signature[table] = {"columns": columns, "strict": strict[table], "indexes": indexes}
    return signature


@cache
def baseline_sqlite_signature() -> dict[str, Any]:
    """The signature of the baseline revision, built once in a memory database."""
    engine = create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.begin() as connection:
            lock_for_migration(connection)
            command.upgrade(alembic_config(connection), BASELINE)
            return sqlite_schema_signature(connection)
    finally:
        engine.dispose()


def describe_difference(expected: dict[str, Any], found: dict[str, Any]) -> str:
    for table in TABLE_NAMES:
        want, have = expected.get(table), found.get(table)
        if want == have:
            continue
        if have is None:
            return f"table {table} is missing"
        if want is None:
            return f"table {table} is unexpected"
        for key in ("strict", "columns", "indexes"):
            if want[key] != have[key]:
                return (
                    f"table {table} differs in {key}: expected {want[key]!r}, found {have[key]!r}"
                )
    return "no difference"
