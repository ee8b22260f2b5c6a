"""A failing database surfaces as A2Error(STORE_UNAVAILABLE), never raw (SPEC §4)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy import exc as sa_exc

import a2sql
from a2sql import A2Error, ClaimRef, ErrorCode, NewEvent, Store
from a2sql.execution.engines import resolve_url
from a2sql.testing import FakeClock
from a2sql.testing.facades import execute_sql

Operation = Callable[[Store], object]

OPERATIONS: dict[str, Operation] = {
    "append": lambda s: s.append("s", [NewEvent("t", 2, id="e2")]),
    "read": lambda s: s.read("s"),
    "claim_available": lambda s: s.claim_available("s", holder="w", ttl_ms=1000),
    "renew_claims": lambda s: s.renew_claims("s", holder="w", claims=[ClaimRef(1, 1)], ttl_ms=1000),
    "complete_attempt": lambda s: s.complete_attempt("s", index=1, attempt=1, events=[]),
    "fail_attempt": lambda s: s.fail_attempt("s", index=1, attempt=1, error="x", max_failures=2),
    "read_state": lambda s: s.read_state("s", "r"),
    "put_snapshot": lambda s: s.put_snapshot("s", "r", 1, {"n": 1}),
    "list_sessions": lambda s: s.inspect.list_sessions(),
    "read_events": lambda s: s.inspect.read_events("s"),
    "list_snapshots": lambda s: s.inspect.list_snapshots("s"),
    "session": lambda s: s.inspect.session("s"),
    "list_dead_letters": lambda s: s.inspect.list_dead_letters(),
    "totals": lambda s: s.inspect.totals(),
    "overview": lambda s: s.inspect.overview(),
    "in_flight": lambda s: s.inspect.in_flight(),
    "event": lambda s: s.inspect.event("e2"),
    "sessions_in_state": lambda s: s.inspect.list_sessions(state="waiting"),
    "retry_dead_letter": lambda s: s.retry_dead_letter("s", index=1),
    "skip_event": lambda s: s.skip_event("s", index=1, reason="r"),
    "signal": lambda s: s.signal("s", "go"),
    "cancel_session": lambda s: s.cancel_session("s", reason="r"),
    "list_waiting_and_scheduled": lambda s: s.inspect.list_waiting_and_scheduled("s"),
    "delete_session": lambda s: s.delete_session("s"),
    "prune": lambda s: s.prune(settled_before=datetime(2030, 1, 1, tzinfo=UTC)),
}


def assert_unavailable_from_driver(error: A2Error) -> None:
    """STORE_UNAVAILABLE, with the driver's error as ``__cause__``."""
    assert error.code == ErrorCode.STORE_UNAVAILABLE, error
    cause = error.__cause__
    assert cause is not None, "the driver's error is not the __cause__"
    driver = cause.orig if isinstance(cause, sa_exc.DBAPIError) else cause
    assert type(driver).__module__.split(".")[0] in ("sqlite3", "psycopg"), repr(driver)


def assert_file_gone(error: A2Error) -> None:
    """STORE_UNAVAILABLE because the store's SQLite file is no longer at its path."""
    assert error.code == ErrorCode.STORE_UNAVAILABLE, error
    assert "deleted or replaced" in error.message, error


def free_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_removed_sqlite_folder_makes_operations_store_unavailable(
    tmp_path: Path, operation: str
) -> None:
    """After the SQLite file's folder is removed, every operation fails with
    STORE_UNAVAILABLE, though the store holds open connections on the unlinked file
    (POSIX keeps it readable and writable through them)."""
    folder = tmp_path / "data"
    with a2sql.create_store(f"sqlite:///{folder / 'a2.db'}", clock=FakeClock()) as store:
        store.append("s", [NewEvent("t", 1, id="e1")])
        store.claim_available("s", holder="w", ttl_ms=1000)
        shutil.rmtree(folder)
        with pytest.raises(A2Error) as raised:
            OPERATIONS[operation](store)
        assert_file_gone(raised.value)
        assert not folder.exists()


def test_removed_sqlite_folder_presence_is_store_unavailable(tmp_path: Path) -> None:
    """Presence calls on a vanished SQLite file fail with STORE_UNAVAILABLE too."""
    folder = tmp_path / "data"
    clock = FakeClock()
    with a2sql.create_store(f"sqlite:///{folder / 'a2.db'}", clock=clock) as store:
        store.presence.read("ns")  # the store keeps a connection open on the file now
        shutil.rmtree(folder)
        for call in (
            lambda: store.presence.set("ns", "p", {"f": 1}, at=clock.now(), seen=1, ttl_ms=9),
            lambda: store.presence.read("ns"),
        ):
            with pytest.raises(A2Error) as raised:
                call()
            assert_file_gone(raised.value)


@pytest.mark.parametrize("migrate", [None, False, True])
def test_postgres_port_nothing_listens_on_is_store_unavailable(migrate: bool | None) -> None:
    """create_store on a PostgreSQL URL whose port is closed raises STORE_UNAVAILABLE."""
    pytest.importorskip("psycopg")
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/test?connect_timeout=5"
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, migrate=migrate)
    assert_unavailable_from_driver(raised.value)


DROPPED: dict[str, tuple[str, ...]] = {
    "a2_events": (
        "append",
        "read",
        "claim_available",
        "renew_claims",
        "complete_attempt",
        "fail_attempt",
        "read_state",
        "list_sessions",
        "read_events",
        "session",
        "list_dead_letters",
        "totals",
        "overview",
        "in_flight",
        "event",
        "sessions_in_state",
        "retry_dead_letter",
        "skip_event",
        "signal",
        "cancel_session",
        "list_waiting_and_scheduled",
        "prune",
    ),
    "a2_snapshots": ("read_state", "put_snapshot", "list_snapshots", "delete_session"),
}


@pytest.mark.parametrize(
    ("table", "operation"),
    [(table, operation) for table, operations in DROPPED.items() for operation in operations],
)
def test_table_dropped_under_live_store_is_store_unavailable(
    store: Store, table: str, operation: str
) -> None:
    """A table dropped under an open store makes its operations STORE_UNAVAILABLE."""
    store.append("s", [NewEvent("t", 1, id="e1")])
    store.claim_available("s", holder="w", ttl_ms=1000)
    if table != "a2_events":
        store.put_snapshot("s", "r", 1, {"n": 0})
    execute_sql(store, text(f"drop table {table}"))
    with pytest.raises(A2Error) as raised:
        OPERATIONS[operation](store)
    assert_unavailable_from_driver(raised.value)


def test_presence_table_dropped_under_live_store_is_store_unavailable(
    store: Store, clock: FakeClock
) -> None:
    """presence.set and presence.read on a dropped a2_presence are STORE_UNAVAILABLE."""
    execute_sql(store, text("drop table a2_presence"))
    for call in (
        lambda: store.presence.set("ns", "p", {"f": 1}, at=clock.now(), seen=1, ttl_ms=9),
        lambda: store.presence.read("ns"),
    ):
        with pytest.raises(A2Error) as raised:
            call()
        assert_unavailable_from_driver(raised.value)


def test_terminated_postgres_connection_is_store_unavailable(postgres_url: str) -> None:
    """The connections of a store killed under it: the next call fails with
    STORE_UNAVAILABLE and writes nothing; the store reconnects for the one after."""
    victim = "a2sql-test-victim"
    url = resolve_url(postgres_url).update_query_dict({"application_name": victim})
    with a2sql.create_store(url, migrate=True) as store:
        store.append("s", [NewEvent("t", 1, id="e1")])
        admin = create_engine(resolve_url(postgres_url))
        try:
            with admin.begin() as connection:
                killed = connection.execute(
                    text(
                        "select count(pg_terminate_backend(pid)) from pg_stat_activity"
                        " where application_name = :name"
                    ),
                    {"name": victim},
                ).scalar_one()
        finally:
            admin.dispose()
        assert killed >= 1
        with pytest.raises(A2Error) as raised:
            store.append("s", [NewEvent("t", 2, id="e2")])
        assert_unavailable_from_driver(raised.value)
        assert [event.id for event in store.read("s")] == ["e1"]
