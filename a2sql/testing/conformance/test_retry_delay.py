"""SPEC §6 retry delays (fail_attempt's retry_after_ms) and claim limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from a2sql import A2Error, ClaimResult, ErrorCode, FailResult, NewEvent, Store
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def claimed_job(store: Store, clock: FakeClock) -> int:
    clock.set(START)
    store.append("s", [NewEvent("job")])
    [event] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    return event.attempt_count


def test_failure_with_a_delay_is_claimable_only_when_it_ends(
    store: Store, clock: FakeClock
) -> None:
    """§6 fail_attempt: ``retry_after_ms`` makes the event claimable at now + delay."""
    attempt = claimed_job(store, clock)
    result = store.fail_attempt(
        "s", index=1, attempt=attempt, error="x", max_failures=3, retry_after_ms=1500
    )
    assert result == FailResult("failed", 1, retry_at=START + ms(1500))
    [event] = store.read("s")
    # The claim is released; the expiry column holds the end of the delay.
    assert (event.claim_holder, event.claim_expires_at) == (None, START + ms(1500))
    assert store.claim_available("s", holder="w", ttl_ms=1000) == ClaimResult(
        "busy", retry_at=START + ms(1500)
    )
    clock.advance(ms=1499)
    assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "busy"
    clock.advance(ms=1)
    [again] = store.claim_available("s", holder="w", ttl_ms=1000).events
    assert again.attempt_count == attempt + 1


def test_failure_without_a_delay_is_claimable_at_once(store: Store, clock: FakeClock) -> None:
    """§6 fail_attempt: no delay (or 0) is claimable at once, with ``retry_at`` unset."""
    for delay in (None, 0):
        store.append(f"d{delay}", [NewEvent("job")])
        [event] = store.claim_available(f"d{delay}", holder="w", ttl_ms=1000).events
        result = store.fail_attempt(
            f"d{delay}", index=1, attempt=1, error="x", max_failures=3, retry_after_ms=delay
        )
        assert result == FailResult("failed", 1, retry_at=None)
        assert store.claim_available(f"d{delay}", holder="w", ttl_ms=1000).outcome == "claimed"
        assert event.attempt_count == 1


def test_a_dead_letter_ignores_the_delay(store: Store, clock: FakeClock) -> None:
    """§6 fail_attempt: the delay applies to ``failed`` only; a dead letter is never claimed."""
    attempt = claimed_job(store, clock)
    result = store.fail_attempt(
        "s", index=1, attempt=attempt, error="x", max_failures=1, retry_after_ms=1000
    )
    assert result == FailResult("dead_lettered", 1, retry_at=None)
    [event] = store.read("s")
    assert (event.claim_expires_at, event.failed_at) == (None, START)
    assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "settled"


def test_a_retried_delayed_failure_reports_the_same_retry_time(
    store: Store, clock: FakeClock
) -> None:
    """§6 fail_attempt: the retried call is ``failed`` again with the stored delay."""
    attempt = claimed_job(store, clock)
    first = store.fail_attempt(
        "s", index=1, attempt=attempt, error="x", max_failures=3, retry_after_ms=800
    )
    clock.advance(ms=100)
    again = store.fail_attempt(
        "s", index=1, attempt=attempt, error="x", max_failures=3, retry_after_ms=800
    )
    assert again == first == FailResult("failed", 1, retry_at=START + ms(800))
    clock.advance(ms=700)
    late = store.fail_attempt("s", index=1, attempt=attempt, error="x", max_failures=3)
    assert late == FailResult("failed", 1, retry_at=None)


def test_a_delayed_event_is_not_renewable_or_completable_by_the_failed_attempt(
    store: Store, clock: FakeClock
) -> None:
    """§6: during its delay the event is held by nobody; the failed attempt is done."""
    from a2sql import ClaimRef

    attempt = claimed_job(store, clock)
    store.fail_attempt("s", index=1, attempt=attempt, error="x", max_failures=3, retry_after_ms=500)
    renewed = store.renew_claims("s", holder="w", claims=[ClaimRef(1, attempt)], ttl_ms=1000)
    assert (renewed.renewed, renewed.superseded) == ([], [])
    assert store.complete_attempt("s", index=1, attempt=attempt, events=[]).outcome == "superseded"


@pytest.mark.parametrize("delay", [-1, True, 1.5, "5", 100 * 365 * 24 * 3600 * 1000 + 1])
def test_fail_refuses_a_bad_delay(store: Store, clock: FakeClock, delay: object) -> None:
    """§4 on fail_attempt: ``retry_after_ms`` not an int in 0..100 years is refused."""
    attempt = claimed_job(store, clock)
    with pytest.raises(A2Error) as raised:
        store.fail_attempt(
            "s",
            index=1,
            attempt=attempt,
            error="x",
            max_failures=3,
            retry_after_ms=delay,  # type: ignore[arg-type]
        )
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert "retry_after_ms" in str(raised.value)
    assert store.read("s")[0].failure_count == 0


def test_claim_available_limit_takes_the_lowest_indexes_first(
    store: Store, clock: FakeClock
) -> None:
    """§6 claim limits: at most ``limit`` events, lowest indexes first."""
    clock.set(START)
    store.append("s", [NewEvent("t") for _ in range(5)])
    taken = store.claim_available("s", holder="w", ttl_ms=1000, limit=2)
    assert [e.index for e in taken.events] == [1, 2]
    rest = store.claim_available("s", holder="w", ttl_ms=1000, limit=1000)
    assert [e.index for e in rest.events] == [3, 4, 5]
    assert store.claim_available("s", holder="w", ttl_ms=1000, limit=1).outcome == "busy"


def test_claim_available_limit_with_excluded_indexes(store: Store, clock: FakeClock) -> None:
    """§6 claim limits: the limit counts what is claimable after the exclusions."""
    clock.set(START)
    store.append("s", [NewEvent("t") for _ in range(5)])
    taken = store.claim_available("s", holder="w", ttl_ms=1000, limit=2, exclude_indexes=[1, 3])
    assert [e.index for e in taken.events] == [2, 4]


def test_claim_available_limit_counts_only_ready_events(store: Store, clock: FakeClock) -> None:
    """§6 claim limits: events waiting in a lane neither count nor get claimed."""
    clock.set(START)
    store.append("s", [NewEvent("a", lane="L"), NewEvent("b", lane="L"), NewEvent("c")])
    taken = store.claim_available("s", holder="w", ttl_ms=1000, limit=2)
    assert [e.index for e in taken.events] == [1, 3]


def test_claim_available_without_limit_claims_everything(store: Store, clock: FakeClock) -> None:
    """§6 claim limits: ``None`` claims every claimable event, as the seed does."""
    clock.set(START)
    store.append("s", [NewEvent("t") for _ in range(1200)])
    assert len(store.claim_available("s", holder="w", ttl_ms=1000, limit=None).events) == 1200


@pytest.mark.parametrize("limit", [0, 1001, True, 2.0, "3"])
def test_claim_available_refuses_a_bad_limit(store: Store, clock: FakeClock, limit: object) -> None:
    """§4 on claim_available: ``limit`` not an int in 1..1000 is refused; nothing claimed."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    with pytest.raises(A2Error) as raised:
        store.claim_available("s", holder="w", ttl_ms=1000, limit=limit)  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert "limit" in str(raised.value)
    assert store.read("s")[0].attempt_count == 0
