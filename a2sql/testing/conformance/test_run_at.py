"""SPEC §7 Run at a time: ``NewEvent(available_at=...)`` holds an event until then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from a2sql import A2Error, ClaimResult, ErrorCode, NewEvent, Store
from a2sql.core.records import NO_TIMEOUT
from a2sql.testing import FakeClock

TEN_S = timedelta(seconds=10)


def test_a_later_event_is_busy_until_its_time_then_claimable(
    store: Store, clock: FakeClock
) -> None:
    """§7 run at: stored unclaimed with ``claim_expires_at = available_at``; ``busy`` with
    that ``retry_at`` until then, claimable from then on."""
    at = clock.now() + TEN_S
    [stored] = store.append("s", [NewEvent("later", available_at=at)]).events
    assert (stored.claim_expires_at, stored.claim_holder, stored.attempt_count) == (at, None, 0)
    assert store.read("s") == [stored]
    assert store.claim_available("s", holder="w", ttl_ms=1_000) == ClaimResult("busy", retry_at=at)
    clock.advance(ms=9_999)
    assert store.claim_available("s", holder="w", ttl_ms=1_000).outcome == "busy"
    clock.advance(ms=1)
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    assert (claimed.index, claimed.attempt_count) == (1, 1)


def test_claim_next_is_idle_until_a_later_event_is_due(store: Store, clock: FakeClock) -> None:
    """§7 run at: ``claim_next`` passes a later event over and answers ``idle`` with its
    time as ``retry_at`` when it is the only work; then claims it."""
    at = clock.now() + TEN_S
    store.append("s", [NewEvent("later", available_at=at)])
    idle = store.claim_next(holder="w", ttl_ms=1_000)
    assert (idle.outcome, idle.retry_at) == ("idle", at)
    clock.set(at)
    claimed = store.claim_next(holder="w", ttl_ms=1_000)
    assert (claimed.outcome, claimed.session_id, [e.index for e in claimed.events]) == (
        "claimed",
        "s",
        [1],
    )


def test_a_time_at_or_before_now_is_claimable_at_once(store: Store, clock: FakeClock) -> None:
    """§7 run at: ``available_at`` now or past stores an ordinary event."""
    now = clock.now()
    events = [NewEvent("now", available_at=now), NewEvent("past", available_at=now - TEN_S)]
    stored = store.append("s", events).events
    assert [event.claim_expires_at for event in stored] == [None, None]
    claimed = store.claim_available("s", holder="w", ttl_ms=1_000)
    assert [event.index for event in claimed.events] == [1, 2]


def test_a_later_event_holds_its_lane_until_then(store: Store, clock: FakeClock) -> None:
    """§7 run at: lanes are FIFO, so the events behind a later one wait for it; another
    lane's events do not."""
    at = clock.now() + TEN_S
    store.append(
        "s",
        [
            NewEvent("first", lane="L", available_at=at),
            NewEvent("second", lane="L"),
            NewEvent("other", lane="M"),
        ],
    )
    claim = store.claim_available("s", holder="w", ttl_ms=60_000)
    assert [event.index for event in claim.events] == [3]
    assert store.claim_available("s", holder="w", ttl_ms=60_000) == ClaimResult("busy", retry_at=at)
    clock.set(at)
    [first] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert first.index == 1
    store.complete_attempt("s", index=1, attempt=first.attempt_count, events=[])
    [second] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert second.index == 2


def test_a_settled_event_ignores_available_at(store: Store, clock: FakeClock) -> None:
    """§7 run at: a settled event is stored processed, with no claim expiry."""
    [stored] = store.append(
        "s", [NewEvent("done", settled=True, available_at=clock.now() + TEN_S)]
    ).events
    assert (stored.processed_at, stored.claim_expires_at) == (clock.now(), None)
    assert store.claim_available("s", holder="w", ttl_ms=1_000).outcome == "settled"


def test_a_completion_can_return_a_later_event(store: Store, clock: FakeClock) -> None:
    """§7 run at: an event a completion returns with ``available_at`` waits until then
    ("follow up in two days")."""
    store.append("s", [NewEvent("job")])
    [job] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    at = clock.now() + timedelta(days=2)
    done = store.complete_attempt(
        "s",
        index=1,
        attempt=job.attempt_count,
        events=[NewEvent("follow-up", id="f1", available_at=at)],
    )
    [follow_up] = done.events
    assert follow_up.claim_expires_at == at
    assert store.claim_available("s", holder="w", ttl_ms=1_000) == ClaimResult("busy", retry_at=at)
    clock.set(at)
    assert [e.index for e in store.claim_available("s", holder="w", ttl_ms=1_000).events] == [2]


def test_available_at_is_kept_to_the_millisecond_in_utc(store: Store, clock: FakeClock) -> None:
    """§7 run at: like every time a store keeps, in UTC, truncated to the millisecond."""
    local = timezone(timedelta(hours=2))
    at = (clock.now() + TEN_S).astimezone(local) + timedelta(microseconds=999)
    [stored] = store.append("s", [NewEvent("later", available_at=at)]).events
    assert stored.claim_expires_at == (clock.now() + TEN_S)
    assert store.read("s")[0].claim_expires_at == clock.now() + TEN_S


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (datetime(2030, 1, 1), "timezone-aware"),  # naive
        ("2030-01-01T00:00:00Z", "must be a datetime"),
        (NO_TIMEOUT, "must be before"),
        (datetime(9999, 12, 31, tzinfo=UTC), "must be before"),
    ],
)
def test_a_bad_available_at_is_refused_and_writes_nothing(
    store: Store, value: object, says: str
) -> None:
    """§7 run at: an aware datetime before 9999-01-01, or ``INVALID_ARGUMENT``."""
    with pytest.raises(A2Error) as raised:
        store.append("s", [NewEvent("later", available_at=value)])  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert "available_at" in raised.value.message and says in raised.value.message
    assert store.read("s") == []
