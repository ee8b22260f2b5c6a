"""Programmatic Alembic: the schema's revision, upgrades, and the check on open."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, inspect, text
from sqlalchemy.pool import StaticPool

from a2sql.begin import begin_own
from a2sql.errors import A2Error, ErrorCode
from a2sql.schema import TABLE_NAMES

VERSION_TABLE = "a2sql_alembic_version"
BASELINE = "0001_baseline"
# Key of the PostgreSQL advisory lock that serializes migrations
# (the ASCII bytes of "a2sqlmig").
MIGRATION_LOCK_KEY = 0x6132_7371_6C6D_6967
UPGRADE_HINT = "run `a2sql migrate` (or `alembic upgrade head`)"


def script_location() -> Path:
    """The folder of the Alembic scripts shipped with the package."""
    return Path(str(resources.files("a2sql._migrations")))


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
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


def current_revision(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def lock_for_migration(connection: Connection) -> None:
    """Serialize concurrent migrations: the first statement of a migrating transaction.

    SQLite: the database's write lock (BEGIN IMMEDIATE); PostgreSQL: an
    advisory lock of a2sql's migrations.
    """
    if connection.dialect.name == "postgresql":
        connection.execute(text("select pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    else:
        begin_own(connection, read_only=False)


@contextmanager
def _transaction(connection: Connection, *, read_only: bool) -> Iterator[Connection]:
    with connection.begin():
        if read_only:
            begin_own(connection, read_only=True)
        yield connection


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema to ``revision`` (default: the newest) in one locked transaction."""
    move_to(engine, revision)


def database_revision(engine: Engine) -> str | None:
    """The revision the database is at, read without changing anything."""
    with engine.connect() as connection, _transaction(connection, read_only=True):
        return current_revision(connection)


def move_to(engine: Engine, revision: str = "head") -> str | None:
    """Upgrade, or downgrade when ``revision`` is below the current one; return where it ends."""
    with engine.connect() as connection:
        return _move(connection, revision)


def _move(connection: Connection, revision: str) -> str | None:
    script = ScriptDirectory.from_config(alembic_config())
    target = script.get_revision(revision)
    with _transaction(connection, read_only=False):
        lock_for_migration(connection)
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
        return current_revision(connection)


def stamp(connection: Connection, revision: str) -> None:
    command.stamp(alembic_config(connection), revision)


def ensure_schema(engine: Engine, *, upgrade_allowed: bool) -> None:
    """Make sure the database is at the newest revision, upgrading it if allowed.

    Raises ``A2Error(SCHEMA_MISMATCH)`` when it is not and cannot be.
    """
    with engine.connect() as connection:
        ensure_schema_on(connection, upgrade_allowed=upgrade_allowed)


def ensure_schema_on(connection: Connection, *, upgrade_allowed: bool) -> None:
    """``ensure_schema`` on one connection outside a transaction (the async store's way in)."""
    head = head_revision()
    with _transaction(connection, read_only=True):
        found = current_revision(connection)
        seed_tables = found is None and _has_a2_tables(connection)
    if found == head:
        return
    if found is not None and found not in known_revisions():
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"the database is at revision {found!r}, which this version of a2sql does not know "
            f"(it needs {head!r}); upgrade a2sql, or move the database with "
            f"`a2sql migrate --revision {head}` using the a2sql that wrote it",
        )
    if not upgrade_allowed:
        # Checking only writes nothing: a seed store's file is adopted (stamped) by
        # the upgrade, which also brings it to the newest revision.
        if found is not None:
            shown = repr(found)
        elif seed_tables and connection.dialect.name == "sqlite":
            with _transaction(connection, read_only=True):
                _refuse_unlike_the_baseline(connection)
            shown = "none (tables of the seed store, not yet adopted)"
        else:
            shown = "none (no a2sql schema)"
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"the database schema is at revision {shown}, a2sql needs {head!r}: {UPGRADE_HINT}",
        )
    found = _move(connection, "head")
    if found != head:
        raise A2Error(
            ErrorCode.SCHEMA_MISMATCH,
            f"the database schema is at revision {found!r}, a2sql needs {head!r}: {UPGRADE_HINT}",
        )


def _has_a2_tables(connection: Connection) -> bool:
    present = set(inspect(connection).get_table_names())
    return bool(present & set(TABLE_NAMES))


def _adopt_seed_database(connection: Connection) -> None:
    """Stamp a SQLite file written by the seed's store as the baseline, if its tables match."""
    if connection.dialect.name != "sqlite":
        if current_revision(connection) is None and _has_a2_tables(connection):
            raise A2Error(
                ErrorCode.SCHEMA_MISMATCH,
                "a2sql tables exist but carry no a2sql revision "
                f"(no {VERSION_TABLE} table); they were not created by a2sql's migrations",
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
            for _cid, name, decl, notnull, default, pk in connection.exec_driver_sql(
                f"pragma table_info({table})"
            )
        ]
        indexes: dict[str, Any] = {}
        for _seq, index_name, unique, origin, _partial in connection.exec_driver_sql(
            f"pragma index_list({table})"
        ):
            if origin == "pk":
                continue
            index_columns = [
                row[2] for row in connection.exec_driver_sql(f"pragma index_info({index_name})")
            ]
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
