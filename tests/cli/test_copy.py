"""a2sql copy: SQLite to PostgreSQL and back, identical; interrupted and run again;
refusals (SPEC §6 Operations' tools)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import a2sql
from a2sql import NewEvent, Store
from a2sql.core.records import StoredEvent
from a2sql.testing import FakeClock
from tests.cli.conftest import Cli, run_a2sql


def build(store: Store, sessions: int, per: int) -> None:
    """Sessions of ``per`` events in two lanes and none, some claimed, failed with a delay,
    dead-lettered, completed with children, snapshotted; one transaction in all."""
    with store.begin() as connection:
        view = store.using(connection)
        for n in range(sessions):
            sid = f"s/{n:04}"
            view.append(
                sid,
                [
                    NewEvent(
                        "e", {"n": n, "k": k, "x": [1.5, "é", None]}, lane=("a", "b", None)[k % 3]
                    )
                    for k in range(per)
                ],
            )
            if n % 3:
                claim = view.claim_available(sid, holder=f"w{n % 4}", ttl_ms=60_000, limit=3)
                first = claim.events[0]
                if n % 7 == 0:
                    view.fail_attempt(
                        sid,
                        index=first.index,
                        attempt=first.attempt_count,
                        error="dead",
                        max_failures=1,
                    )
                elif n % 5 == 0:
                    view.fail_attempt(
                        sid,
                        index=first.index,
                        attempt=first.attempt_count,
                        error="again",
                        max_failures=3,
                        retry_after_ms=60_000,
                    )
                else:
                    view.complete_attempt(
                        sid,
                        index=first.index,
                        attempt=first.attempt_count,
                        events=[NewEvent("child", {"of": first.index}, id=f"{sid}/c")],
                    )
            if n % 4 == 0:
                view.put_snapshot(sid, "r", 2, {"upto": 2, "n": n})


def contents(store: Store, prefix: str = "") -> dict[str, tuple[list[StoredEvent], object]]:
    found = {}
    cursor = None
    while True:
        page = store.inspect.list_sessions(prefix=prefix, cursor=cursor, limit=1000)
        for summary in page.sessions:
            sid = summary.session_id
            snapshots = [
                (info, store.read_state(sid, info.reducer_name).snapshot)
                for info in store.inspect.list_snapshots(sid)
            ]
            found[sid] = (store.read(sid), snapshots)
        if (cursor := page.cursor) is None:
            return found


def test_sqlite_to_postgres_to_sqlite_is_identical(
    cli: Cli, tmp_path: Path, postgres_url: str
) -> None:
    """copy: 1,001 sessions (more than a page of the source's list) of 10 events or more, in
    lanes, claimed, failed, dead-lettered, with snapshots: the same read() and snapshots
    after two copies."""
    first, last = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    with a2sql.create_store(first) as source:
        build(source, 1001, 10)
        expected = contents(source)
    for url in (postgres_url, last):
        a2sql.create_store(url, migrate=True).close()
    to_postgres = cli("copy", first, postgres_url, "--json").json()
    assert (to_postgres["copied"], to_postgres["events"]) == (
        1001,
        sum(len(events) for events, _ in expected.values()),
    )
    assert to_postgres["snapshots"] == 251
    assert cli("copy", postgres_url, last, "--json").json()["copied"] == 1001
    for url in (postgres_url, last):
        with a2sql.create_store(url) as copy:
            assert contents(copy) == expected, url


def test_an_interrupted_copy_run_again_finishes_without_duplicates(
    tmp_path: Path, postgres_url: str
) -> None:
    """copy killed mid-run (SIGKILL), then run again: every session once, as at the source."""
    source_url = f"sqlite:///{tmp_path / 'a.db'}"
    with a2sql.create_store(source_url) as source:
        build(source, 1000, 10)
        expected = contents(source)
    destination = a2sql.create_store(postgres_url, migrate=True)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "a2sql.cli", "copy", source_url, postgres_url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while destination.inspect.totals().sessions < 100:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        partly = destination.inspect.totals().sessions
        assert 100 <= partly < 1000
        again = run_a2sql("copy", source_url, postgres_url, "--json")
        report = again.json()
        assert report["present"] == partly and report["copied"] == 1000 - partly
        assert contents(destination) == expected
    finally:
        destination.close()


def test_copy_refuses_sessions_that_differ_at_the_destination(cli: Cli, tmp_path: Path) -> None:
    """copy: a session the destination has otherwise stops the copy before anything is
    written, unless --skip-existing; one already copied is passed over."""
    source_url, destination_url = (f"sqlite:///{tmp_path / n}" for n in ("a.db", "b.db"))
    # One clock for both: the destination's 'b' has the source's counts and times, and
    # only its rows tell it apart.
    clock = FakeClock()
    with (
        a2sql.create_store(source_url, clock=clock) as source,
        a2sql.create_store(destination_url, clock=clock) as dest,
    ):
        for sid in ("a", "b", "c"):
            source.append(sid, [NewEvent("e", {"sid": sid})])
        dest.append("b", [NewEvent("other")])
        refused = cli("copy", source_url, destination_url)
        assert refused.code == 2
        assert "the destination has 1 session that differs from the source ('b')" in refused.err
        assert dest.read("a") == []
        done = cli("copy", source_url, destination_url, "--skip-existing", "--json").json()
        assert (done["copied"], done["skipped"], done["present"]) == (2, 1, 0)
        assert [e.type for e in dest.read("b")] == ["other"]
        assert (
            cli("copy", source_url, destination_url, "--skip-existing", "--json").json()["present"]
            == 2
        )


def test_copy_needs_both_databases_at_the_same_revision(cli: Cli, tmp_path: Path) -> None:
    """copy: an unmigrated destination or a missing source file is one clear line."""
    source_url, destination_url = (f"sqlite:///{tmp_path / n}" for n in ("a.db", "b.db"))
    a2sql.create_store(source_url).close()
    (tmp_path / "b.db").touch()
    behind = cli("copy", source_url, destination_url)
    assert behind.code == 2
    assert behind.err.strip().splitlines()[-1] == (
        f"a2sql: destination {destination_url} is at schema revision none, and copy needs both "
        f"databases at 0005_lean_indexes: run `a2sql migrate --url {destination_url}` first"
    )
    missing = cli("copy", f"sqlite:///{tmp_path / 'nothing.db'}", source_url)
    assert missing.code == 2 and "no such database file" in missing.err
    assert not (tmp_path / "nothing.db").exists()
    same = cli("copy", source_url, source_url)
    assert same.code == 2
    assert same.err.strip() == "a2sql: the source and the destination are the same database"


def test_copy_keeps_an_event_id_that_exists_in_another_session_out(
    cli: Cli, tmp_path: Path, postgres_url: str
) -> None:
    """copy: an event id taken at the destination by another session is a clear error, and
    that session is not written."""
    source_url = f"sqlite:///{tmp_path / 'a.db'}"
    with (
        a2sql.create_store(source_url) as source,
        a2sql.create_store(postgres_url, migrate=True) as dest,
    ):
        source.append("x", [NewEvent("e", id="shared")])
        dest.append("y", [NewEvent("e", id="shared")])
        failed = cli("copy", source_url, postgres_url)
        assert failed.code == 2
        assert "session 'x': one of its event ids already exists at the destination" in failed.err
        assert dest.read("x") == []
