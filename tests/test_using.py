"""``store.using(connection)``: a2sql's operations in the application's own transaction.

The application's write and a2sql's completion commit together or not at
all; an a2sql error undoes only its own operation; two processes completing
one attempt in their own transactions write the application's table once.
Both engines, both facades.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, Store

app_metadata = MetaData()
orders = Table(
    "orders",
    app_metadata,
    Column("id", Integer, primary_key=True),
    Column("note", String, nullable=False),
)


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        app_metadata.create_all(opened.engine)
        yield opened


def claimed_attempt(store: Store, session_id: str = "s") -> tuple[int, int]:
    store.append(session_id, [NewEvent("order.placed", {"n": 1}, id=f"{session_id}-placed")])
    [claimed] = store.claim_available(session_id, holder="w", ttl_ms=60_000).events
    return claimed.index, claimed.attempt_count


def order_notes(store: Store) -> list[str]:
    with store.engine.connect() as connection:
        return list(connection.execute(select(orders.c.note).order_by(orders.c.id)).scalars())


def refused(call: Callable[[], object]) -> A2Error:
    with pytest.raises(A2Error) as raised:
        call()
    return raised.value


def reply(n: int = 1) -> list[NewEvent]:
    return [NewEvent("order.done", {"n": n}, id=f"done-{n}", settled=True)]


def test_the_apps_write_and_the_completion_commit_together(store: Store) -> None:
    index, attempt = claimed_attempt(store)
    with store.begin() as connection:
        connection.execute(insert(orders).values(note="shipped"))
        result = store.using(connection).complete_attempt(
            "s", index=index, attempt=attempt, events=reply()
        )
        assert result.outcome == "completed"
        # Not visible outside the caller's transaction before it commits.
        assert store.read("s")[0].processed_at is None
    assert order_notes(store) == ["shipped"]
    events = store.read("s")
    assert events[0].processed_by_attempt == attempt
    assert [e.type for e in events] == ["order.placed", "order.done"]


def test_a_rollback_undoes_both(store: Store) -> None:
    index, attempt = claimed_attempt(store)
    with (
        pytest.raises(RuntimeError, match="handler failed after completing"),
        store.begin() as connection,
    ):
        connection.execute(insert(orders).values(note="shipped"))
        store.using(connection).complete_attempt("s", index=index, attempt=attempt, events=reply())
        raise RuntimeError("handler failed after completing")
    assert order_notes(store) == []
    [event] = store.read("s")
    assert event.processed_at is None
    # The attempt is still the current one and can complete now.
    done = store.complete_attempt("s", index=index, attempt=attempt, events=reply())
    assert done.outcome == "completed"


def test_an_a2sql_error_leaves_the_callers_transaction_usable(store: Store) -> None:
    store.append("other", [NewEvent("t", 0, id="taken")])
    index, attempt = claimed_attempt(store)
    with store.begin() as connection:
        connection.execute(insert(orders).values(note="before"))
        view = store.using(connection)
        with pytest.raises(A2Error) as raised:
            # A returned id already stored elsewhere: the whole completion is refused.
            view.complete_attempt(
                "s", index=index, attempt=attempt, events=[NewEvent("r", 0, id="taken")]
            )
        assert raised.value.code == ErrorCode.PARTIAL_DUPLICATE_BATCH
        # The caller's transaction goes on: its earlier write is there, and more work runs.
        connection.execute(insert(orders).values(note="after"))
        assert view.complete_attempt("s", index=index, attempt=attempt, events=reply()).outcome == (
            "completed"
        )
    assert order_notes(store) == ["before", "after"]
    assert store.read("s")[0].processed_by_attempt == attempt


def test_every_kind_of_operation_runs_in_the_callers_transaction(store: Store) -> None:
    with store.begin() as connection:
        view = store.using(connection)
        appended = view.append("s", [NewEvent("t", {"k": 1}, id="e1")])
        assert [e.index for e in appended.events] == [1]
        [claimed] = view.claim_available("s", holder="w", ttl_ms=60_000).events
        assert view.renew_claims(
            "s", holder="w", claims=[a2sql.ClaimRef(1, claimed.attempt_count)], ttl_ms=60_000
        ).renewed
        assert view.fail_attempt(
            "s", index=1, attempt=claimed.attempt_count, error="boom", max_failures=5
        ).outcome == ("failed")
        view.put_snapshot("s", "r", 1, {"total": 1})
        assert view.read_state("s", "r").snapshot is not None
        assert [s.reducer_name for s in view.inspect.list_snapshots("s")] == ["r"]
        assert [s.session_id for s in view.inspect.list_sessions().sessions] == ["s"]
        assert [e.index for e in view.inspect.read_events("s").events] == [1]
        view.presence.set("ns", "p", {"f": 1}, at=claimed.created_at, seen=1, ttl_ms=60_000)
        assert [entry.field for entry in view.presence.read("ns")] == ["f"]
        connection.rollback()
    # Rolled back: nothing of it is stored.
    assert store.read("s") == []
    assert store.inspect.list_sessions().sessions == []


def presence_values(store: Store) -> dict[str, object]:
    return {entry.participant: entry.value for entry in store.presence.read("ns")}


def test_a_presence_write_commits_or_rolls_back_with_the_callers_transaction(
    store: Store,
) -> None:
    with store.begin() as connection:
        connection.execute(insert(orders).values(note="joined"))
        view = store.using(connection)
        view.presence.set("ns", "alice", {"status": "online"}, ttl_ms=60_000)
        [entry] = view.presence.read("ns")
        assert (entry.value, entry.at.tzinfo) == ("online", UTC)
        # Not visible outside the caller's transaction before it commits.
        assert store.presence.read("ns") == []
    assert order_notes(store) == ["joined"]
    assert presence_values(store) == {"alice": "online"}
    with pytest.raises(RuntimeError, match="undo both"), store.begin() as connection:
        connection.execute(insert(orders).values(note="left"))
        view = store.using(connection)
        view.presence.set("ns", "alice", {"status": None}, ttl_ms=60_000)
        view.presence.set("ns", "bob", {"status": "online"}, ttl_ms=60_000)
        assert presence_values(store.using(connection)) == {"bob": "online"}
        raise RuntimeError("undo both")
    assert order_notes(store) == ["joined"]
    assert presence_values(store) == {"alice": "online"}


def test_an_attempt_of_a_deleted_or_pruned_session_never_touches_the_new_one(
    store: Store,
) -> None:
    """delete_session and prune in the caller's transaction keep the session's highest
    attempt number as in a2sql's own: the session appended again starts its indexes
    over, not its attempts, and the old attempt is superseded."""
    index, stale = claimed_attempt(store)
    with store.begin() as connection:
        view = store.using(connection)
        view.delete_session("s")
        view.append("s", [NewEvent("order.placed", {"n": 2}, id="s-placed")])
        [current] = view.claim_available("s", holder="w", ttl_ms=60_000).events
        assert (current.index, current.attempt_count) == (index, stale + 1)
        stale_done = view.complete_attempt("s", index=index, attempt=stale, events=reply(9))
        assert stale_done.outcome == "superseded"
        stale_failed = view.fail_attempt(
            "s", index=index, attempt=stale, error="stale", max_failures=1
        )
        assert stale_failed.outcome == "superseded"
        done = view.complete_attempt(
            "s", index=index, attempt=current.attempt_count, events=reply()
        )
        assert done.outcome == "completed"
        assert [e.attempt_count for e in done.events] == [stale]

    cut = datetime.now(UTC) + timedelta(hours=1)
    with store.begin() as connection:
        view = store.using(connection)
        assert view.prune(settled_before=cut).sessions == 1
        view.append("s", [NewEvent("order.placed", {"n": 3}, id="s-placed")])
        [third] = view.claim_available("s", holder="w", ttl_ms=60_000).events
        assert (third.index, third.attempt_count) == (index, current.attempt_count + 1)
        renewed = view.renew_claims(
            "s", holder="w", claims=[a2sql.ClaimRef(index, current.attempt_count)], ttl_ms=1
        )
        assert (renewed.renewed, renewed.superseded) == ([], [index])
    assert store.read("s")[0].claim_expires_at == third.claim_expires_at


def test_a_connection_without_a_transaction_is_refused(store: Store) -> None:
    with store.engine.connect() as connection, pytest.raises(A2Error) as raised:
        store.using(connection).append("s", [NewEvent("t", 0)])
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert "transaction" in raised.value.message
    assert store.read("s") == []


def test_a_closed_connection_is_refused(store: Store) -> None:
    connection = store.engine.connect()
    connection.close()
    error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
    assert error.code == ErrorCode.INVALID_ARGUMENT, error
    assert "closed" in error.message


def test_a_transaction_begun_by_the_callers_first_statement_serves(store: Store) -> None:
    """SQLAlchemy's "commit as you go": the caller's first statement began the
    transaction (autobegin); a2sql's operation joins it and commits with it."""
    with store.engine.connect() as connection:
        connection.execute(insert(orders).values(note="shipped"))
        store.using(connection).append("s", [NewEvent("t", 0, id="e")])
        connection.commit()
    assert order_notes(store) == ["shipped"]
    assert [e.id for e in store.read("s")] == ["e"]


def test_not_a_connection_is_refused(store: Store) -> None:
    with pytest.raises(A2Error) as raised:
        store.using(store.engine)  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT


def test_an_engine_begun_transaction_works_too(store: Store) -> None:
    """``engine.begin()``, with no a2sql helper: the operation takes the lock itself."""
    index, attempt = claimed_attempt(store)
    with store.engine.begin() as connection:
        connection.execute(insert(orders).values(note="shipped"))
        store.using(connection).complete_attempt("s", index=index, attempt=attempt, events=[])
    assert order_notes(store) == ["shipped"]
    assert store.read("s")[0].processed_at is not None


def test_sqlite_a_stale_deferred_transaction_is_a_clear_error(tmp_path: Path) -> None:
    """The caller's SQLite transaction began deferred and read before another writer
    committed: a2sql refuses at once with INVALID_ARGUMENT, not a later "database is
    locked", and the caller's transaction is still the caller's to end."""
    path = tmp_path / "a2.db"
    with a2sql.create_store(f"sqlite:///{path}") as store:
        index, attempt = claimed_attempt(store)
        with store.engine.connect() as connection, connection.begin():
            connection.exec_driver_sql("BEGIN")  # deferred, as the app chose
            connection.execute(text("select count(*) from a2_events")).scalar_one()
            other = sqlite3.connect(path)
            other.execute("insert into a2_presence values ('n', 'p', 'f', '1', 1, 0, 0)")
            other.commit()
            other.close()
            with pytest.raises(A2Error) as raised:
                store.using(connection).complete_attempt(
                    "s", index=index, attempt=attempt, events=[]
                )
            assert raised.value.code == ErrorCode.INVALID_ARGUMENT
            assert "store.begin()" in raised.value.message
        assert store.complete_attempt("s", index=index, attempt=attempt, events=[]).outcome == (
            "completed"
        )


def _complete_in_own_transaction(url: str, index: int, attempt: int, start: object) -> str:
    """A worker's completion: its own write and the completion in one transaction,
    rolled back unless the completion took effect."""

    class Superseded(Exception):
        pass

    with a2sql.create_store(url) as store:
        outcome = "none"
        start.wait()  # type: ignore[attr-defined]
        try:
            with store.begin() as connection:
                connection.execute(insert(orders).values(note=f"charged by attempt {attempt}"))
                outcome = (
                    store.using(connection)
                    .complete_attempt("s", index=index, attempt=attempt, events=[])
                    .outcome
                )
                if outcome != "completed":
                    raise Superseded
        except Superseded:
            pass
        return outcome


def test_two_processes_completing_one_event_write_the_apps_table_once(
    store: Store, url: str
) -> None:
    """Two workers hold attempts of one event (the first one's lease ran out and the
    second claimed it again) and complete at the same moment, each in its own
    transaction with its own write: one completes, the other is superseded and its
    write rolled back with it."""
    store.append("s", [NewEvent("order.placed", {"n": 1}, id="placed")])
    expires = datetime.now(UTC) + timedelta(milliseconds=50)
    [first] = store.claim_available("s", holder="a", ttl_ms=50, expires_at=expires).events
    time.sleep(0.1)
    [second] = store.claim_available("s", holder="b", ttl_ms=60_000).events
    context = mp.get_context("spawn")
    start = context.Manager().Event()
    with context.Pool(2) as pool:
        pending = [
            pool.apply_async(_complete_in_own_transaction, (url, claim.index, attempt, start))
            for claim, attempt in ((first, first.attempt_count), (second, second.attempt_count))
        ]
        time.sleep(0.5)  # both workers open and waiting
        start.set()
        outcomes = [result.get(timeout=60) for result in pending]
    assert outcomes == ["superseded", "completed"]
    assert order_notes(store) == [f"charged by attempt {second.attempt_count}"]
    assert store.read("s")[0].processed_by_attempt == second.attempt_count


# --- the async facade ---------------------------------------------------------------


def test_async_the_apps_write_and_the_completion_commit_together(store: Store, url: str) -> None:
    index, attempt = claimed_attempt(store)

    async def main() -> None:
        async with a2sql.create_async_store(url) as async_store:
            async with async_store.begin() as connection:
                await connection.execute(insert(orders).values(note="shipped"))
                result = await async_store.using(connection).complete_attempt(
                    "s", index=index, attempt=attempt, events=reply()
                )
                assert result.outcome == "completed"
            with pytest.raises(RuntimeError):
                async with async_store.begin() as connection:
                    await connection.execute(insert(orders).values(note="rolled back"))
                    await async_store.using(connection).append("s", [NewEvent("t", 0)])
                    raise RuntimeError("undo both")

    asyncio.run(main())
    assert order_notes(store) == ["shipped"]
    assert [e.type for e in store.read("s")] == ["order.placed", "order.done"]


def test_async_an_a2sql_error_leaves_the_callers_transaction_usable(store: Store, url: str) -> None:
    store.append("other", [NewEvent("t", 0, id="taken")])
    index, attempt = claimed_attempt(store)

    async def main() -> None:
        async with a2sql.create_async_store(url) as async_store:
            engine = async_store.engine
            async with engine.begin() as connection:
                await connection.execute(insert(orders).values(note="before"))
                view = async_store.using(connection)
                with pytest.raises(A2Error) as raised:
                    await view.complete_attempt(
                        "s", index=index, attempt=attempt, events=[NewEvent("r", 0, id="taken")]
                    )
                assert raised.value.code == ErrorCode.PARTIAL_DUPLICATE_BATCH
                await connection.execute(insert(orders).values(note="after"))
                done = await view.complete_attempt("s", index=index, attempt=attempt, events=[])
                assert done.outcome == "completed"

    asyncio.run(main())
    assert order_notes(store) == ["before", "after"]


def test_async_a_presence_write_commits_or_rolls_back_with_the_callers_transaction(
    store: Store, url: str
) -> None:
    async def main() -> None:
        async with a2sql.create_async_store(url) as async_store:
            async with async_store.begin() as connection:
                await connection.execute(insert(orders).values(note="joined"))
                view = async_store.using(connection)
                await view.presence.set("ns", "alice", {"status": "online"}, ttl_ms=60_000)
                assert [e.value for e in await view.presence.read("ns")] == ["online"]
                assert await async_store.presence.read("ns") == []
            with pytest.raises(RuntimeError, match="undo both"):
                async with async_store.begin() as connection:
                    await connection.execute(insert(orders).values(note="left"))
                    view = async_store.using(connection)
                    await view.presence.set("ns", "alice", {"status": None}, ttl_ms=60_000)
                    await view.presence.set("ns", "bob", {"status": "online"}, ttl_ms=60_000)
                    assert [e.participant for e in await view.presence.read("ns")] == ["bob"]
                    raise RuntimeError("undo both")

    asyncio.run(main())
    assert order_notes(store) == ["joined"]
    assert presence_values(store) == {"alice": "online"}


def test_the_callers_own_errors_in_store_begin_stay_sqlalchemys(store: Store) -> None:
    """Inside ``store.begin()`` the application's own failing statement raises
    SQLAlchemy's error, as on any connection; only a2sql's operations raise A2Error."""
    with pytest.raises(DBAPIError), store.begin() as connection:
        connection.execute(text("select * from no_such_table"))
    assert store.read("s") == []


# --- connections that cannot serve, and a database that fails --------------------------
#
# A connection a2sql cannot use is the program's mistake: INVALID_ARGUMENT (or
# SCHEMA_MISMATCH), which no worker retries, never STORE_UNAVAILABLE, which workers
# retry as an outage. A database that fails under a connection that could serve
# stays STORE_UNAVAILABLE.


def test_an_invalidated_connection_is_refused(store: Store) -> None:
    with store.engine.connect() as connection:
        connection.begin()
        connection.invalidate()
        error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
        assert error.code == ErrorCode.INVALID_ARGUMENT, error
        assert "invalidated" in error.message and "roll" in error.message
        # As the message says: rolled back, the connection serves a new transaction.
        connection.rollback()
        with connection.begin():
            store.using(connection).append("s", [NewEvent("t", 0, id="after")])
    assert [e.id for e in store.read("s")] == ["after"]


def test_an_autocommit_connection_is_refused(store: Store) -> None:
    autocommit = store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    with autocommit as connection, connection.begin():
        error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
        assert error.code == ErrorCode.INVALID_ARGUMENT, error
        assert "AUTOCOMMIT" in error.message
        # Reads too: nothing a2sql reads would be one snapshot with the caller's.
        assert refused(lambda: store.using(connection).read("s")).code == (
            ErrorCode.INVALID_ARGUMENT
        )
    assert store.read("s") == []


def test_an_autocommit_engine_is_refused(store: Store, url: str) -> None:
    """AUTOCOMMIT set on the engine (create_engine's isolation_level), not the connection."""
    engine = sa.create_engine(store.engine.url, isolation_level="AUTOCOMMIT")
    try:
        with engine.begin() as connection:
            error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
            assert error.code == ErrorCode.INVALID_ARGUMENT, error
            assert "AUTOCOMMIT" in error.message
    finally:
        engine.dispose()
    assert store.read("s") == []


def test_the_callers_failed_statement(store: Store) -> None:
    """The caller's statement failed and the caller went on in the same transaction. On
    PostgreSQL the transaction is aborted (InFailedSqlTransaction): INVALID_ARGUMENT
    saying to roll back, and the transaction is still the caller's to roll back. On
    SQLite a failed statement undoes only itself and the transaction goes on: the call
    works, and commits with the caller's earlier write."""
    postgres = store.engine.dialect.name == "postgresql"
    with store.engine.connect() as connection:
        connection.begin()
        connection.execute(insert(orders).values(note="before"))
        with pytest.raises(DBAPIError):
            connection.execute(text("select * from no_such_table"))

        def call() -> object:
            return store.using(connection).append("s", [NewEvent("t", 0, id="e")])

        if postgres:
            error = refused(call)
            assert error.code == ErrorCode.INVALID_ARGUMENT, error
            assert "aborted" in error.message and "roll it back" in error.message
            # As the message says: rolled back, the connection serves a new transaction.
            connection.rollback()
            connection.begin()
            connection.execute(insert(orders).values(note="again"))
        call()
        connection.commit()
    assert order_notes(store) == (["again"] if postgres else ["before"])
    assert [e.id for e in store.read("s")] == ["e"]


def test_postgres_an_aborted_savepoint_of_the_callers_is_refused(
    postgres_store: Store,
) -> None:
    """Aborted inside a savepoint of the caller's: rolled back to it, the call works."""
    store = postgres_store
    app_metadata.create_all(store.engine)
    with store.begin() as connection:
        connection.execute(insert(orders).values(note="kept"))
        savepoint = connection.begin_nested()
        with pytest.raises(DBAPIError):
            connection.execute(text("select * from no_such_table"))
        error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
        assert error.code == ErrorCode.INVALID_ARGUMENT, error
        savepoint.rollback()
        store.using(connection).append("s", [NewEvent("t", 0, id="e")])
    assert order_notes(store) == ["kept"]
    assert [e.id for e in store.read("s")] == ["e"]


def test_sqlite_a_transaction_an_error_rolled_back_is_refused(tmp_path: Path) -> None:
    """SQLAlchemy's pysqlite recipe (the driver in autocommit mode, BEGIN in the ``begin``
    event), and a statement of the caller's whose conflict clause rolled the whole
    transaction back: a2sql's writes would commit alone. INVALID_ARGUMENT."""
    url = f"sqlite:///{tmp_path / 'a2.db'}"
    with a2sql.create_store(url) as store:
        app_metadata.create_all(store.engine)
        engine = sa.create_engine(url)

        @sa.event.listens_for(engine, "connect")
        def _driver_autocommit(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            dbapi_connection.isolation_level = None

        @sa.event.listens_for(engine, "begin")
        def _begin(connection: sa.Connection) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

        try:
            with engine.connect() as connection, connection.begin():
                # The recipe serves: its transaction holds a2sql's write.
                connection.execute(insert(orders).values(id=1, note="kept"))
                store.using(connection).append("s", [NewEvent("t", 0, id="kept")])
            with engine.connect() as connection, connection.begin():
                connection.execute(insert(orders).values(id=2, note="lost"))
                with pytest.raises(DBAPIError):
                    connection.execute(text("insert or rollback into orders values (1, 'dup')"))
                error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
                assert error.code == ErrorCode.INVALID_ARGUMENT, error
                assert "rolled it back" in error.message
        finally:
            engine.dispose()
        assert order_notes(store) == ["kept"]
        assert [e.id for e in store.read("s")] == ["kept"]


def test_a_database_without_a2sqls_tables_is_a_schema_mismatch(
    store: Store, tmp_path: Path
) -> None:
    """The connection reaches another database (SQLite: another file; PostgreSQL: a
    search_path without the store's schema): SCHEMA_MISMATCH, and the caller's
    transaction goes on."""
    if store.engine.dialect.name == "sqlite":
        elsewhere = sa.create_engine(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    else:
        elsewhere = store.engine
    try:
        with elsewhere.begin() as connection:
            if store.engine.dialect.name == "postgresql":
                connection.execute(text("set local search_path to a2sql_no_such_schema"))
            view = store.using(connection)
            for call in (
                lambda: view.append("s", [NewEvent("t", 0)]),
                lambda: view.read("s"),
                lambda: view.claim_next(holder="w", ttl_ms=1000),
            ):
                error = refused(call)
                assert error.code == ErrorCode.SCHEMA_MISMATCH, error
                assert "a2sql's tables" in error.message and "a2_" in error.message
            assert connection.execute(text("select 1")).scalar_one() == 1
    finally:
        if elsewhere is not store.engine:
            elsewhere.dispose()
    assert store.read("s") == []


def test_sqlite_a_locked_database_stays_store_unavailable(tmp_path: Path) -> None:
    """Another writer holds SQLite's write lock past the busy timeout: an outage, retried
    by workers, not the connection's fault."""
    path = tmp_path / "a2.db"
    with a2sql.create_store(f"sqlite:///{path}", lock_timeout_ms=100) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with store.engine.connect() as connection, connection.begin():
                error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
                assert error.code == ErrorCode.STORE_UNAVAILABLE, error
                assert "locked" in error.message
        finally:
            other.rollback()
            other.close()
        assert store.read("s") == []


@pytest.fixture
def postgres_store(migrated_postgres_url: str) -> Iterator[Store]:
    with a2sql.create_store(migrated_postgres_url) as opened:
        yield opened


WAITS_FOR_A_LOCK = text("select exists (select 1 from pg_locks where pid = :p and not granted)")


def backend_pid(connection: sa.Connection) -> int:
    return int(connection.execute(text("select pg_backend_pid()")).scalar_one())


def terminate(store: Store, pid: int) -> None:
    with store.engine.begin() as admin:
        assert admin.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid}).scalar()


def test_postgres_a_connection_lost_mid_call_stays_store_unavailable(
    postgres_store: Store,
) -> None:
    """The server ends the caller's connection while a2sql's call waits on it: the call
    is STORE_UNAVAILABLE (an outage). The connection is then invalidated: the next call
    on it is INVALID_ARGUMENT, and once rolled back it serves again."""
    store = postgres_store
    with store.begin() as holder:
        store.using(holder).append("s", [NewEvent("t", 0, id="held")])  # holds the lock
        with store.engine.connect() as connection:
            connection.begin()
            pid = backend_pid(connection)
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(
                    lambda: store.using(connection).append("s", [NewEvent("t", 0)])
                )
                with store.engine.connect() as watch:
                    deadline = time.monotonic() + 30
                    while not watch.execute(
                        text(
                            "select exists (select 1 from pg_locks where pid = :p and not granted)"
                        ),
                        {"p": pid},
                    ).scalar():
                        assert time.monotonic() < deadline, "the call never waited for the lock"
                        time.sleep(0.01)
                        watch.rollback()
                terminate(store, pid)
                with pytest.raises(A2Error) as raised:
                    waiting.result(timeout=30)
            assert raised.value.code == ErrorCode.STORE_UNAVAILABLE, raised.value
            assert isinstance(raised.value.__cause__, DBAPIError)
            error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
            assert error.code == ErrorCode.INVALID_ARGUMENT, error
            connection.rollback()
    with store.engine.connect() as connection, connection.begin():
        store.using(connection).append("s", [NewEvent("t", 0, id="after")])
    assert [e.id for e in store.read("s")] == ["held", "after"]


def test_postgres_a_connection_the_server_ended_stays_store_unavailable(
    postgres_store: Store,
) -> None:
    """The server ended the caller's connection before the call: STORE_UNAVAILABLE."""
    store = postgres_store
    with store.engine.connect() as connection:
        connection.begin()
        terminate(store, backend_pid(connection))
        error = refused(lambda: store.using(connection).append("s", [NewEvent("t", 0)]))
        assert error.code == ErrorCode.STORE_UNAVAILABLE, error
        assert connection.invalidated
        connection.rollback()
    assert store.read("s") == []


# --- the same on the async facade -------------------------------------------------------


Setup = Callable[[AsyncConnection], Awaitable[AsyncConnection]]


async def _as_it_is(connection: AsyncConnection) -> AsyncConnection:
    return connection


def async_refusal(url: str, setup: Setup = _as_it_is, *, connect_to: str | None = None) -> A2Error:
    """What ``async_store.using(connection).append(...)`` raises on a connection ``setup``
    made of a fresh one (of the store's engine, or of one on ``connect_to``), its
    transaction begun after if ``setup`` began none."""

    async def main() -> A2Error:
        async with a2sql.create_async_store(url) as async_store:
            engine = async_store.engine if connect_to is None else create_async_engine(connect_to)
            try:
                async with engine.connect() as fresh:
                    connection = await setup(fresh)
                    if not connection.in_transaction():
                        await connection.begin()
                    with pytest.raises(A2Error) as raised:
                        await async_store.using(connection).append("s", [NewEvent("t", 0)])
                    await connection.rollback()
                    return raised.value
            finally:
                if engine is not async_store.engine:
                    await engine.dispose()

    return asyncio.run(main())


def test_async_an_invalidated_connection_is_refused(store: Store, url: str) -> None:
    async def invalidated(connection: AsyncConnection) -> AsyncConnection:
        await connection.begin()
        await connection.invalidate()
        return connection

    error = async_refusal(url, invalidated)
    assert error.code == ErrorCode.INVALID_ARGUMENT, error
    assert "invalidated" in error.message


def test_async_an_autocommit_connection_is_refused(store: Store, url: str) -> None:
    async def autocommit(connection: AsyncConnection) -> AsyncConnection:
        return await connection.execution_options(isolation_level="AUTOCOMMIT")

    error = async_refusal(url, autocommit)
    assert error.code == ErrorCode.INVALID_ARGUMENT, error
    assert "AUTOCOMMIT" in error.message
    assert store.read("s") == []


def test_async_a_connection_without_a_transaction_is_refused(store: Store, url: str) -> None:
    async def main() -> A2Error:
        async with (
            a2sql.create_async_store(url) as async_store,
            async_store.engine.connect() as connection,
        ):
            with pytest.raises(A2Error) as raised:
                await async_store.using(connection).append("s", [NewEvent("t", 0)])
            return raised.value

    error = asyncio.run(main())
    assert error.code == ErrorCode.INVALID_ARGUMENT, error
    assert "transaction" in error.message
    assert store.read("s") == []


def test_async_a_database_without_a2sqls_tables_is_a_schema_mismatch(
    store: Store, url: str, tmp_path: Path
) -> None:
    async def elsewhere(connection: AsyncConnection) -> AsyncConnection:
        await connection.begin()
        if connection.dialect.name == "postgresql":
            await connection.execute(text("set local search_path to a2sql_no_such_schema"))
        return connection

    other = None
    if store.engine.dialect.name == "sqlite":
        other = f"sqlite+aiosqlite:///{tmp_path / 'elsewhere.db'}"
    error = async_refusal(url, elsewhere, connect_to=other)
    assert error.code == ErrorCode.SCHEMA_MISMATCH, error
    assert "a2sql's tables" in error.message


def test_async_postgres_an_aborted_transaction_is_refused(
    postgres_store: Store, migrated_postgres_url: str
) -> None:
    async def aborted(connection: AsyncConnection) -> AsyncConnection:
        await connection.begin()
        with pytest.raises(DBAPIError):
            await connection.execute(text("select * from no_such_table"))
        return connection

    error = async_refusal(migrated_postgres_url, aborted)
    assert error.code == ErrorCode.INVALID_ARGUMENT, error
    assert "aborted" in error.message


def test_async_postgres_a_connection_the_server_ended_stays_store_unavailable(
    postgres_store: Store, migrated_postgres_url: str
) -> None:
    async def ended(connection: AsyncConnection) -> AsyncConnection:
        await connection.begin()
        pid = (await connection.execute(text("select pg_backend_pid()"))).scalar_one()
        terminate(postgres_store, pid)
        return connection

    error = async_refusal(migrated_postgres_url, ended)
    assert error.code == ErrorCode.STORE_UNAVAILABLE, error


def test_using_says_whether_a_call_was_replayed(store: Store, url: str) -> None:
    """``replayed`` through ``using(connection)``, sync and async: False for the append and
    the completion that commit, True for the same ids again."""
    with store.begin() as connection:
        assert store.using(connection).append("s", reply(1)).replayed is False
    with store.begin() as connection:
        assert store.using(connection).append("s", reply(1)).replayed is True
    index, attempt = claimed_attempt(store)
    with store.begin() as connection:
        first = store.using(connection).complete_attempt(
            "s", index=index, attempt=attempt, events=reply(2)
        )
    with store.begin() as connection:
        retried = store.using(connection).complete_attempt(
            "s", index=index, attempt=attempt, events=reply(2)
        )
    assert (first.replayed, retried.replayed) == (False, True)

    async def main() -> tuple[bool, ...]:
        async with a2sql.create_async_store(url) as async_store:
            async with async_store.begin() as connection:
                appended = await async_store.using(connection).append("s", reply(3))
            async with async_store.begin() as connection:
                again = await async_store.using(connection).append("s", reply(3))
            async with async_store.begin() as connection:
                completed = await async_store.using(connection).complete_attempt(
                    "s", index=index, attempt=attempt, events=reply(2)
                )
        return appended.replayed, again.replayed, completed.replayed

    assert asyncio.run(main()) == (False, True, True)
