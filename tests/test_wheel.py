"""The wheel ships the Alembic scripts: installed alone, it migrates a new database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAD = "0003_retired_attempts"


def test_wheel_contains_migrations_and_migrates_a_new_database(tmp_path: Path) -> None:
    """The wheel ships env.py and every revision script; its `a2sql migrate`, run with
    a2sql from the wheel alone, takes a new SQLite file to head (0003_retired_attempts)."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    [wheel] = dist.glob("a2sql-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "a2sql/_migrations/env.py" in names
    assert "a2sql/_migrations/versions/0001_baseline.py" in names
    assert f"a2sql/_migrations/versions/{HEAD}.py" in names
    # Every script of the source tree, so that a revision added later is shipped too.
    for script in (ROOT / "migrations" / "versions").glob("*.py"):
        assert f"a2sql/_migrations/versions/{script.name}" in names, script.name
    assert "a2sql/py.typed" in names

    # Installing a pure wheel is unpacking it onto the path; dependencies come
    # from this environment, a2sql only from the wheel.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("A2SQL_DATABASE_URL", None)
    where = subprocess.run(
        [sys.executable, "-c", "import a2sql; print(a2sql.__file__)"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert where.startswith(str(site)), where

    db = work / "new.db"
    result = subprocess.run(
        [sys.executable, "-m", "a2sql.cli", "migrate", "--url", f"sqlite:///{db}"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert f"empty -> {HEAD}" in result.stdout
    with sqlite3.connect(db) as connection:
        names_in_db = {row[0] for row in connection.execute("select name from sqlite_master")}
        version = connection.execute("select version_num from a2sql_alembic_version").fetchall()
    assert {"a2_events", "a2_snapshots", "a2_presence", "a2_events_dispatch_age"} <= names_in_db
    assert version == [(HEAD,)]
