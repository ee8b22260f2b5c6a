"""PostgreSQL server and database settings a2sql must not depend on.

A database whose ``TimeZone`` is not UTC, or whose default isolation level
is not READ COMMITTED, is simulated the way a server sets it for every
connection: a ``-c`` option in the connection's startup packet (what
``ALTER DATABASE … SET`` and ``postgresql.conf`` amount to).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import a2sql
from a2sql import A2Error, ClaimRef, ErrorCode, NewEvent
from a2sql.testing import FakeClock
from tests.conftest import with_server_option
from tests.holding import wait_until_a_lock_is_awaited
from tests.recording import recording_engine

NEVER = datetime.max.replace(tzinfo=UTC, microsecond=999_000)  # times are kept to the ms
DAWN = datetime(1, 1, 1, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("zone", "start", "expires_at"),
    [
        ("Pacific/Kiritimati", datetime(9999, 12, 31, 20, 0, tzinfo=UTC), NEVER),
        ("Etc/GMT+12", DAWN, DAWN + timedelta(hours=1)),
    ],
)
def test_times_at_the_ends_of_the_calendar_stay_readable_in_any_server_zone(
    migrated_postgres_url: str, zone: str, start: datetime, expires_at: datetime
) -> None:
    clock = FakeClock(start)
    url = with_server_option(migrated_postgres_url, f"timezone={zone}")
    with a2sql.create_store(url, clock=clock, migrate=False) as store:
        store.append("s", [NewEvent(type="t", payload={}, id="e1")])
        claim = store.claim_available("s", holder="w", ttl_ms=1000, expires_at=expires_at)
        assert claim.outcome == "claimed"
        busy = store.claim_available("s", holder="w", ttl_ms=1000)  # answered with the claim
        assert (busy.outcome, busy.retry_at) == ("busy", expires_at)
        assert [e.created_at for e in store.read("s")] == [start]
        assert store.inspect.session("s").updated_at == start  # type: ignore[union-attr]
        page = store.inspect.read_events("s")
        assert page.events[0].claim_expires_at == expires_at
        store.presence.set("ns", "p", {"f": 1}, at=expires_at, seen=1, ttl_ms=1000)
        [entry] = store.presence.read("ns")
        assert entry.at == expires_at
        assert entry.at.tzinfo is UTC


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_own_transactions_run_read_committed_whatever_the_database_default(
    migrated_postgres_url: str, level: str
) -> None:
    # libpq's options take a space escaped with a backslash.
    setting = level.replace(" ", "\\ ")
    url = with_server_option(migrated_postgres_url, f"default_transaction_isolation={setting}")
    # Concurrent writers of one session: under the default level each
    # transaction's snapshot would predate the lock its predecessor released.
    with a2sql.create_store(url, migrate=False) as store:
        failures: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                for i in range(40):
                    store.append("one", [NewEvent(type="t", payload={}, id=f"w{n}-{i}")])
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert [e.index for e in store.read("one")] == list(range(1, 161))


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_using_refuses_a_caller_transaction_at_another_level(
    migrated_postgres_url: str, level: str
) -> None:
    with a2sql.create_store(migrated_postgres_url, migrate=False) as store:
        engine = create_engine(migrated_postgres_url, isolation_level=level)
        try:
            with engine.begin() as connection:
                with pytest.raises(A2Error) as raised:
                    store.using(connection).append("s", [NewEvent(type="t", payload={})])
                assert raised.value.code is ErrorCode.INVALID_ARGUMENT
                assert "READ COMMITTED" in str(raised.value)
            with engine.connect() as connection:
                read_committed = connection.execution_options(isolation_level="READ COMMITTED")
                with read_committed.begin():
                    store.using(read_committed).append("s", [NewEvent(type="t", payload={})])
        finally:
            engine.dispose()
        assert len(store.read("s")) == 1


def _hold_session_lock(url: str, session_id: str, held: threading.Event, done: threading.Event):
    """Another client that locked ``session_id`` as a2sql's writers do, then froze."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("select pg_advisory_xact_lock(24882, hashtext(:sid))"), {"sid": session_id}
            )
            held.set()
            done.wait(30)
    finally:
        engine.dispose()


def test_a_writer_gives_up_after_lock_timeout_saying_the_session_is_locked(
    migrated_postgres_url: str,
) -> None:
    held, done = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=_hold_session_lock, args=(migrated_postgres_url, "s", held, done)
    )
    holder.start()
    try:
        assert held.wait(10)
        with a2sql.create_store(migrated_postgres_url, migrate=False, lock_timeout_ms=300) as store:
            started = time.monotonic()
            with pytest.raises(A2Error) as raised:
                store.append("s", [NewEvent(type="t", payload={})])
            waited = time.monotonic() - started
            assert raised.value.code is ErrorCode.STORE_UNAVAILABLE
            assert "locked" in str(raised.value)
            assert 0.25 < waited < 5
            # Other sessions are not held up, and the setting stays in its transaction.
            store.append("other", [NewEvent(type="t", payload={})])
    finally:
        done.set()
        holder.join()


@pytest.mark.parametrize("level", ["read committed", "repeatable read", "serializable"])
def test_a_call_sent_whole_begins_read_committed_unless_that_is_the_default(
    migrated_postgres_url: str, level: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call sent whole in one pipeline goes without BEGIN and COMMIT, its statements one
    implicit transaction at the session's default level, only where that level is READ
    COMMITTED (a2sql.execution.pooler.implicit_transactions); elsewhere it begins one at that
    level, as every other transaction does."""
    setting = level.replace(" ", "\\ ")  # libpq's options take a space escaped
    url = with_server_option(migrated_postgres_url, f"default_transaction_isolation={setting}")
    engine, sent = recording_engine(url, monkeypatch)
    try:
        with a2sql.create_store(engine, migrate=False) as store:
            store.read("s")  # the connection's first transaction asks what it needs
            sent.clear()
            store.append("s", [NewEvent("t", 1)])
            begun = [sql for sql, _ in sent if sql.startswith(("BEGIN", "COMMIT"))]
            assert len(store.read("s")) == 1
    finally:
        engine.dispose()
    if level == "read committed":
        assert begun == []
    else:
        assert begun == ["BEGIN ISOLATION LEVEL READ COMMITTED", "COMMIT"]


def test_a_call_finding_its_sessions_lock_held_waits_for_it_in_its_one_round_trip(
    migrated_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock statement sent whole with the call waits for the lock (no try, no second
    attempt): a call that finds the session held is the same one pipeline, answered
    once the holder is done."""
    engine, sent = recording_engine(migrated_postgres_url, monkeypatch)
    try:
        with a2sql.create_store(engine, migrate=False) as store:
            store.append("s", [NewEvent("t", 0)])
            held, done = threading.Event(), threading.Event()
            holder = threading.Thread(
                target=_hold_session_lock, args=(migrated_postgres_url, "s", held, done)
            )
            holder.start()
            assert held.wait(10)
            sent.clear()
            threading.Timer(0.2, done.set).start()
            store.append("s", [NewEvent("t", 1)])  # waits for the holder
            holder.join()
            locks = [sql for sql, _ in sent if "advisory_xact_lock" in sql]
            assert len(locks) == 1 and "pg_advisory_xact_lock" in locks[0]
            assert all(pipelined for _, pipelined in sent)
            assert [e.index for e in store.read("s")] == [1, 2]
    finally:
        engine.dispose()


class _FreezingClock:
    """A clock whose first reading in an operation stalls: a frozen client. (create_store's
    check of the clock reads it once before.)"""

    def __init__(self, stall_s: float) -> None:
        self._stall_s = stall_s
        self._readings = 0

    def now(self) -> datetime:
        self._readings += 1
        if self._readings == 2:
            time.sleep(self._stall_s)
        return datetime.now(UTC)


def test_a_frozen_client_mid_transaction_is_cut_off_and_frees_the_session(
    migrated_postgres_url: str,
) -> None:
    frozen = a2sql.create_store(
        migrated_postgres_url, migrate=False, clock=_FreezingClock(3), lock_timeout_ms=500
    )
    outcome: list[BaseException | None] = []

    def stalled_append() -> None:
        try:
            # In a lane: no fused statement (a2sql.backends.postgresql.one_statement), the clock is
            # read inside
            # the transaction, after the session's lock.
            frozen.append("s", [NewEvent(type="t", payload={}, lane="L")])
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=stalled_append)
    thread.start()
    try:
        time.sleep(0.3)  # the stalled append holds the session's lock by now
        with a2sql.create_store(
            migrated_postgres_url, migrate=False, lock_timeout_ms=5000
        ) as store:
            started = time.monotonic()
            store.append("s", [NewEvent(type="t", payload={}, id="after")])
            assert time.monotonic() - started < 2.5
            thread.join()
            [error] = outcome
            assert isinstance(error, A2Error)
            assert error.code is ErrorCode.STORE_UNAVAILABLE
            assert [e.id for e in store.read("s")] == ["after"]
    finally:
        thread.join()
        frozen.close()


def test_a_call_sent_with_its_lock_holds_nothing_while_its_client_is_frozen(
    migrated_postgres_url: str,
) -> None:
    """A call whose common case is one round trip reads the clock before it sends its
    transaction whole: frozen there, it holds no lock, and writes after the writer that
    went ahead, with no earlier time."""
    frozen = a2sql.create_store(migrated_postgres_url, migrate=False, clock=_FreezingClock(1.5))
    outcome: list[a2sql.AppendResult] = []
    thread = threading.Thread(
        target=lambda: outcome.append(frozen.append("s", [NewEvent(type="t", payload={})]))
    )
    thread.start()
    try:
        time.sleep(0.3)
        with a2sql.create_store(
            migrated_postgres_url, migrate=False, lock_timeout_ms=5000
        ) as store:
            started = time.monotonic()
            [ahead] = store.append("s", [NewEvent(type="t", payload={})]).events
            assert time.monotonic() - started < 1
            thread.join()
            [appended] = outcome[0].events
            assert (ahead.index, appended.index) == (1, 2)
            assert appended.created_at >= ahead.created_at
    finally:
        thread.join()
        frozen.close()


class _RacingClock:
    """A fake clock whose next reading lets a rival write first: it returns the time it
    held, then ``later`` from on."""

    def __init__(self, start: datetime, later: datetime) -> None:
        self.value, self.later = start, later
        self.rival: Callable[[], object] | None = None

    def now(self) -> datetime:
        value = self.value
        if self.rival is not None:
            rival, self.rival = self.rival, None
            rival()
            self.value = self.later
        return value


RACES: dict[str, Callable[[a2sql.Store, a2sql.Store], datetime | None]] = {}


def race(function: Callable[[a2sql.Store, a2sql.Store], datetime | None]) -> Callable[..., Any]:
    RACES[function.__name__] = function
    return function


@race
def append_after_an_append(store: a2sql.Store, rival: a2sql.Store) -> datetime | None:
    store.append("s", [NewEvent("t", 1)])
    store.clock.rival = lambda: rival.append("s", [NewEvent("t", 2)])  # type: ignore[attr-defined]
    [event] = store.append("s", [NewEvent("t", 3)]).events
    return event.created_at


@race
def complete_after_an_append(store: a2sql.Store, rival: a2sql.Store) -> datetime | None:
    store.append("s", [NewEvent("t", 1)])
    store.claim_available("s", holder="w", ttl_ms=60_000)
    store.clock.rival = lambda: rival.append("s", [NewEvent("t", 2)])  # type: ignore[attr-defined]
    completed = store.complete_attempt("s", index=1, attempt=1, events=[NewEvent("r", 1, id="r1")])
    return completed.events[0].created_at


@race
def claim_after_a_release(store: a2sql.Store, rival: a2sql.Store) -> datetime | None:
    store.append("s", [NewEvent("t", 1)])

    def claim_and_release() -> None:
        rival.claim_available("s", holder="r", ttl_ms=60_000)
        rival.release_claims("s", holder="r", claims=[ClaimRef(1, 1)])

    store.clock.rival = claim_and_release  # type: ignore[attr-defined]
    return store.claim_available("s", holder="w", ttl_ms=60_000).events[0].last_claimed_at


@race
def claim_after_a_failure(store: a2sql.Store, rival: a2sql.Store) -> datetime | None:
    store.append("s", [NewEvent("t", 1)])

    def claim_and_fail() -> None:
        rival.claim_available("s", holder="r", ttl_ms=60_000)
        rival.fail_attempt("s", index=1, attempt=1, error="e", max_failures=3)

    store.clock.rival = claim_and_fail  # type: ignore[attr-defined]
    return store.claim_available("s", holder="w", ttl_ms=60_000).events[0].last_claimed_at


@race
def claim_after_an_append(store: a2sql.Store, rival: a2sql.Store) -> datetime | None:
    store.clock.rival = lambda: rival.append("s", [NewEvent("t", 1)])  # type: ignore[attr-defined]
    return store.claim_available("s", holder="w", ttl_ms=60_000).events[0].last_claimed_at


@race
def claim_after_its_lane_moved_on(store: a2sql.Store, rival: a2sql.Store) -> datetime | None:
    store.append("s", [NewEvent("t", 1, lane="L"), NewEvent("t", 2, lane="L")])

    def complete_the_lane_head() -> None:
        rival.claim_available("s", holder="r", ttl_ms=60_000)
        rival.complete_attempt("s", index=1, attempt=1, events=[])

    store.clock.rival = complete_the_lane_head  # type: ignore[attr-defined]
    [event] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert event.index == 2
    return event.last_claimed_at


@race
def fail_after_its_claim(store: a2sql.Store, rival: a2sql.Store) -> datetime | None:
    store.append("s", [NewEvent("t", 1)])
    # The attempt failed is the one the rival's claim takes meanwhile.
    store.clock.rival = lambda: rival.claim_available(  # type: ignore[attr-defined]
        "s", holder="r", ttl_ms=60_000
    )
    store.fail_attempt("s", index=1, attempt=1, error="e", max_failures=3)
    return store.read("s")[0].last_failed_at


@pytest.mark.parametrize("race", sorted(RACES))
def test_a_write_whose_clock_was_read_before_a_rival_wrote_carries_a_later_time(
    migrated_postgres_url: str, race: str
) -> None:
    """A call whose common case is one round trip reads the clock before it sends the
    session's lock and its statement. A rival that writes the session in between, with a
    later time: the time the call records is the rival's, never an earlier one
    (a2sql.sql.times), and it reads the clock once."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    clock = _RacingClock(t0, later=t0 + timedelta(seconds=10))
    with (
        a2sql.create_store(migrated_postgres_url, migrate=False, clock=clock) as store,
        a2sql.create_store(
            migrated_postgres_url, migrate=False, clock=FakeClock(t0 + timedelta(seconds=5))
        ) as rival,
    ):
        store.delete_session("s")
        assert RACES[race](store, rival) == t0 + timedelta(seconds=5)


def _failed_at(store: a2sql.Store) -> datetime | None:
    store.fail_attempt("s", index=1, attempt=1, error="e", max_failures=3)
    return store.read("s")[0].last_failed_at


@pytest.mark.parametrize("call", ["append", "claim_available", "complete_attempt", "fail_attempt"])
def test_a_write_that_waited_for_the_session_lock_carries_no_time_before_its_holders(
    migrated_postgres_url: str, call: str
) -> None:
    """A call's common case goes in one pipeline with the clock read before the lock
    (a2sql.backends.postgresql.one_statement): a write that waited for another writer,
    whose clock is ahead, carries that writer's time, never an earlier one. (Before the
    rule, the torture runs' lane check saw a claim stamped before its lane's previous
    event was done.)"""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ahead = t0 + timedelta(seconds=5)
    with (
        a2sql.create_store(migrated_postgres_url, migrate=False, clock=FakeClock(t0)) as store,
        a2sql.create_store(migrated_postgres_url, migrate=False, clock=FakeClock(ahead)) as other,
    ):
        store.append("s", [NewEvent("t", 1)])
        if call in ("complete_attempt", "fail_attempt"):
            store.claim_available("s", holder="w", ttl_ms=60_000)
        calls = {
            "append": lambda: store.append("s", [NewEvent("t", 2)]).events[0].created_at,
            "claim_available": lambda: (
                store.claim_available("s", holder="w", ttl_ms=60_000).events[0].last_claimed_at
            ),
            "complete_attempt": lambda: (
                store.complete_attempt("s", index=1, attempt=1, events=[NewEvent("r", 1, id="r1")])
                .events[0]
                .created_at
            ),
            "fail_attempt": lambda: _failed_at(store),
        }
        stamped: list[datetime | None] = []
        with other.begin() as connection:
            # The holder writes the session at its time, and holds its lock until it commits.
            other.using(connection).append("s", [NewEvent("held")])
            writer = threading.Thread(target=lambda: stamped.append(calls[call]()))
            writer.start()
            wait_until_a_lock_is_awaited(migrated_postgres_url)
        writer.join(10)
        assert stamped == [ahead]


def _lose_a_race_for(store: a2sql.Store, rival: a2sql.Store, event_id: str, url: str) -> None:
    """``store`` appends ``event_id`` while ``rival`` holds it uncommitted in another session:
    the fused statement waits on the unique index, then fails in its pipeline."""
    codes: list[ErrorCode] = []

    def append() -> None:
        try:
            store.append("s", [NewEvent("t", 0, id=event_id)])
        except A2Error as error:
            codes.append(error.code)

    with rival.begin() as connection:
        rival.using(connection).append("rival", [NewEvent("t", 0, id=event_id)])
        racer = threading.Thread(target=append)
        racer.start()
        wait_until_a_lock_is_awaited(url, "transactionid")
    racer.join(10)
    assert codes == [ErrorCode.PARTIAL_DUPLICATE_BATCH]


@pytest.mark.parametrize("between", range(6))
def test_a_failed_pipeline_leaves_the_connection_usable(
    migrated_postgres_url: str, between: int
) -> None:
    """Two calls that fail inside their pipeline, ``between`` calls apart, on a store's one
    connection, then calls that succeed. psycopg counts a statement as prepared once
    it has sent the request to prepare it; the server skips one sent after the failure
    in the same pipeline (COMMIT's, on its fifth run). a2sql rolls back through the
    driver, which then forgets what it prepared. Rolled back by a ROLLBACK statement
    instead, COMMIT stayed "prepared" on psycopg's side only, and every later call
    failed ("prepared statement does not exist")."""
    with (
        a2sql.create_store(migrated_postgres_url, migrate=False) as store,
        a2sql.create_store(migrated_postgres_url, migrate=False) as rival,
    ):
        _lose_a_race_for(store, rival, "first", migrated_postgres_url)
        for n in range(between):
            store.append("s", [NewEvent("t", n)])
        _lose_a_race_for(store, rival, "second", migrated_postgres_url)
        for n in range(6):
            store.append("s", [NewEvent("t", n)])
        assert len(store.read("s")) == between + 6
