"""Alembic environment of the example application.

`alembic upgrade head` brings a2sql's schema up first, on the same connection
and in the same transaction, then runs the application's own migrations.
a2sql keeps its revision in its own version table (a2sql_alembic_version);
`include_name` keeps autogenerate and `alembic check` off a2sql's tables.
"""

import os
from logging.config import fileConfig

from alembic import context
from models import metadata
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

import a2sql.migrate

if context.config.config_file_name is not None:
    fileConfig(context.config.config_file_name)

URL = os.environ.get("ORDERS_DATABASE_URL", "sqlite:///orders.db")

engine = create_engine(URL, poolclass=NullPool)
with engine.connect() as connection, connection.begin():
    a2sql.migrate.upgrade(connection)
    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_name=a2sql.migrate.include_name,
    )
    context.run_migrations()
