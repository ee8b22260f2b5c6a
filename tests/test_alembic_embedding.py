"""a2sql's migrations inside an application's own Alembic (issue 14): env.py calls
``a2sql.migrate.upgrade(connection)``, autogenerate and ``alembic check`` leave a2sql's
tables alone; the version_locations mistake is named and ``a2sql stamp`` recovers it;
``a2sql migrate --sql`` applied by hand gives a database a2sql accepts."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, make_url, text
from sqlalchemy.pool import NullPool

import a2sql
from a2sql import A2Error, ErrorCode, migrate
from a2sql.core.escaping import command_line

ALEMBIC = str(Path(sys.executable).with_name("alembic"))
MIGRATIONS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "migrations.md"

ENV_PY = """
import os

from alembic import context
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from sqlalchemy.pool import NullPool

import a2sql.migrate

metadata = MetaData()
Table("orders", metadata, Column("id", Integer, primary_key=True), Column("status", String(20)))

engine = create_engine(os.environ["DB_URL"], poolclass=NullPool)
with engine.connect() as connection:
    with connection.begin():
        # a2sql's schema first, on the same connection and in the same transaction.
        a2sql.migrate.upgrade(connection)
        context.configure(
            connection=connection,
            target_metadata=metadata,
            include_name=a2sql.migrate.include_name,
        )
        context.run_migrations()
"""

APP_REVISION = """
from alembic import op
import sqlalchemy as sa

revision = "app_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "orders", sa.Column("id", sa.Integer, primary_key=True), sa.Column("status", sa.String(20))
    )


def downgrade():
    op.drop_table("orders")
"""


def _driver_url(url: str) -> str:
    return a2sql.execution.engines.resolve_url(url).render_as_string(hide_password=False)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """An application folder with its own Alembic environment and one table."""
    folder = tmp_path / "app"
    (folder / "alembic" / "versions").mkdir(parents=True)
    (folder / "alembic.ini").write_text("[alembic]\nscript_location = alembic\n")
    (folder / "alembic" / "env.py").write_text(ENV_PY)
    (folder / "alembic" / "script.py.mako").write_text("")
    (folder / "alembic" / "versions" / "app_0001.py").write_text(APP_REVISION)
    return folder


def _alembic(app: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ALEMBIC, *args],
        cwd=app,
        capture_output=True,
        text=True,
        env={**os.environ, "DB_URL": _driver_url(url)},
        timeout=120,
        check=False,
    )


def _version(url: str, table: str) -> list[str]:
    engine = create_engine(_driver_url(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table(table):
                return []
            return [row[0] for row in connection.execute(text(f"select version_num from {table}"))]
    finally:
        engine.dispose()


def test_the_apps_alembic_brings_a2sql_up_and_leaves_it_alone(app: Path, url: str) -> None:
    """`alembic upgrade head` from empty: both version tables at their heads, the store
    opens without migrating, `alembic check` is clean, the app's downgrade keeps a2sql."""
    upgraded = _alembic(app, url, "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    assert _version(url, "alembic_version") == ["app_0001"]
    assert _version(url, migrate.VERSION_TABLE) == [migrate.head_revision()]
    with a2sql.create_store(url, migrate=False) as store:
        store.append("s", [a2sql.NewEvent("e", id="e1")])
    checked = _alembic(app, url, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr
    downgraded = _alembic(app, url, "downgrade", "base")
    assert downgraded.returncode == 0, downgraded.stderr
    assert _version(url, "alembic_version") == []
    with a2sql.create_store(url, migrate=False) as store:
        assert [e.id for e in store.read("s")] == ["e1"]


MODELS_PY = """
from sqlalchemy import Column, Integer, MetaData, String, Table

metadata = MetaData()
Table("orders", metadata, Column("id", Integer, primary_key=True), Column("status", String(20)))
"""

# alembic.ini as `alembic init` leaves it, in short: the scripts, the app on the path,
# and the logging sections that env.py's fileConfig reads.
APP_ALEMBIC_INI = """
[alembic]
script_location = %(here)s/alembic
prepend_sys_path = .

[loggers]
keys = root,alembic

[handlers]
keys = console

[formatters]
keys = generic

[logger_root]
level = WARNING
handlers = console

[logger_alembic]
level = INFO
handlers =
qualname = alembic

[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic

[formatter_generic]
format = %(levelname)-5.5s [%(name)s] %(message)s
"""


def _documented_env_py() -> str:
    match = re.search(
        r"A whole `env.py`:\n\n```python\n(.*?)```", MIGRATIONS_PAGE.read_text(), re.S
    )
    assert match, "docs/migrations.md shows no whole env.py"
    return match.group(1)


def documented_checkout(app: Path) -> Path:
    """An application folder as a fresh checkout has it, with docs/migrations.md's whole
    env.py, its models and one revision of its own."""
    (app / "alembic" / "versions").mkdir(parents=True)
    (app / "myapp").mkdir()
    (app / "myapp" / "__init__.py").write_text("")
    (app / "myapp" / "models.py").write_text(MODELS_PY)
    (app / "alembic.ini").write_text(APP_ALEMBIC_INI)
    (app / "alembic" / "env.py").write_text(_documented_env_py())
    (app / "alembic" / "script.py.mako").write_text("")
    (app / "alembic" / "versions" / "app_0001.py").write_text(APP_REVISION)
    return app


def run_alembic(app: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``alembic ARGS`` in the application folder ``app``, with ``env`` as its environment."""
    return subprocess.run(
        [ALEMBIC, *args], cwd=app, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_documented_env_py_runs_on_a_fresh_checkout(url: str, tmp_path: Path) -> None:
    """docs/migrations.md's whole env.py, in an application folder as a fresh checkout has
    it: `alembic upgrade head` brings a2sql and the app to their heads on the database
    ``create_store()`` opens there. SQLite: no A2SQL_DATABASE_URL and no .a2/ yet (the
    default sqlite:///.a2/dev.db is made); PostgreSQL: A2SQL_DATABASE_URL."""
    app = documented_checkout(tmp_path / "checkout")
    env = {k: v for k, v in os.environ.items() if k != "A2SQL_DATABASE_URL"}
    if make_url(url).get_backend_name() == "sqlite":
        url = f"sqlite:///{app / '.a2' / 'dev.db'}"
    else:
        env["A2SQL_DATABASE_URL"] = url
    upgraded = run_alembic(app, env, "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stderr
    assert "Running upgrade  -> app_0001" in upgraded.stderr
    assert _version(url, "alembic_version") == ["app_0001"]
    assert _version(url, migrate.VERSION_TABLE) == [migrate.head_revision()]
    opened = subprocess.run(
        [sys.executable, "-c", "import a2sql; a2sql.create_store(migrate=False).close()"],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert opened.returncode == 0, opened.stderr


def test_include_name_and_include_object_skip_a2sqls_tables_only() -> None:
    """The autogenerate filters: False for a2sql's tables and their parts, True otherwise."""
    assert not migrate.include_name("a2_events", "table", {})
    assert not migrate.include_name("a2sql_alembic_version", "table", {})
    assert not migrate.include_name("a2_events_event_id", "index", {"table_name": "a2_events"})
    assert migrate.include_name("orders", "table", {})
    assert migrate.include_name("orders_status", "index", {"table_name": "orders"})
    events = a2sql.sql.schema.events
    assert not migrate.include_object(events, "a2_events", "table", False, None)
    [index] = [i for i in events.indexes if i.name == "a2_events_event_id"]
    assert not migrate.include_object(index, index.name, "index", False, None)


def _as_if_the_app_had_run_a2sqls_versions(url: str) -> None:
    """The state that a2sql's versions in the app's version_locations leave: a2sql's
    tables, their revision in alembic_version, no a2sql_alembic_version."""
    a2sql.create_store(url, migrate=True).close()
    engine = create_engine(_driver_url(url), poolclass=NullPool)
    with engine.begin() as connection:
        connection.execute(text(f"drop table {migrate.VERSION_TABLE}"))
        connection.execute(text("create table alembic_version (version_num varchar(32))"))
        connection.execute(
            text(f"insert into alembic_version values ('{migrate.head_revision()}')")
        )
    engine.dispose()


def test_the_version_locations_mistake_is_named_and_stamp_recovers(url: str) -> None:
    """create_store and `a2sql migrate` say what happened and how to recover; after the
    app's row is removed, `a2sql stamp` makes the store open."""
    _as_if_the_app_had_run_a2sqls_versions(url)
    shown = make_url(_driver_url(url)).render_as_string(hide_password=True)
    head = migrate.head_revision()
    for opening in (False, True):
        with pytest.raises(A2Error) as raised:
            a2sql.create_store(url, migrate=opening)
        assert raised.value.code is ErrorCode.SCHEMA_MISMATCH
        message = str(raised.value)
        assert "recorded in alembic_version" in message and "version_locations" in message
        assert f"`{command_line('a2sql', 'stamp', head, '--url', shown)}`" in message
    from a2sql.cli import main

    assert main(["stamp", head, "--url", url]) == 0
    with a2sql.create_store(url, migrate=False):
        pass


def test_migrate_sql_applied_by_hand_gives_a_database_a2sql_accepts(
    url: str, tmp_path: Path
) -> None:
    """`a2sql migrate --sql` connects to nothing; its output, applied by psql -f (or
    sqlite3), gives a database that create_store(migrate=False) opens."""
    done = subprocess.run(
        [sys.executable, "-m", "a2sql.cli", "migrate", "--sql", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    script = done.stdout
    assert "CREATE TABLE a2_events" in script and migrate.head_revision() in script
    resolved = make_url(_driver_url(url))
    if resolved.get_backend_name() == "sqlite":
        assert not Path(str(resolved.database)).exists()
        with sqlite3.connect(str(resolved.database)) as connection:
            connection.executescript(script)
    else:
        sql_file = tmp_path / "a2sql.sql"
        sql_file.write_text(script)
        options = str(resolved.query.get("options", ""))
        subprocess.run(
            [
                "psql",
                "-v",
                "ON_ERROR_STOP=1",
                "-q",
                "-h",
                str(resolved.host),
                "-p",
                str(resolved.port or 5432),
                "-U",
                str(resolved.username),
                "-d",
                str(resolved.database),
                "-f",
                str(sql_file),
            ],
            env={**os.environ, "PGOPTIONS": options},
            check=True,
            capture_output=True,
            timeout=60,
        )
    with a2sql.create_store(url, migrate=False) as store:
        store.append("s", [a2sql.NewEvent("e")])
        assert len(store.read("s")) == 1


def test_opening_a_store_logs_nothing_at_info(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Only a migration logs at INFO: opening a database at the newest revision does not."""
    a2sql.create_store(url, migrate=True).close()
    with caplog.at_level(logging.INFO):
        a2sql.create_store(url, migrate=True).close()
        a2sql.create_store(url, migrate=False).close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []


def test_an_app_logging_at_info_sees_nothing_from_importing_a2sql_and_opening(
    url: str,
) -> None:
    """Logging configured at INFO before ``import a2sql``: neither the import (Alembic logs
    its plugins at INFO when imported) nor opening a migrated store prints a line."""
    a2sql.create_store(url, migrate=True).close()
    program = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "import a2sql\n"
        f"a2sql.create_store({url!r}).close()\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stderr == ""


def test_an_empty_version_table_says_how_to_record_the_revision(postgres_url: str) -> None:
    """PostgreSQL, a2sql's tables with an empty version table (after `a2sql stamp base`):
    migrating refuses, naming the database and `a2sql stamp REVISION --url URL`. (On
    SQLite such tables are checked against the baseline and adopted, as a seed file is.)"""
    url = postgres_url
    a2sql.create_store(url, migrate=True).close()
    from a2sql.cli import main

    assert main(["stamp", "base", "--url", url]) == 0
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, migrate=True)
    shown = make_url(_driver_url(url)).render_as_string(hide_password=True)
    assert f"{migrate.VERSION_TABLE} is missing or empty" in str(raised.value)
    assert f"`{command_line('a2sql', 'stamp', 'REVISION', '--url', shown)}`" in str(raised.value)


def test_schema_mismatch_names_the_database_and_the_exact_command(url: str) -> None:
    """SCHEMA_MISMATCH: the URL (password hidden) and `a2sql migrate --url URL`."""
    if make_url(url).get_backend_name() == "sqlite":
        Path(str(make_url(url).database)).touch()
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, migrate=False)
    shown = make_url(_driver_url(url)).render_as_string(hide_password=True)
    assert str(raised.value).endswith(f"run `{command_line('a2sql', 'migrate', '--url', shown)}`")
    assert str(raised.value).startswith(f"SCHEMA_MISMATCH: {shown}: ")


ENV_PY = textwrap.dedent(ENV_PY)
APP_REVISION = textwrap.dedent(APP_REVISION)
MODELS_PY = textwrap.dedent(MODELS_PY)
