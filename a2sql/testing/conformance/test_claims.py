"""SPEC §3 claim_available: what is claimed, how, and busy / settled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from a2sql import EventCause, NewEvent, Store, StoredEvent
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
START_MS = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def test_claim_takes_every_eligible_event_in_index_order(store: Store, clock: FakeClock) -> None:
    """§3 claim_available: every ready, free event is claimed, attempt+1, times and holder set."""
    clock.set(START)
    store.append("s", [NewEvent("t", id="a"), NewEvent("t", id="b")])
    store.append("s", [NewEvent("t", id="c")])
    store.append("other", [NewEvent("t", id="x")])

    result = store.claim_available("s", holder="worker-1", ttl_ms=30_000)
    assert result.outcome == "claimed"
    assert result.retry_at is None
    assert [e.index for e in result.events] == [1, 2, 3]
    for event in result.events:
        assert event.attempt_count == 1
        assert event.first_claimed_at == START_MS
        assert event.last_claimed_at == START_MS
        assert event.claim_holder == "worker-1"
        assert event.claim_expires_at == START_MS + ms(30_000)
        assert event.processed_at is None
    assert result.events == store.read("s")
    assert store.read("other")[0].attempt_count == 0


def test_claim_uses_explicit_expires_at_instead_of_ttl(store: Store, clock: FakeClock) -> None:
    """§3 claim_available: claim_expires_at = expires_at when given (stored in ms)."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    expires_at = datetime(2026, 3, 4, 6, 0, 0, 456789, tzinfo=UTC)
    [event] = store.claim_available("s", holder="w", ttl_ms=1, expires_at=expires_at).events
    assert event.claim_expires_at == datetime(2026, 3, 4, 6, 0, 0, 456000, tzinfo=UTC)
    assert store.read("s")[0].claim_expires_at == event.claim_expires_at


def test_claim_busy_reports_earliest_unexpired_claim_as_retry_at(
    store: Store, clock: FakeClock
) -> None:
    """§3 claim_available: nothing claimable but live claims: busy, retry_at = earliest expiry."""
    clock.set(START)
    store.append("s", [NewEvent("t", id="a")])
    store.claim_available("s", holder="w1", ttl_ms=10_000)
    clock.advance(ms=1000)
    store.append("s", [NewEvent("t", id="b")])
    store.claim_available("s", holder="w2", ttl_ms=5_000)
    clock.advance(ms=1000)
    before = store.read("s")

    result = store.claim_available("s", holder="w3", ttl_ms=1000)
    assert result.outcome == "busy"
    assert result.events == []
    assert result.retry_at == START_MS + ms(6_000)
    assert store.read("s") == before


def test_claim_does_not_reclaim_a_live_claim_of_the_same_holder(
    store: Store, clock: FakeClock
) -> None:
    """§3 claim_available: only unclaimed or expired events are claimed, whoever asks."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    store.claim_available("s", holder="w", ttl_ms=1000)
    result = store.claim_available("s", holder="w", ttl_ms=1000)
    assert (result.outcome, result.retry_at) == ("busy", START_MS + ms(1000))
    assert store.read("s")[0].attempt_count == 1


def test_claim_is_settled_when_nothing_is_pending(store: Store, clock: FakeClock) -> None:
    """§3 claim_available: no claimable event and no live claim: settled, no events."""
    empty = store.claim_available("s", holder="w", ttl_ms=1000)
    assert (empty.outcome, empty.events, empty.retry_at) == ("settled", [], None)

    store.append("s", [NewEvent("t"), NewEvent("t", settled=True)])
    store.claim_available("s", holder="w", ttl_ms=1000)
    store.complete_attempt("s", index=1, attempt=1, events=[])
    clock.advance(seconds=60)
    done = store.claim_available("s", holder="w", ttl_ms=1000)
    assert (done.outcome, done.events, done.retry_at) == ("settled", [], None)


def test_claim_skips_excluded_indexes(store: Store) -> None:
    """§3 claim_available: events in exclude_indexes are not claimed and stay claimable."""
    store.append("s", [NewEvent("t", id=f"e{n}") for n in range(1, 5)])
    result = store.claim_available("s", holder="w", ttl_ms=1000, exclude_indexes=[2, 4, 9])
    assert [e.index for e in result.events] == [1, 3]
    assert [e.attempt_count for e in store.read("s")] == [1, 0, 1, 0]

    later = store.claim_available("s", holder="w2", ttl_ms=1000)
    assert [(e.index, e.claim_holder) for e in later.events] == [(2, "w2"), (4, "w2")]


def test_claim_excluding_every_free_event_without_live_claims_is_settled(store: Store) -> None:
    """§3 claim_available: retry_at counts only unexpired claims; none means settled."""
    store.append("s", [NewEvent("t"), NewEvent("t")])
    result = store.claim_available("s", holder="w", ttl_ms=1000, exclude_indexes=[1, 2])
    assert (result.outcome, result.events, result.retry_at) == ("settled", [], None)
    assert [e.attempt_count for e in store.read("s")] == [0, 0]


def test_claim_reclaims_expired_claim_exactly_at_expiry_for_another_holder(
    store: Store, clock: FakeClock
) -> None:
    """§3 claim_available: a claim with claim_expires_at <= now is claimed again, attempt+1."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    store.claim_available("s", holder="w1", ttl_ms=1000)

    clock.advance(ms=999)
    assert store.claim_available("s", holder="w2", ttl_ms=1000).outcome == "busy"

    clock.advance(ms=1)
    result = store.claim_available("s", holder="w2", ttl_ms=2000)
    assert result.outcome == "claimed"
    [event] = result.events
    assert event.attempt_count == 2
    assert event.claim_holder == "w2"
    assert event.first_claimed_at == START_MS
    assert event.last_claimed_at == START_MS + ms(1000)
    assert event.claim_expires_at == START_MS + ms(3000)
    assert store.read("s") == [event]


def test_claim_never_takes_processed_or_dead_lettered_events(
    store: Store, clock: FakeClock
) -> None:
    """§3 claim_available: processed and dead-lettered events are never claimed again."""
    store.append("s", [NewEvent("t", id="done"), NewEvent("t", id="dead"), NewEvent("t", id="ok")])
    store.claim_available("s", holder="w", ttl_ms=1000)
    store.complete_attempt("s", index=1, attempt=1, events=[])
    store.fail_attempt("s", index=2, attempt=1, error="boom", max_failures=1)
    store.fail_attempt("s", index=3, attempt=1, error="retry", max_failures=5)
    clock.advance(seconds=3600)

    result = store.claim_available("s", holder="w", ttl_ms=1000)
    assert [e.id for e in result.events] == ["ok"]
    store.complete_attempt("s", index=3, attempt=2, events=[])
    clock.advance(seconds=3600)
    assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "settled"
    assert [e.attempt_count for e in store.read("s")] == [1, 1, 2]


def test_claimed_events_are_the_stored_rows_to_the_field_and_time_zone(
    store: Store, clock: FakeClock
) -> None:
    """§3 claim_available: each claimed event is what a read returns right after, field by
    field, with every time in UTC, whatever zones the clock and expires_at are given in;
    a reclaim after a failure keeps first_claimed_at and the failure fields."""

    def fields(event: StoredEvent) -> list[tuple[str, str]]:
        # repr() tells a time in another zone from the same instant in UTC.
        return [(name, repr(getattr(event, name))) for name in StoredEvent.__dataclass_fields__]

    def assert_as_stored(claimed: list[StoredEvent]) -> None:
        stored = {e.index: e for e in store.read("s")}
        for event in claimed:
            assert fields(event) == fields(stored[event.index])

    clock.set(START.astimezone(timezone(timedelta(hours=9))))
    expires_at = (START + ms(5000)).astimezone(timezone(timedelta(hours=-3)))
    store.append("s", [NewEvent("t", {"k": [1, "é"]}, id="a", lane="L")])
    first = store.claim_available("s", holder="w1", ttl_ms=1, expires_at=expires_at).events
    assert_as_stored(first)
    store.append("s", [NewEvent("t", None, id="b", cause=EventCause(1, 1))])
    second = store.claim_available("s", holder="w1", ttl_ms=1, expires_at=expires_at).events
    assert [e.id for e in second] == ["b"]
    assert_as_stored(second)
    store.fail_attempt("s", index=1, attempt=1, error="boom", max_failures=3)

    clock.advance(ms=10_000)
    third = store.claim_available("s", holder="w2", ttl_ms=2000).events
    assert [(e.id, e.attempt_count) for e in third] == [("a", 2), ("b", 2)]
    assert_as_stored(third)
    assert (third[0].failure_count, third[0].last_error) == (1, "boom")
    assert third[0].first_claimed_at == START_MS
    assert third[0].claim_expires_at == START_MS + ms(12_000)
