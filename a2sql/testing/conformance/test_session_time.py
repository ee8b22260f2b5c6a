"""Times never go backwards in a session (docs/contract.md, "Times").

A write records the store's clock, unless something already happened in its
session later than that: then the latest such time. Two hosts whose clocks
are a few milliseconds apart write one session in the order its lock gives
them, and the times they record follow that order. Here the store's clock,
moved back 20 ms, plays the host whose clock lags (on SQLite memory a second
store would have a database of its own).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from a2sql import ClaimRef, Dispatch, FailResult, NewEvent, Store
from a2sql.testing import FakeClock

AHEAD = datetime(2026, 5, 6, 7, 8, 9, 500_000, tzinfo=UTC)
# The lagging host's clock: 20 ms behind.
BEHIND = AHEAD - timedelta(milliseconds=20)


def test_an_append_is_never_created_before_the_sessions_last_event(
    store: Store, clock: FakeClock
) -> None:
    """Appended on a lagging clock after an event created later: created at that time,
    so created_at never decreases along the index; a later clock is recorded as is."""
    clock.set(AHEAD)
    store.append("s", [NewEvent("a")])
    clock.set(BEHIND)
    [b, c] = store.append("s", [NewEvent("b"), NewEvent("c")]).events
    assert (b.created_at, c.created_at) == (AHEAD, AHEAD)
    clock.set(AHEAD + timedelta(milliseconds=5))
    [d] = store.append("s", [NewEvent("d")]).events
    assert d.created_at == AHEAD + timedelta(milliseconds=5)
    created = [event.created_at for event in store.read("s")]
    assert created == sorted(created)
    assert created == [AHEAD, AHEAD, AHEAD, AHEAD + timedelta(milliseconds=5)]


def test_another_session_keeps_its_own_clock(store: Store, clock: FakeClock) -> None:
    """Only the session's own times count: an event created later in another session
    leaves this one's times to the clock."""
    clock.set(AHEAD)
    store.append("other", [NewEvent("a")])
    clock.set(BEHIND)
    [event] = store.append("s", [NewEvent("b")]).events
    assert event.created_at == BEHIND


def test_a_claim_on_a_lagging_clock_is_not_before_the_events_creation(
    store: Store, clock: FakeClock
) -> None:
    """claim_available and claim_next record the later time, and the lease runs from it."""
    clock.set(AHEAD)
    store.append("s", [NewEvent("a")])
    clock.set(BEHIND)
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1000).events
    assert claimed.first_claimed_at == claimed.last_claimed_at == AHEAD
    assert claimed.claim_expires_at == AHEAD + timedelta(milliseconds=1000)
    clock.set(AHEAD)
    store.append("t", [NewEvent("a")])
    clock.set(BEHIND)
    dispatch = store.claim_next(holder="w", ttl_ms=1000)
    assert isinstance(dispatch, Dispatch) and dispatch.outcome == "claimed"
    [taken] = dispatch.events
    assert taken.last_claimed_at == AHEAD
    assert taken.claim_expires_at == AHEAD + timedelta(milliseconds=1000)
    assert store.read("s") == [claimed]
    assert store.read("t") == [taken]


def test_a_completion_on_a_lagging_clock_is_not_before_its_claim(
    store: Store, clock: FakeClock
) -> None:
    """Claimed on the clock ahead, completed on the one behind: processed at the claim's
    time, and the returned events created then too."""
    clock.set(BEHIND)
    store.append("s", [NewEvent("job")])
    clock.set(AHEAD)
    [claimed] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert claimed.last_claimed_at == AHEAD
    clock.set(BEHIND)
    result = store.complete_attempt(
        "s", index=1, attempt=claimed.attempt_count, events=[NewEvent("child", id="child")]
    )
    [child] = result.events
    parent, stored_child = store.read("s")
    assert parent.processed_at == AHEAD
    assert child.created_at == stored_child.created_at == AHEAD


def test_an_empty_completion_on_a_lagging_clock_is_not_before_its_claim(
    store: Store, clock: FakeClock
) -> None:
    clock.set(BEHIND)
    store.append("s", [NewEvent("job")])
    clock.set(AHEAD)
    [claimed] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    clock.set(BEHIND)
    assert store.complete_attempt(
        "s", index=1, attempt=claimed.attempt_count, events=[]
    ).outcome == ("completed")
    [parent] = store.read("s")
    assert parent.processed_at == AHEAD


def test_a_failure_on_a_lagging_clock_is_not_before_its_claim_and_its_delay_runs_from_it(
    store: Store, clock: FakeClock
) -> None:
    clock.set(BEHIND)
    store.append("s", [NewEvent("job"), NewEvent("other")])
    clock.set(AHEAD)
    [first, second] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    clock.set(BEHIND)
    delayed = store.fail_attempt(
        "s", index=1, attempt=first.attempt_count, error="x", max_failures=3, retry_after_ms=250
    )
    assert delayed == FailResult("failed", 1, retry_at=AHEAD + timedelta(milliseconds=250))
    dead = store.fail_attempt("s", index=2, attempt=second.attempt_count, error="x", max_failures=1)
    assert dead.outcome == "dead_lettered"
    one, two = store.read("s")
    assert one.last_failed_at == AHEAD
    assert one.claim_expires_at == AHEAD + timedelta(milliseconds=250)
    assert two.last_failed_at == two.failed_at == AHEAD


def test_a_claim_after_a_failure_on_a_clock_ahead_is_not_before_the_failure(
    store: Store, clock: FakeClock
) -> None:
    """A failure without a delay frees the event at the failure's time: a claim on a
    lagging clock records that time, not its own."""
    clock.set(BEHIND)
    store.append("s", [NewEvent("job")])
    [first] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    clock.set(AHEAD)
    store.fail_attempt("s", index=1, attempt=first.attempt_count, error="x", max_failures=3)
    clock.set(BEHIND)
    [again] = store.claim_available("s", holder="w", ttl_ms=1000).events
    assert again.last_claimed_at == AHEAD
    assert again.first_claimed_at == BEHIND  # the first claim's, as it was


def test_a_skip_on_a_lagging_clock_is_not_before_the_sessions_last_event(
    store: Store, clock: FakeClock
) -> None:
    clock.set(AHEAD)
    store.append("s", [NewEvent("job")])
    clock.set(BEHIND)
    assert store.skip_event("s", index=1, reason="operator").outcome == "skipped"
    [event] = store.read("s")
    assert event.processed_at == AHEAD


def test_a_claim_after_a_release_on_a_clock_ahead_is_not_before_that_claim(
    store: Store, clock: FakeClock
) -> None:
    clock.set(BEHIND)
    store.append("s", [NewEvent("job")])
    clock.set(AHEAD)
    [first] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.release_claims("s", holder="w", claims=[ClaimRef(1, first.attempt_count)])
    clock.set(BEHIND)
    [again] = store.claim_available("s", holder="v", ttl_ms=1000).events
    assert again.last_claimed_at == AHEAD


def test_a_lanes_next_event_is_not_claimed_before_its_lane_moved_on(
    store: Store, clock: FakeClock
) -> None:
    """The event after a lane's head becomes ready when the head is processed: claimed on
    a lagging clock, it records that time."""
    clock.set(BEHIND)
    store.append("s", [NewEvent("a", lane="L"), NewEvent("b", lane="L")])
    [head] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    clock.set(AHEAD)
    store.complete_attempt("s", index=1, attempt=head.attempt_count, events=[])
    clock.set(BEHIND)
    [second] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert (second.index, second.last_claimed_at) == (2, AHEAD)


def test_a_lanes_next_event_far_from_its_head_is_not_claimed_before_its_lane_moved_on(
    store: Store, clock: FakeClock
) -> None:
    """The same with forty events between the two (a store may look for the head's time
    among the nearest events only, and take the latest time a lane moved on past them)."""
    clock.set(BEHIND)
    store.append("s", [NewEvent("a", lane="L")])
    store.append("s", [NewEvent("x", settled=True) for _ in range(40)])
    store.append("s", [NewEvent("b", lane="L")])
    [head] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert head.index == 1
    clock.set(AHEAD)
    store.complete_attempt("s", index=1, attempt=head.attempt_count, events=[])
    clock.set(BEHIND)
    [second] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert (second.index, second.last_claimed_at) == (42, AHEAD)
