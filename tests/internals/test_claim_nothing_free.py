"""A claim that finds nothing free on PostgreSQL: its one statement
(a2sql.backends.postgresql.one_statement)
answers until when the session is busy, or that it is settled, with no second
statement and no second transaction. Every idle poll of a session and every claim
that loses a shared session to another worker is such a claim."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event

import a2sql
from a2sql import ClaimResult, NewEvent, Store
from a2sql.testing import FakeClock
from bench.round_trips import Counter
from tests.holding import wait_until_a_lock_is_awaited

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EXPIRY = T0 + timedelta(minutes=1)


def _settled(store: Store) -> dict[str, Any]:
    store.append("s", [NewEvent("t", 1, settled=True)])
    return {}


def _busy(store: Store) -> dict[str, Any]:
    store.append("s", [NewEvent("t", 1), NewEvent("t", 2, lane="L"), NewEvent("t", 3, lane="L")])
    store.claim_available("s", holder="other", ttl_ms=60_000)
    return {}


def _free_but_excluded(store: Store) -> dict[str, Any]:
    store.append("s", [NewEvent("t", 1), NewEvent("t", 2)])
    store.claim_available("s", holder="other", ttl_ms=60_000, limit=1)
    return {"exclude_indexes": [2]}


def _busy_with_a_limit(store: Store) -> dict[str, Any]:
    _busy(store)
    return {"limit": 1}


# Each: the session made, the claim's arguments, and what the claim answers.
SESSIONS: dict[str, tuple[Callable[[Store], dict[str, Any]], ClaimResult]] = {
    "settled": (_settled, ClaimResult("settled")),
    "busy": (_busy, ClaimResult("busy", retry_at=EXPIRY)),
    "free_but_excluded": (_free_but_excluded, ClaimResult("busy", retry_at=EXPIRY)),
    "busy_with_a_limit": (_busy_with_a_limit, ClaimResult("busy", retry_at=EXPIRY)),
}


@pytest.mark.parametrize("session", sorted(SESSIONS))
def test_a_claim_that_finds_nothing_free_is_one_round_trip(
    migrated_postgres_url: str, session: str
) -> None:
    """The lock and the claim, sent at once: two statements, one round trip, one
    transaction (before, nothing free cost 11 statements over three transactions: the
    claim after the lock, then the full path's claim and its read of the next expiry)."""
    make, expected = SESSIONS[session]
    counter = Counter()
    engine = counter.engine(migrated_postgres_url)
    try:
        with a2sql.create_store(engine, migrate=False, clock=FakeClock(T0)) as store:
            arguments = make(store)
            statements, trips = counter.statements, counter.round_trips
            claim = store.claim_available("s", holder="w", ttl_ms=60_000, **arguments)
            assert (counter.statements - statements, counter.round_trips - trips) == (2, 1)
            assert claim == expected
            again = store.claim_available("s", holder="w", ttl_ms=60_000, **arguments)
            assert again == expected  # it wrote nothing
    finally:
        engine.dispose()
        counter.close()


@pytest.mark.parametrize("session", sorted(SESSIONS))
def test_in_the_callers_transaction_a_claim_that_finds_nothing_is_one_statement(
    migrated_postgres_url: str, session: str
) -> None:
    """In the caller's transaction: the lock, then the claim that answers (before, the
    claim, then the read of the next expiry)."""
    make, expected = SESSIONS[session]
    with a2sql.create_store(migrated_postgres_url, migrate=False, clock=FakeClock(T0)) as store:
        arguments = make(store)
        sent: list[str] = []
        with store.begin() as connection:

            @event.listens_for(connection, "before_cursor_execute")
            def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
                sent.append(statement)

            claim = store.using(connection).claim_available(
                "s", holder="w", ttl_ms=60_000, **arguments
            )
        assert claim == expected
        # Besides the savepoint around the call and the checks of the caller's connection:
        [lock, answer] = [sql for sql in sent if "advisory_xact_lock" in sql or "a2_events" in sql]
        assert "advisory_xact_lock" in lock
        assert answer.startswith("WITH claimed AS")


def test_a_claim_that_found_the_lock_held_answers_from_what_its_holder_committed(
    migrated_postgres_url: str,
) -> None:
    """A session with nothing free whose lock is held by a writer about to append: the
    claim that tried the lock in vain does not answer "settled" from what it saw then;
    it waits for the lock and claims what the writer appended."""
    with (
        a2sql.create_store(migrated_postgres_url, migrate=False) as store,
        a2sql.create_store(migrated_postgres_url, migrate=False) as writer,
    ):
        store.append("s", [NewEvent("t", 1, settled=True)])
        claims: list[ClaimResult] = []
        claiming = threading.Thread(
            target=lambda: claims.append(store.claim_available("s", holder="w", ttl_ms=60_000))
        )
        with writer.begin() as connection:
            writer.using(connection).append("s", [NewEvent("t", 2, id="late")])
            claiming.start()
            wait_until_a_lock_is_awaited(migrated_postgres_url)
        claiming.join(10)
        [claim] = claims
        assert claim.outcome == "claimed"
        assert [e.id for e in claim.events] == ["late"]
