"""Alembic owns the schema (SPEC §5): the command line and the programmatic path.

Every test runs on a SQLite file and on PostgreSQL; the `alembic` command is
the one installed beside the test interpreter, run from a temporary folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect, text

import a2sql
from a2sql import migrate
from a2sql.execution.engines import resolve_url

REPO = Path(__file__).resolve().parents[1]
ALEMBIC_INI = REPO / "alembic.ini"
ALEMBIC = Path(sys.executable).parent / "alembic"
VERSION_TABLE = "a2sql_alembic_version"
A2_TABLES = {"a2_events", "a2_snapshots", "a2_presence", "a2_retired_attempts"}
MIGRATABLE = ("sqlite_file", "postgres")


def run_alembic(
    *args: str, cwd: Path, url: str | None = None, env_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``alembic -c alembic.ini [-x url=URL] ARGS`` with a controlled environment."""
    env = {key: value for key, value in os.environ.items() if key != "A2SQL_DATABASE_URL"}
    if env_url is not None:
        env["A2SQL_DATABASE_URL"] = env_url
    command = [str(ALEMBIC), "-c", str(ALEMBIC_INI)]
    if url is not None:
        command += ["-x", f"url={url}"]
    return subprocess.run(
        [*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"alembic failed:\n{result.stdout}\n{result.stderr}"
    return result


def open_engine(url: str) -> Engine:
    return create_engine(resolve_url(url))


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def stamped(engine: Engine) -> list[str]:
    """The revisions recorded in a2sql's version table (empty if it has none)."""
    if VERSION_TABLE not in tables(engine):
        return []
    with engine.connect() as connection:
        rows = connection.execute(text(f"select version_num from {VERSION_TABLE}"))
        return [row[0] for row in rows]


@pytest.fixture(params=MIGRATABLE)
def migratable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on a SQLite file or on PostgreSQL."""
    if request.param == "sqlite_file":
        return f"sqlite:///{tmp_path / 'migrated.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The folder the `alembic` command runs in."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    return folder


def test_alembic_cli_upgrade_downgrade_upgrade_round_trips(
    migratable_url: str, workdir: Path
) -> None:
    """`alembic upgrade head`, `downgrade base`, `upgrade head` again all work (SPEC §5)."""
    engine = open_engine(migratable_url)
    try:
        head = migrate.head_revision()
        ok(run_alembic("upgrade", "head", cwd=workdir, url=migratable_url))
        assert tables(engine) >= A2_TABLES | {VERSION_TABLE}
        assert stamped(engine) == [head]

        ok(run_alembic("downgrade", "base", cwd=workdir, url=migratable_url))
        assert not tables(engine) & A2_TABLES
        assert stamped(engine) == []

        ok(run_alembic("upgrade", "head", cwd=workdir, url=migratable_url))
        assert tables(engine) >= A2_TABLES
        assert stamped(engine) == [head]
        current = ok(run_alembic("current", cwd=workdir, url=migratable_url))
        assert f"{head} (head)" in current.stdout
    finally:
        engine.dispose()


def test_programmatic_upgrade_downgrade_upgrade_round_trips(migratable_url: str) -> None:
    """a2sql.migrate.upgrade moves the schema to head, to base and back (SPEC §5)."""
    engine = open_engine(migratable_url)
    try:
        head = migrate.head_revision()
        migrate.upgrade(engine)
        assert tables(engine) >= A2_TABLES | {VERSION_TABLE}
        assert stamped(engine) == [head]

        migrate.upgrade(engine, "base")
        assert not tables(engine) & A2_TABLES
        assert stamped(engine) == []

        migrate.upgrade(engine)
        assert tables(engine) >= A2_TABLES
        assert stamped(engine) == [head]
    finally:
        engine.dispose()


def test_alembic_check_finds_no_difference_after_cli_upgrade(
    migratable_url: str, workdir: Path
) -> None:
    """`alembic check` finds no difference between the metadata and the migrations."""
    ok(run_alembic("upgrade", "head", cwd=workdir, url=migratable_url))
    result = ok(run_alembic("check", cwd=workdir, url=migratable_url))
    assert "No new upgrade operations detected" in result.stdout + result.stderr


def test_alembic_check_finds_no_difference_after_programmatic_upgrade(
    migratable_url: str, workdir: Path
) -> None:
    """The schema create_store(migrate=True) builds is the metadata, per `alembic check`."""
    a2sql.create_store(migratable_url, migrate=True).close()
    result = ok(run_alembic("check", cwd=workdir, url=migratable_url))
    assert "No new upgrade operations detected" in result.stdout + result.stderr


def test_alembic_check_fails_when_schema_is_behind(migratable_url: str, workdir: Path) -> None:
    """`alembic check` is a real check: on an unmigrated database it exits non-zero."""
    result = run_alembic("check", cwd=workdir, url=migratable_url)
    assert result.returncode != 0


def test_version_table_is_a2sql_alembic_version_beside_an_application_history(
    migratable_url: str, workdir: Path
) -> None:
    """a2sql records its revision in a2sql_alembic_version, leaving alembic_version alone."""
    engine = open_engine(migratable_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("create table alembic_version (version_num varchar(32))"))
            connection.execute(text("insert into alembic_version values ('app_rev_1')"))
        ok(run_alembic("upgrade", "head", cwd=workdir, url=migratable_url))
        assert stamped(engine) == [migrate.head_revision()]
        with engine.connect() as connection:
            app = connection.execute(text("select version_num from alembic_version")).all()
        assert [row[0] for row in app] == ["app_rev_1"]
    finally:
        engine.dispose()


def test_cli_migrated_database_opens_with_migrate_false(migratable_url: str, workdir: Path) -> None:
    """A database upgraded by `alembic upgrade head` is at the revision create_store needs."""
    ok(run_alembic("upgrade", "head", cwd=workdir, url=migratable_url))
    with a2sql.create_store(migratable_url, migrate=False) as store:
        store.append("s", [a2sql.NewEvent("t", 1, id="e1")])
        assert [event.id for event in store.read("s")] == ["e1"]


def test_store_migrated_database_is_at_head_for_alembic(migratable_url: str, workdir: Path) -> None:
    """A database upgraded by create_store(migrate=True) is at head for `alembic current`."""
    a2sql.create_store(migratable_url, migrate=True).close()
    current = ok(run_alembic("current", cwd=workdir, url=migratable_url))
    assert f"{migrate.head_revision()} (head)" in current.stdout


# --- Where env.py takes its URL from (SQLite files make it visible) --------------


def test_env_url_x_argument_beats_environment_variable(tmp_path: Path, workdir: Path) -> None:
    """`-x url=` wins over A2SQL_DATABASE_URL."""
    from_x, from_env = tmp_path / "x.db", tmp_path / "env.db"
    ok(
        run_alembic(
            "upgrade",
            "head",
            cwd=workdir,
            url=f"sqlite:///{from_x}",
            env_url=f"sqlite:///{from_env}",
        )
    )
    assert from_x.exists()
    assert not from_env.exists()
    assert not (workdir / ".a2").exists()


def test_env_url_environment_variable_beats_ini(tmp_path: Path, workdir: Path) -> None:
    """A2SQL_DATABASE_URL wins over sqlalchemy.url of alembic.ini."""
    from_env = tmp_path / "env.db"
    ok(run_alembic("upgrade", "head", cwd=workdir, env_url=f"sqlite:///{from_env}"))
    assert from_env.exists()
    assert not (workdir / ".a2").exists()


def test_env_url_falls_back_to_ini_default_dev_db(workdir: Path) -> None:
    """With neither, alembic.ini's sqlalchemy.url (.a2/dev.db, folder created) is used."""
    ok(run_alembic("upgrade", "head", cwd=workdir))
    dev_db = workdir / ".a2" / "dev.db"
    assert dev_db.exists()
    engine = open_engine(f"sqlite:///{dev_db}")
    try:
        assert tables(engine) >= A2_TABLES
        assert stamped(engine) == [migrate.head_revision()]
    finally:
        engine.dispose()
