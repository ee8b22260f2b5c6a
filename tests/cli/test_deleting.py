"""delete and prune ask on a terminal and need --yes elsewhere; --dry-run deletes
nothing; an age too long is one line; copy refuses one file under two names; and none
of them touches the application's own tables."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

import a2sql
from a2sql import NewEvent, Store
from tests.cli.conftest import Cli, run_a2sql


def test_off_a_terminal_deleting_needs_yes(populated: tuple[Store, str]) -> None:
    """delete and prune from a script without --yes: one line saying to pass it, exit 2,
    nothing deleted; --dry-run needs no --yes and deletes nothing."""
    store, url = populated
    for args in (["delete", "order-1"], ["prune", "--older-than", "3d"]):
        ran = run_a2sql(*args, "--url", url)
        assert (ran.code, ran.out) == (2, ""), ran.err
        [line] = ran.err.strip().splitlines()
        assert line.startswith(f"a2sql: {args[0]} deletes and asks first, but stdin is not")
        assert "pass --yes" in line
    dry = run_a2sql("delete", "order-1", "--dry-run", "--url", url)
    assert dry.code == 0 and dry.out.startswith("would delete session order-1: 7 events")
    pruned = run_a2sql("prune", "--older-than", "3d", "--dry-run", "--url", url, "--json")
    assert pruned.json()["sessions"] == 1
    assert len(store.read("order-1")) == 7 and len(store.read("old")) == 1
    assert run_a2sql("delete", "order-1", "--yes", "--url", url).code == 0
    assert store.read("order-1") == []


def _on_a_terminal(args: list[str], answer: str) -> tuple[int, str]:
    """Run the command with a pseudo-terminal for stdin, stdout and stderr; answer its
    question with ``answer``; its exit status and all it printed."""
    main, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "a2sql.cli", *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    os.close(child)
    shown = b""
    answered = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            if not answered and b"[y/N]" in shown:
                os.write(main, answer.encode() + b"\n")
                answered = True
            if process.poll() is not None and not ready:
                break
        return process.wait(timeout=30), shown.decode(errors="replace").replace("\r\n", "\n")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(main)


def test_on_a_terminal_delete_shows_what_goes_and_asks(populated: tuple[Store, str]) -> None:
    """delete on a terminal: what the session holds, then [y/N]; no keeps it (exit 1),
    yes deletes it."""
    store, url = populated
    code, shown = _on_a_terminal(["delete", "order-1", "--url", url], "n")
    assert code == 1, shown
    assert "delete session order-1: 7 events (4 pending, 1 claimed, 1 dead letter), " in shown
    assert "1 snapshot? [y/N]" in shown and "a2sql: nothing deleted" in shown
    assert len(store.read("order-1")) == 7
    code, shown = _on_a_terminal(["delete", "order-1", "--url", url], "y")
    assert code == 0, shown
    assert "deleted order-1: 7 events, 1 snapshot" in shown
    assert store.read("order-1") == []


def test_on_a_terminal_prune_shows_what_goes_and_asks(populated: tuple[Store, str]) -> None:
    """prune on a terminal: how many sessions, events and snapshots, then [y/N]."""
    store, url = populated
    code, shown = _on_a_terminal(["prune", "--older-than", "3d", "--url", url], "n")
    assert code == 1, shown
    assert "delete 1 session (1 event, 0 snapshots) settled before " in shown
    assert len(store.read("old")) == 1
    code, shown = _on_a_terminal(["prune", "--older-than", "3d", "--url", url], "y")
    assert code == 0, shown
    assert "deleted 1 session (1 event, 0 snapshots)" in shown
    assert store.read("old") == []


@pytest.mark.parametrize("age", ["99999999999d", "1000000d", "999999999w"])
def test_an_age_too_long_is_one_line(cli: Cli, tmp_path: Path, age: str) -> None:
    """prune --older-than an age before the year 1 or past timedelta: exit 2, one line."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    a2sql.create_store(url).close()
    for args in (["--dry-run"], ["--yes"]):
        ran = cli("prune", "--older-than", age, *args, "--url", url)
        assert ran.code == 2 and ran.out == ""
        assert ran.err == (
            f"a2sql: Invalid value for '--older-than': {age!r} is too long: it reaches back "
            "before the year 1 (see `a2sql prune --help`)\n"
        )


def test_copy_refuses_one_sqlite_file_under_two_names(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """x.db, ./x.db, its absolute path, a symbolic link and a hard link to it: the same
    database, refused before anything is read or written."""
    monkeypatch.chdir(tmp_path)
    with a2sql.create_store("sqlite:///x.db") as store:
        store.append("s", [NewEvent("e")])
    (tmp_path / "link.db").symlink_to("x.db")
    os.link(tmp_path / "x.db", tmp_path / "hard.db")
    for destination in ("./x.db", str(tmp_path / "x.db"), "link.db", "hard.db", "sub/../x.db"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        ran = cli("copy", "sqlite:///x.db", f"sqlite:///{destination}")
        assert ran.code == 2, (destination, ran.err)
        assert ran.err == "a2sql: the source and the destination are the same database\n"
    with a2sql.create_store("sqlite:///x.db") as store:
        assert [e.type for e in store.read("s")] == ["e"]


def _app_rows(url: str) -> list[tuple[object, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(text("select * from orders order by id")))
    finally:
        engine.dispose()


def _with_app_table(url: str) -> None:
    """The application's own table beside a2sql's, with rows (one of them named like a
    session, to be sure nothing deletes by id across tables)."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("create table orders (id varchar(40) primary key, n int)"))
            connection.execute(
                text("insert into orders values ('old', 1), ('order-1', 2), ('x', 3)")
            )
    finally:
        engine.dispose()


def test_delete_prune_and_copy_leave_the_applications_tables_alone(
    cli: Cli, populated: tuple[Store, str], tmp_path: Path
) -> None:
    """Only a2_events, a2_snapshots and a2_presence are touched: the application's own
    table in the same database keeps every row, at the source and the destination."""
    store, url = populated
    _with_app_table(url)
    before = _app_rows(url)
    assert cli("delete", "order-17", "--yes", "--url", url).code == 0
    assert cli("prune", "--older-than", "3d", "--yes", "--url", url).code == 0
    destination = f"sqlite:///{tmp_path / 'destination.db'}"
    a2sql.create_store(destination).close()
    _with_app_table(destination)
    copied = cli("copy", url, destination, "--json").json()
    assert copied["copied"] == 1
    assert _app_rows(url) == before and _app_rows(destination) == before
    assert [s.session_id for s in store.inspect.list_sessions().sessions] == ["order-1"]
