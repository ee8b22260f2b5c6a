"""Alembic environment for a2sql: `alembic upgrade head` and the store's own migrations."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from a2sql.backends import backend_of
from a2sql.execution.engines import build_engine, resolve_url
from a2sql.migrate import VERSION_TABLE, lock_for_migration
from a2sql.sql.schema import metadata

config = context.config

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    """a2sql's own (`a2sql migrate --sql`), else `-x url=...`, else A2SQL_DATABASE_URL,
    else sqlalchemy.url from the ini."""
    given = config.attributes.get("url")
    if given is not None:
        return str(given.render_as_string(hide_password=False))
    x_url = context.get_x_argument(as_dictionary=True).get("url")
    if x_url:
        return x_url
    from os import environ

    return environ.get("A2SQL_DATABASE_URL") or config.get_main_option("sqlalchemy.url") or ""


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        # Where an engine alters little in place (SQLite), revisions copy and move.
        render_as_batch=not backend_of(connection).alters_in_place,
    )


def run_migrations_offline() -> None:
    context.configure(
        url=resolve_url(_url()),
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        # Called by a2sql itself, inside a transaction it holds the lock of.
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = build_engine(resolve_url(_url()))
    try:
        with engine.begin() as connection:
            lock_for_migration(connection)
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
