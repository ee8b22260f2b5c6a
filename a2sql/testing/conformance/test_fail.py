"""SPEC §3 fail_attempt: failed, dead_lettered, superseded, retried calls."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from a2sql import A2Error, ErrorCode, FailResult, NewEvent, Store
from a2sql.testing import FakeClock
from a2sql.testing.facades import execute_sql

START = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
START_MS = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def claimed_job(store: Store, clock: FakeClock) -> int:
    """Append one job at index 1 in session "s", claim it, and return its attempt."""
    clock.set(START)
    store.append("s", [NewEvent("job", id="job")])
    [event] = store.claim_available("s", holder="w", ttl_ms=1000).events
    return event.attempt_count


def test_fail_counts_failure_releases_claim_and_event_is_claimable_again(
    store: Store, clock: FakeClock
) -> None:
    """§3 fail_attempt: failure_count+1, last_error/_failed_at/_failed_attempt, claim released."""
    attempt = claimed_job(store, clock)
    result = store.fail_attempt("s", index=1, attempt=attempt, error="boom", max_failures=3)
    assert result == FailResult("failed", 1)

    [job] = store.read("s")
    assert (job.failure_count, job.last_error) == (1, "boom")
    assert (job.last_failed_at, job.last_failed_attempt) == (START_MS, attempt)
    assert (job.claim_holder, job.claim_expires_at) == (None, None)
    assert (job.failed_at, job.processed_at) == (None, None)

    claim = store.claim_available("s", holder="w2", ttl_ms=1000)
    assert [(e.attempt_count, e.claim_holder) for e in claim.events] == [(attempt + 1, "w2")]


def test_fail_at_max_failures_dead_letters_the_event_forever(
    store: Store, clock: FakeClock
) -> None:
    """§3 fail_attempt: at failure_count >= max_failures, failed_at = now: dead_lettered."""
    attempt = claimed_job(store, clock)
    assert store.fail_attempt("s", index=1, attempt=attempt, error="one", max_failures=2) == (
        FailResult("failed", 1)
    )
    [again] = store.claim_available("s", holder="w", ttl_ms=1000).events
    clock.advance(ms=500)
    result = store.fail_attempt(
        "s", index=1, attempt=again.attempt_count, error="two", max_failures=2
    )
    assert result == FailResult("dead_lettered", 2)

    [job] = store.read("s")
    assert job.failed_at == START_MS.replace(microsecond=623000)
    assert (job.last_error, job.last_failed_attempt) == ("two", again.attempt_count)
    assert (job.claim_holder, job.processed_at) == (None, None)

    clock.advance(seconds=86_400)
    assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "settled"
    assert store.read("s")[0].attempt_count == again.attempt_count


def test_fail_dead_letters_when_count_exceeds_a_lower_max_failures(
    store: Store, clock: FakeClock
) -> None:
    """§3 fail_attempt: the test is failure_count >= max_failures, not equality."""
    attempt = claimed_job(store, clock)
    for _ in range(2):
        result = store.fail_attempt("s", index=1, attempt=attempt, error="x", max_failures=9)
        assert result.outcome == "failed"
        [event] = store.claim_available("s", holder="w", ttl_ms=1000).events
        attempt = event.attempt_count
    result = store.fail_attempt("s", index=1, attempt=attempt, error="x", max_failures=1)
    assert result == FailResult("dead_lettered", 3)


def test_fail_of_dead_lettered_event_reports_dead_lettered_unchanged(
    store: Store, clock: FakeClock
) -> None:
    """§3 fail_attempt: already dead-lettered (current attempt) returns dead_lettered, no write."""
    attempt = claimed_job(store, clock)
    store.fail_attempt("s", index=1, attempt=attempt, error="first", max_failures=1)
    before = store.read("s")
    clock.advance(ms=10)
    result = store.fail_attempt("s", index=1, attempt=attempt, error="again", max_failures=1)
    assert result == FailResult("dead_lettered", 1)
    assert store.read("s") == before


def test_fail_of_processed_event_is_superseded(store: Store, clock: FakeClock) -> None:
    """§3 fail_attempt: a processed event is superseded, count unchanged."""
    attempt = claimed_job(store, clock)
    store.complete_attempt("s", index=1, attempt=attempt, events=[])
    before = store.read("s")
    result = store.fail_attempt("s", index=1, attempt=attempt, error="late", max_failures=1)
    assert result == FailResult("superseded", 0)
    assert store.read("s") == before


@pytest.mark.parametrize("offset", [-1, 1], ids=["stale-attempt", "future-attempt"])
def test_fail_by_an_attempt_that_is_not_current_is_superseded(
    store: Store, clock: FakeClock, offset: int
) -> None:
    """§3 fail_attempt: attempt != attempt_count is superseded; the current claim is untouched."""
    first = claimed_job(store, clock)
    store.fail_attempt("s", index=1, attempt=first, error="one", max_failures=5)
    [current] = store.claim_available("s", holder="w2", ttl_ms=1000).events
    before = store.read("s")
    result = store.fail_attempt(
        "s", index=1, attempt=current.attempt_count + offset, error="stale", max_failures=1
    )
    assert result == FailResult("superseded", 1)
    assert store.read("s") == before
    assert before[0].claim_holder == "w2"


def test_fail_retried_after_release_by_the_same_attempt_reports_failed_again(
    store: Store, clock: FakeClock
) -> None:
    """§3 fail_attempt: a retried call of the failure that released the claim is failed."""
    attempt = claimed_job(store, clock)
    store.fail_attempt("s", index=1, attempt=attempt, error="boom", max_failures=3)
    before = store.read("s")
    clock.advance(ms=10)
    result = store.fail_attempt("s", index=1, attempt=attempt, error="retry", max_failures=3)
    assert result == FailResult("failed", 1)
    assert store.read("s") == before


def test_fail_of_claim_released_otherwise_is_superseded(store: Store, clock: FakeClock) -> None:
    """§3 fail_attempt: claim released but not by this attempt's failure: superseded.

    No public operation releases a claim without failing or completing it, so
    the test releases it with a direct UPDATE, as an operator's tool might.
    """
    attempt = claimed_job(store, clock)
    execute_sql(
        store,
        text(
            "update a2_events set claim_holder = null, claim_expires_at = null"
            " where session_id = 's' and idx = 1"
        ),
    )
    before = store.read("s")
    result = store.fail_attempt("s", index=1, attempt=attempt, error="boom", max_failures=1)
    assert result == FailResult("superseded", 0)
    assert store.read("s") == before


def test_fail_of_unknown_index_is_event_not_found(store: Store, clock: FakeClock) -> None:
    """§3 fail_attempt: an index with no event in this session is EVENT_NOT_FOUND."""
    claimed_job(store, clock)
    store.append("other", [NewEvent("t"), NewEvent("t")])
    before = store.read("s")
    with pytest.raises(A2Error, check=lambda e: e.code == ErrorCode.EVENT_NOT_FOUND):
        store.fail_attempt("s", index=2, attempt=1, error="boom", max_failures=1)
    assert store.read("s") == before
