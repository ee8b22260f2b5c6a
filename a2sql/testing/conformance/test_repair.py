"""§6 Operations, repairs: retry_dead_letter and skip_event, fenced like every transition."""

from __future__ import annotations

import pytest

from a2sql import A2Error, ClaimRef, ErrorCode, NewEvent, RetryResult, SkipResult, Store
from a2sql.testing import FakeClock


def _dead(store: Store, session_id: str = "s", *, lanes: bool = False) -> int:
    """Append two events (in one lane with ``lanes``), dead-letter the first in two
    failures; returns the attempt that dead-lettered it."""
    lane = "L" if lanes else None
    store.append(session_id, [NewEvent("a", lane=lane), NewEvent("b", lane=lane)])
    attempt = 0
    for _ in range(2):
        claim = store.claim_available(session_id, holder="w", ttl_ms=60_000, limit=1)
        [event] = claim.events
        assert event.index == 1
        attempt = event.attempt_count
        store.fail_attempt(
            session_id, index=1, attempt=attempt, error=f"boom {attempt}", max_failures=2
        )
    return attempt


def test_retry_requeues_with_failures_reset_and_history_kept(store: Store) -> None:
    """§6 retry_dead_letter: failed_at cleared, failure_count 0, last_error and attempts kept."""
    attempt = _dead(store)
    assert store.retry_dead_letter("s", index=1) == RetryResult("requeued")
    event = store.read("s")[0]
    assert (event.failed_at, event.failure_count) == (None, 0)
    assert (event.last_error, event.attempt_count) == ("boom 2", attempt)
    assert (event.claim_holder, event.claim_expires_at, event.processed_at) == (None, None, None)


def test_a_retried_dead_letter_is_claimable_at_once_as_a_new_attempt(
    store: Store, clock: FakeClock
) -> None:
    """§6 retry_dead_letter: the next claim takes it now, with the next attempt number."""
    attempt = _dead(store)
    store.retry_dead_letter("s", index=1)
    claimed = store.claim_next(holder="w2", ttl_ms=1_000)
    assert (claimed.outcome, claimed.session_id) == ("claimed", "s")
    assert [(e.index, e.attempt_count) for e in claimed.events] == [(1, attempt + 1), (2, 1)]


def test_the_attempt_that_dead_lettered_cannot_complete_or_fail_after_a_retry(
    store: Store,
) -> None:
    """§6 retry_dead_letter: attempt numbers are never reused; the old attempt is fenced off."""
    attempt = _dead(store)
    store.retry_dead_letter("s", index=1)
    done = store.complete_attempt("s", index=1, attempt=attempt, events=[])
    assert done.outcome == "superseded"
    failed = store.fail_attempt("s", index=1, attempt=attempt, error="late", max_failures=2)
    assert failed.outcome == "superseded"
    event = store.read("s")[0]
    assert (event.processed_at, event.failure_count, event.last_error) == (None, 0, "boom 2")


def test_a_retried_dead_letter_moves_its_lane_on_when_it_completes(store: Store) -> None:
    """§6 retry_dead_letter: the lane stays blocked until the requeued event completes."""
    _dead(store, lanes=True)
    assert store.claim_available("s", holder="w", ttl_ms=1_000).outcome == "settled"
    store.retry_dead_letter("s", index=1)
    [event] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    assert event.index == 1
    store.complete_attempt("s", index=1, attempt=event.attempt_count, events=[])
    [after] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    assert after.index == 2


def test_retry_of_what_is_not_a_dead_letter_changes_nothing(store: Store) -> None:
    """§6 retry_dead_letter: not_dead_lettered for pending, failed-but-retryable, processed."""
    store.append("s", [NewEvent("a"), NewEvent("b"), NewEvent("c", settled=True)])
    [first, _] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    store.fail_attempt("s", index=1, attempt=1, error="once", max_failures=3)
    before = store.read("s")
    for index in (1, 2, 3):
        assert store.retry_dead_letter("s", index=index) == RetryResult("not_dead_lettered")
    assert store.read("s") == before
    assert first.index == 1


def test_skip_marks_a_dead_letter_processed_by_no_attempt_and_frees_its_lane(
    store: Store, clock: FakeClock
) -> None:
    """§6 skip_event: processed, processed_by_attempt unset, reason kept, next of lane ready."""
    _dead(store, lanes=True)
    clock.advance(ms=3)
    assert store.skip_event("s", index=1, reason="bad payload") == SkipResult("skipped")
    event = store.read("s")[0]
    assert (event.processed_at, event.processed_by_attempt) == (clock.now(), None)
    assert (event.last_error, event.failed_at, event.claim_holder) == ("bad payload", None, None)
    [after] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    assert after.index == 2


def test_skip_of_a_claimed_event_releases_the_claim_and_supersedes_its_attempt(
    store: Store,
) -> None:
    """§6 skip_event: a later completion by any attempt is superseded; fail too."""
    store.append("s", [NewEvent("a", lane="L"), NewEvent("b", lane="L")])
    [claimed] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.skip_event("s", index=1, reason="operator")
    assert (
        store.complete_attempt("s", index=1, attempt=claimed.attempt_count, events=[]).outcome
        == "superseded"
    )
    failed = store.fail_attempt(
        "s", index=1, attempt=claimed.attempt_count, error="x", max_failures=1
    )
    assert failed.outcome == "superseded"
    renewed = store.renew_claims(
        "s", holder="w", claims=[ClaimRef(1, claimed.attempt_count)], ttl_ms=1_000
    )
    assert renewed.renewed == []
    event = store.read("s")[0]
    assert (event.processed_by_attempt, event.last_error, event.returned_event_ids) == (
        None,
        "operator",
        None,
    )
    [next_one] = store.claim_available("s", holder="w2", ttl_ms=1_000).events
    assert next_one.index == 2


def test_skip_of_a_pending_event_that_nobody_claimed(store: Store) -> None:
    """§6 skip_event: any unprocessed event, never claimed included; a retry then says
    not_dead_lettered."""
    store.append("s", [NewEvent("a"), NewEvent("b")])
    assert store.skip_event("s", index=2, reason="obsolete") == SkipResult("skipped")
    assert store.retry_dead_letter("s", index=2) == RetryResult("not_dead_lettered")
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    assert claimed.index == 1


def test_skip_of_a_processed_event_changes_nothing(store: Store) -> None:
    """§6 skip_event: already_processed, for a completed or a skipped event."""
    store.append("s", [NewEvent("a"), NewEvent("b", settled=True)])
    [event] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    store.complete_attempt("s", index=1, attempt=event.attempt_count, events=[])
    before = store.read("s")
    for index in (1, 2):
        assert store.skip_event("s", index=index, reason="x") == SkipResult("already_processed")
    assert store.read("s") == before


@pytest.mark.parametrize("operation", ["retry", "skip"])
def test_repairs_of_a_missing_event_are_event_not_found(store: Store, operation: str) -> None:
    """§4: no event at that index (or no such session) is EVENT_NOT_FOUND."""
    store.append("s", [NewEvent("a")])
    for sid, index in (("s", 2), ("nobody", 1)):
        with pytest.raises(A2Error) as raised:
            if operation == "retry":
                store.retry_dead_letter(sid, index=index)
            else:
                store.skip_event(sid, index=index, reason="r")
        assert raised.value.code is ErrorCode.EVENT_NOT_FOUND


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.retry_dead_letter("s", index=0),
        lambda s: s.retry_dead_letter("", index=1),
        lambda s: s.skip_event("s", index=1, reason=None),
        lambda s: s.skip_event("s", index=True, reason="r"),
        lambda s: s.skip_event("s", index=1, reason=" "),
    ],
    ids=["index-0", "empty-session", "reason-none", "index-bool", "reason-blank"],
)
def test_repairs_check_their_arguments(store: Store, call) -> None:  # type: ignore[no-untyped-def]
    """§4: bad arguments are INVALID_ARGUMENT, and nothing is written."""
    store.append("s", [NewEvent("a")])
    before = store.read("s")
    with pytest.raises(A2Error) as raised:
        call(store)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert store.read("s") == before
