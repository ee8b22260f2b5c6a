"""SPEC §6 release_claims: give a claim back at once, fenced like renew_claims."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from a2sql import A2Error, ClaimRef, ErrorCode, NewEvent, ReleaseResult, Store
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def claimed(store: Store, clock: FakeClock, count: int, holder: str = "w") -> None:
    clock.set(START)
    store.append("s", [NewEvent("t") for _ in range(count)])
    assert len(store.claim_available("s", holder=holder, ttl_ms=1000).events) == count


def test_release_clears_the_claim_and_keeps_the_attempt_count(
    store: Store, clock: FakeClock
) -> None:
    """§6 release_claims: holder and expiry cleared at once; attempt_count unchanged."""
    claimed(store, clock, 2)
    result = store.release_claims("s", holder="w", claims=[ClaimRef(2, 1)])
    assert result == ReleaseResult(released=[2], superseded=[])
    first, second = store.read("s")
    assert (second.claim_holder, second.claim_expires_at, second.attempt_count) == (None, None, 1)
    assert (first.claim_holder, first.attempt_count) == ("w", 1)


def test_a_released_event_is_claimable_now_as_a_new_attempt(store: Store, clock: FakeClock) -> None:
    """§6 release_claims: another worker takes it before the lease would have ended."""
    claimed(store, clock, 1, holder="w1")
    store.release_claims("s", holder="w1", claims=[ClaimRef(1, 1)])
    [taken] = store.claim_available("s", holder="w2", ttl_ms=1000).events
    assert (taken.attempt_count, taken.claim_holder) == (2, "w2")


def test_a_released_attempt_can_neither_complete_nor_fail(store: Store, clock: FakeClock) -> None:
    """§6 release_claims: the released attempt is superseded for complete and fail."""
    claimed(store, clock, 1)
    store.release_claims("s", holder="w", claims=[ClaimRef(1, 1)])
    assert store.complete_attempt("s", index=1, attempt=1, events=[]).outcome == "superseded"
    failed = store.fail_attempt("s", index=1, attempt=1, error="x", max_failures=3)
    assert failed.outcome == "superseded"
    [event] = store.read("s")
    assert (event.processed_at, event.failure_count) == (None, 0)


def test_release_lists_claims_a_later_attempt_took_as_superseded(
    store: Store, clock: FakeClock
) -> None:
    """§6 release_claims: a later attempt's claim is untouched and listed superseded."""
    claimed(store, clock, 1, holder="w1")
    clock.advance(ms=1000)
    store.claim_available("s", holder="w2", ttl_ms=1000)
    result = store.release_claims("s", holder="w1", claims=[ClaimRef(1, 1)])
    assert result == ReleaseResult(released=[], superseded=[1])
    assert store.read("s")[0].claim_holder == "w2"


def test_release_leaves_other_holders_done_and_unknown_events_unlisted(
    store: Store, clock: FakeClock
) -> None:
    """§6 release_claims: another holder's claim, a processed event, an unknown index: neither."""
    claimed(store, clock, 2, holder="w1")
    store.complete_attempt("s", index=2, attempt=1, events=[])
    result = store.release_claims(
        "s", holder="w2", claims=[ClaimRef(1, 1), ClaimRef(2, 1), ClaimRef(9, 1)]
    )
    assert result == ReleaseResult(released=[], superseded=[])
    assert store.read("s")[0].claim_holder == "w1"
    done = store.release_claims("s", holder="w1", claims=[ClaimRef(2, 1)])
    assert done == ReleaseResult(released=[], superseded=[])


def test_release_gives_back_an_expired_claim_nobody_took(store: Store, clock: FakeClock) -> None:
    """§6 release_claims: the holder's current attempt is released even past its expiry."""
    claimed(store, clock, 1)
    clock.advance(ms=5000)
    assert store.release_claims("s", holder="w", claims=[ClaimRef(1, 1)]).released == [1]
    assert store.complete_attempt("s", index=1, attempt=1, events=[]).outcome == "superseded"


def test_release_does_not_touch_dead_letters(store: Store, clock: FakeClock) -> None:
    """§6 release_claims: a dead-lettered event holds no claim to release."""
    claimed(store, clock, 1)
    store.fail_attempt("s", index=1, attempt=1, error="x", max_failures=1)
    result = store.release_claims("s", holder="w", claims=[ClaimRef(1, 1)])
    assert result == ReleaseResult(released=[], superseded=[])
    assert store.read("s")[0].failed_at is not None


def test_release_lists_are_sorted_and_a_repeated_claim_is_released_once(
    store: Store, clock: FakeClock
) -> None:
    """§6 release_claims: lists sorted; a claim named twice is released once."""
    claimed(store, clock, 3)
    result = store.release_claims(
        "s", holder="w", claims=[ClaimRef(3, 1), ClaimRef(1, 1), ClaimRef(3, 1)]
    )
    assert result == ReleaseResult(released=[1, 3], superseded=[])
    again = store.release_claims("s", holder="w", claims=[ClaimRef(1, 1)])
    assert again == ReleaseResult(released=[], superseded=[])


def test_release_of_no_claims_writes_nothing(store: Store, clock: FakeClock) -> None:
    """§6 release_claims: an empty list releases nothing."""
    claimed(store, clock, 1)
    assert store.release_claims("s", holder="w", claims=[]) == ReleaseResult([], [])
    assert store.read("s")[0].claim_holder == "w"


def test_release_answers_after_a_claim_by_claim_next(store: Store, clock: FakeClock) -> None:
    """§6 release_claims: a worker's graceful shutdown hands claim_next's claims back."""
    clock.set(START)
    store.append("s", [NewEvent("t"), NewEvent("t")])
    dispatch = store.claim_next(holder="w", ttl_ms=60_000)
    refs = [ClaimRef(e.index, e.attempt_count) for e in dispatch.events]
    assert store.release_claims("s", holder="w", claims=refs).released == [1, 2]
    clock.advance(ms=1)
    assert len(store.claim_next(holder="w2", ttl_ms=1000).events) == 2


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"session_id": ""}, "session_id"),
        ({"holder": ""}, "holder"),
        ({"claims": [(1, 1)]}, "claims[0]"),
        ({"claims": [ClaimRef(0, 1)]}, "claims[0].index"),
        ({"claims": [ClaimRef(1, True)]}, "claims[0].attempt"),
        ({"claims": ClaimRef(1, 1)}, "claims"),
    ],
)
def test_release_refuses_bad_arguments(
    store: Store, clock: FakeClock, arguments: dict[str, object], argument: str
) -> None:
    """§4 on release_claims: INVALID_ARGUMENT naming the argument; nothing released."""
    claimed(store, clock, 1)
    call: dict[str, object] = {
        "session_id": "s",
        "holder": "w",
        "claims": [ClaimRef(1, 1)],
        **arguments,
    }
    session_id = call.pop("session_id")
    with pytest.raises(A2Error) as raised:
        store.release_claims(session_id, **call)  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert argument in str(raised.value)
    assert store.read("s")[0].claim_holder == "w"
