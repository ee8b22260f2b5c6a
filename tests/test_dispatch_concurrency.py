"""claim_next under concurrency on PostgreSQL: callers pass over each other's sessions."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

import a2sql
from a2sql import NewEvent, Store
from a2sql.testing import FakeClock

HOLD_S = 0.5  # each caller keeps its transaction (and the session's lock) this long


@pytest.fixture
def store(postgres_url: str) -> Iterator[Store]:
    with a2sql.create_store(postgres_url, migrate=True) as opened:
        yield opened


def claim_and_hold(store: Store, holder: str) -> str | None:
    """claim_next in a transaction that stays open HOLD_S after the claim."""
    with store.begin() as connection:
        dispatch = store.using(connection).claim_next(holder=holder, ttl_ms=60_000)
        time.sleep(HOLD_S)
    return dispatch.session_id


def test_eight_concurrent_callers_get_eight_sessions_without_waiting(store: Store) -> None:
    """8 callers over 8 ready sessions, each holding its transaction open: each gets a
    different session, and none waits for another's lock (the wall time is about one
    caller's, not eight)."""
    for n in range(9):
        store.append(f"s{n}", [NewEvent("t")])
    # Eight connections opened beforehand: what is timed is the claims, not connecting.
    warm = [store.engine.connect() for _ in range(8)]
    for connection in warm:
        connection.close()
    started = time.monotonic()
    assert claim_and_hold(store, "alone") == "s0"
    alone = time.monotonic() - started

    got: list[str | None] = []
    barrier = threading.Barrier(8)

    def caller(n: int) -> None:
        barrier.wait()
        got.append(claim_and_hold(store, f"w{n}"))

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    together = time.monotonic() - started
    assert sorted(s for s in got if s is not None) == [f"s{n}" for n in range(1, 9)]
    # Serialized on each other's locks, eight would take 8 x HOLD_S.
    assert together < 2 * alone, (together, alone)
    assert all(e.attempt_count == 1 for n in range(9) for e in store.read(f"s{n}"))


def test_a_caller_passes_over_a_locked_session_and_reports_it_claimable_now(
    store: Store,
) -> None:
    """The only session with work is locked by another transaction: claim_next does not
    wait; it is idle with retry_at = now (work exists, held elsewhere)."""
    store.append("only", [NewEvent("t")])
    with store.begin() as holder:
        store.using(holder).append("only", [NewEvent("t2")])  # takes the session's lock
        started = time.monotonic()
        dispatch = store.claim_next(holder="w", ttl_ms=1000)
        assert time.monotonic() - started < 2
        assert dispatch.outcome == "idle" and dispatch.retry_at is not None
    assert store.claim_next(holder="w", ttl_ms=1000).session_id == "only"


class _LateClock:
    """A clock whose first reading in an operation is taken before ``release`` is set
    and returned after it: as if the caller read the time, then was descheduled
    meanwhile. (Reading 0 is create_store's check of the clock.)"""

    def __init__(self, first: datetime, then: datetime, release: threading.Event) -> None:
        self.first, self.then, self.release = first, then, release
        self.readings = -1

    def now(self) -> datetime:
        self.readings += 1
        if self.readings == 0:
            return self.first
        if self.readings == 1:
            assert self.release.wait(30)
            return self.first
        return self.then


def test_a_claim_is_timed_after_what_the_session_lock_held_back(postgres_url: str) -> None:
    """claim_next reads its clock again once it holds the session's lock: a claim of
    the lane head promoted by a completion that committed meanwhile is timed after
    that completion, never before it (as every write on a locked session is)."""
    start = datetime(2026, 5, 1, tzinfo=UTC)
    clock = FakeClock(start)
    with a2sql.create_store(postgres_url, clock=clock, migrate=True) as writer:
        writer.append("s", [NewEvent("head", lane="L"), NewEvent("next", lane="L")])
        [head] = writer.claim_available("s", holder="w1", ttl_ms=60_000).events
        committed = threading.Event()
        late = _LateClock(start, start + timedelta(milliseconds=20), committed)
        with a2sql.create_store(postgres_url, clock=late) as claimer:
            result: list[a2sql.Dispatch] = []
            thread = threading.Thread(
                target=lambda: result.append(claimer.claim_next(holder="w2", ttl_ms=1000))
            )
            thread.start()
            clock.advance(ms=10)
            done = writer.complete_attempt("s", index=head.index, attempt=1, events=[])
            assert done.outcome == "completed"
            committed.set()
            thread.join(30)
    [dispatch] = result
    [claimed] = dispatch.events
    assert claimed.index == 2
    assert claimed.last_claimed_at == start + timedelta(milliseconds=20)
    assert claimed.last_claimed_at > start + timedelta(milliseconds=10)  # the completion's time
