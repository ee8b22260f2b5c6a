"""a2sql migrate: a check writes nothing and says when there is no database; a revision
Alembic cannot find is one line; two runs at once each say what they did."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from a2sql.backends.postgresql import MIGRATION_LOCK_KEY
from a2sql.execution.engines import ENV_URL
from tests.cli.conftest import Cli, Ran, run_a2sql


def test_check_without_a_database_writes_nothing(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """migrate --check where there is no database, the default .a2/dev.db included:
    no file, no folder, exit 3 (its own answer), one line; --json says so too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_URL, raising=False)
    default = "sqlite:///.a2/dev.db"
    plain = cli("migrate", "--check")
    assert (plain.code, plain.out) == (3, "")
    assert plain.err == (
        f"a2sql: database {default}: no such database file "
        f"(`a2sql migrate --url {default}` creates one)\n"
    )
    as_json = cli("migrate", "--check", "--json")
    assert as_json.code == 3
    assert as_json.out.strip() == (
        '{"url": "sqlite:///.a2/dev.db", "exists": false, "revision": null, '
        '"head": "0005_lean_indexes", "current": false}'
    )
    named = cli("migrate", "--check", "--url", f"sqlite:///{tmp_path / 'sub' / 'x.db'}")
    assert named.code == 3
    assert sorted(os.listdir(tmp_path)) == []
    # An existing file without a2sql's tables is behind (1), and stays as it was.
    sqlite3.connect(tmp_path / "empty.db").close()
    behind = cli("migrate", "--check", "--url", f"sqlite:///{tmp_path / 'empty.db'}")
    assert behind.code == 1 and behind.err.startswith("a2sql: behind: run `a2sql migrate")
    assert (tmp_path / "empty.db").stat().st_size == 0


@pytest.mark.parametrize(
    "revision", ["nonsense", "-1", "+1", "0001_baseline:0002_dispatch_age", "0009"]
)
def test_a_revision_alembic_cannot_find_is_one_line(
    cli: Cli, tmp_path: Path, revision: str
) -> None:
    """--revision that is none of a2sql's: exit 2, one line naming the revisions there
    are, and no database file made for it."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    runs = [["migrate", "--revision", revision]]
    if revision in ("nonsense", "0009"):  # --sql takes a range and relative steps too
        runs.append(["migrate", "--sql", "--revision", revision])
    for args in runs:
        ran = cli(*args, "--url", url)
        assert ran.code == 2, (args, ran.err)
        assert ran.out == ""
        [line] = ran.err.strip().splitlines()
        assert line.startswith(f"a2sql: INVALID_ARGUMENT: revision {revision!r}: "), line
        assert line.endswith(
            "a2sql knows 0001_baseline, 0002_dispatch_age, 0003_retired_attempts,"
            " 0004_time_and_control, 0005_lean_indexes, head and base"
        )
    assert not (tmp_path / "new.db").exists()


def test_a_revision_as_a_process_is_one_line(tmp_path: Path) -> None:
    """The same as a user runs it: no traceback."""
    ran = run_a2sql("migrate", "--revision", "nonsense", "--url", f"sqlite:///{tmp_path / 'n.db'}")
    assert ran.code == 2 and len(ran.err.strip().splitlines()) == 1, ran.err


@contextmanager
def _migrations_held(url: str) -> Iterator[Callable[[int], bool]]:
    """Hold the lock a2sql's migrations take (SQLite's write lock, PostgreSQL's advisory
    lock); yields ``waiting(n)``: whether ``n`` others wait for it (as far as can be seen)."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("pragma journal_mode = wal")
        holder.execute("begin immediate")
        try:
            yield lambda _n: True  # SQLite shows no waiters: the caller's pause must do
        finally:
            holder.execute("rollback")
            holder.close()
        return
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(text("select pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()

            def waiting(n: int) -> bool:
                with engine.connect() as other:
                    found = other.execute(
                        text(
                            "select count(*) from pg_locks where locktype = 'advisory' "
                            "and not granted and objid = :low"
                        ),
                        {"low": MIGRATION_LOCK_KEY & 0xFFFF_FFFF},
                    ).scalar_one()
                return int(found) >= n

            try:
                yield waiting
            finally:
                connection.execute(
                    text("select pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY}
                )
                connection.commit()
    finally:
        engine.dispose()


def test_two_migrations_at_once_each_say_what_they_did(url: str, tmp_path: Path) -> None:
    """Two `a2sql migrate` on one empty database at once: one brings it from empty to
    the head, the other finds it already there, and says so."""
    if url.startswith("sqlite"):
        sqlite3.connect(url.removeprefix("sqlite:///")).close()
    with _migrations_held(url) as waiting:
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "a2sql.cli", "migrate", "--url", url],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 20
        while not waiting(2) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(4)  # both started and waiting for the lock (SQLite shows no waiters)
    ran = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        ran.append(Ran(process.returncode, out, err))
    assert [r.code for r in ran] == [0, 0], [r.err for r in ran]
    said = sorted(r.out.strip().removeprefix(f"{url}: ") for r in ran)
    assert said == ["already at 0005_lean_indexes", "empty -> 0005_lean_indexes"], ran
