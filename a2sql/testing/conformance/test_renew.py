"""SPEC §3 renew_claims: renewed, superseded, or neither."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from a2sql import ClaimRef, NewEvent, Store
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
START_MS = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def claimed_session(store: Store, clock: FakeClock, count: int, holder: str = "w") -> None:
    """A session of ``count`` events, all claimed by ``holder`` at START for 1000 ms."""
    clock.set(START)
    store.append("s", [NewEvent("t") for _ in range(count)])
    assert len(store.claim_available("s", holder=holder, ttl_ms=1000).events) == count


def test_renew_extends_live_claims_of_holder_to_now_plus_ttl(
    store: Store, clock: FakeClock
) -> None:
    """§3 renew_claims: a live claim of holder at its attempt is renewed to now + ttl_ms."""
    claimed_session(store, clock, 3)
    clock.advance(ms=999)
    result = store.renew_claims(
        "s", holder="w", claims=[ClaimRef(3, 1), ClaimRef(1, 1)], ttl_ms=5000
    )
    assert (result.renewed, result.superseded) == ([1, 3], [])
    expiries = [e.claim_expires_at for e in store.read("s")]
    assert expiries == [START_MS + ms(5999), START_MS + ms(1000), START_MS + ms(5999)]


def test_renew_uses_explicit_expires_at(store: Store, clock: FakeClock) -> None:
    """§3 renew_claims: the new expiry is expires_at when given (stored in ms)."""
    claimed_session(store, clock, 1)
    expires_at = datetime(2026, 3, 4, 7, 0, 0, 999999, tzinfo=UTC)
    result = store.renew_claims(
        "s", holder="w", claims=[ClaimRef(1, 1)], ttl_ms=1, expires_at=expires_at
    )
    assert result.renewed == [1]
    assert store.read("s")[0].claim_expires_at == datetime(2026, 3, 4, 7, 0, 0, 999000, tzinfo=UTC)


def test_renew_reports_claims_taken_by_a_later_attempt_as_superseded(
    store: Store, clock: FakeClock
) -> None:
    """§3 renew_claims: attempt_count greater than the claim's attempt is superseded."""
    claimed_session(store, clock, 2, holder="w1")
    clock.advance(ms=1000)
    store.claim_available("s", holder="w2", ttl_ms=1000)
    before = store.read("s")

    for holder in ("w1", "w2"):
        result = store.renew_claims(
            "s", holder=holder, claims=[ClaimRef(2, 1), ClaimRef(1, 1)], ttl_ms=9000
        )
        assert (result.renewed, result.superseded) == ([], [1, 2])
    assert store.read("s") == before


def _unknown_index(store: Store, clock: FakeClock) -> ClaimRef:
    return ClaimRef(7, 1)


def _wrong_holder(store: Store, clock: FakeClock) -> ClaimRef:
    store.claim_available("s", holder="other", ttl_ms=1000)
    return ClaimRef(1, 1)


def _expired_at_boundary(store: Store, clock: FakeClock) -> ClaimRef:
    store.claim_available("s", holder="w", ttl_ms=1000)
    clock.advance(ms=1000)
    return ClaimRef(1, 1)


def _processed(store: Store, clock: FakeClock) -> ClaimRef:
    store.claim_available("s", holder="w", ttl_ms=1000)
    store.complete_attempt("s", index=1, attempt=1, events=[])
    return ClaimRef(1, 1)


def _dead_lettered(store: Store, clock: FakeClock) -> ClaimRef:
    store.claim_available("s", holder="w", ttl_ms=1000)
    store.fail_attempt("s", index=1, attempt=1, error="boom", max_failures=1)
    return ClaimRef(1, 1)


def _released(store: Store, clock: FakeClock) -> ClaimRef:
    store.claim_available("s", holder="w", ttl_ms=1000)
    store.fail_attempt("s", index=1, attempt=1, error="boom", max_failures=5)
    return ClaimRef(1, 1)


def _never_claimed(store: Store, clock: FakeClock) -> ClaimRef:
    return ClaimRef(1, 1)


def _future_attempt(store: Store, clock: FakeClock) -> ClaimRef:
    store.claim_available("s", holder="w", ttl_ms=1000)
    return ClaimRef(1, 2)


@pytest.mark.parametrize(
    "arrange",
    [
        _unknown_index,
        _wrong_holder,
        _expired_at_boundary,
        _processed,
        _dead_lettered,
        _released,
        _never_claimed,
        _future_attempt,
    ],
    ids=lambda arrange: arrange.__name__.strip("_"),
)
def test_renew_reports_neither_renewed_nor_superseded(
    store: Store, clock: FakeClock, arrange: Callable[[Store, FakeClock], ClaimRef]
) -> None:
    """§3 renew_claims: a claim that is not live, held and current is in neither list."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    ref = arrange(store, clock)
    before = store.read("s")
    result = store.renew_claims("s", holder="w", claims=[ref], ttl_ms=60_000)
    assert (result.renewed, result.superseded) == ([], [])
    assert store.read("s") == before


def test_renew_sorts_both_lists_and_ignores_other_sessions(store: Store, clock: FakeClock) -> None:
    """§3 renew_claims: renewed and superseded are sorted; indexes are of this session only."""
    clock.set(START)
    store.append("other", [NewEvent("t") for _ in range(6)])
    store.append("s", [NewEvent("t") for _ in range(6)])
    store.claim_available("s", holder="w", ttl_ms=1000, exclude_indexes=[2, 5])
    clock.advance(ms=500)
    store.claim_available("s", holder="w", ttl_ms=1000)
    clock.advance(ms=500)
    # 1, 3, 4, 6 expired at attempt 1; 2 and 5 are live at attempt 1 until START+1500.
    store.claim_available("s", holder="w2", ttl_ms=1000, exclude_indexes=[4])
    claims = [ClaimRef(i, 1) for i in (6, 5, 4, 3, 2, 1)]
    result = store.renew_claims("s", holder="w", claims=claims, ttl_ms=1000)
    assert (result.renewed, result.superseded) == ([2, 5], [1, 3, 6])
    assert [e.attempt_count for e in store.read("other")] == [0] * 6


def test_renew_of_no_claims_returns_empty_lists(store: Store) -> None:
    """§3 renew_claims: an empty list of claims renews nothing."""
    result = store.renew_claims("s", holder="w", claims=[], ttl_ms=1000)
    assert (result.renewed, result.superseded) == ([], [])


def test_renew_judges_each_claim_on_its_own_stale_and_current_attempt_of_one_event(
    store: Store, clock: FakeClock
) -> None:
    """§3 renew_claims is per claim: a stale attempt of an event is superseded while its
    current attempt, named in the same call, is renewed."""
    claimed_session(store, clock, 1, holder="a")
    clock.advance(ms=1000)  # the claim expires; "b" takes the event as attempt 2
    assert store.claim_available("s", holder="b", ttl_ms=1000).events[0].attempt_count == 2
    result = store.renew_claims(
        "s", holder="b", claims=[ClaimRef(1, 1), ClaimRef(1, 2)], ttl_ms=3000
    )
    assert (result.renewed, result.superseded) == ([1], [1])
    [event] = store.read("s")
    assert event.claim_expires_at == START_MS + ms(1000) + ms(3000)


def test_renew_reports_a_claim_named_twice_twice(store: Store, clock: FakeClock) -> None:
    """§3 renew_claims reports per claim: the same live claim named twice is renewed twice."""
    claimed_session(store, clock, 1)
    result = store.renew_claims("s", holder="w", claims=[ClaimRef(1, 1)] * 2, ttl_ms=3000)
    assert (result.renewed, result.superseded) == ([1, 1], [])
