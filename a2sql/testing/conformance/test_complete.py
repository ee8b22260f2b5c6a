"""SPEC §3 complete_attempt: completed, superseded, replay, and the errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from a2sql import A2Error, ErrorCode, EventCause, NewEvent, Store
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
START_MS = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def raises_code(code: ErrorCode) -> pytest.RaisesExc[A2Error]:
    """``pytest.raises`` for an ``A2Error`` carrying ``code``."""
    return pytest.raises(A2Error, check=lambda error: error.code == code)


def claimed_job(store: Store, clock: FakeClock, *, ttl_ms: int = 1000) -> int:
    """Append one job at index 1 in session "s", claim it, and return its attempt."""
    clock.set(START)
    store.append("s", [NewEvent("job", id="job")])
    [event] = store.claim_available("s", holder="w", ttl_ms=ttl_ms).events
    return event.attempt_count


def children(*ids: str) -> list[NewEvent]:
    return [NewEvent("child", {"id": event_id}, id=event_id) for event_id in ids]


def test_complete_marks_processed_and_appends_children_with_the_cause(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: processed by attempt, ids kept, claim released, children appended."""
    attempt = claimed_job(store, clock)
    store.append("s", [NewEvent("other", id="o")])
    clock.advance(ms=250)
    now = START_MS + timedelta(milliseconds=250)
    returned = [*children("c1"), NewEvent("note", id="c2", settled=True), *children("c3")]

    result = store.complete_attempt("s", index=1, attempt=attempt, events=returned)

    assert result.outcome == "completed"
    assert [(e.index, e.id) for e in result.events] == [(3, "c1"), (4, "c2"), (5, "c3")]
    for event in result.events:
        assert event.cause == EventCause(1, attempt)
        assert event.created_at == now
        assert event.attempt_count == 0
    assert [e.processed_at for e in result.events] == [None, now, None]
    assert result.events == store.read("s", after_index=2)

    job = store.read("s")[0]
    assert (job.processed_at, job.processed_by_attempt) == (now, attempt)
    assert job.returned_event_ids == ["c1", "c2", "c3"]
    assert (job.claim_holder, job.claim_expires_at) == (None, None)
    assert job.first_claimed_at == START_MS

    claim = store.claim_available("s", holder="w", ttl_ms=1000)
    assert [e.id for e in claim.events] == ["o", "c1", "c3"]


def test_complete_without_returned_events_remembers_an_empty_list(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: completing with no events is completed, returned_event_ids = []."""
    attempt = claimed_job(store, clock)
    result = store.complete_attempt("s", index=1, attempt=attempt, events=[])
    assert (result.outcome, result.events) == ("completed", [])
    [job] = store.read("s")
    assert (job.processed_by_attempt, job.returned_event_ids) == (attempt, [])
    assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "settled"


def test_complete_of_expired_claim_nobody_took_over_still_completes(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: the fence is the attempt, not the clock."""
    attempt = claimed_job(store, clock, ttl_ms=1000)
    clock.advance(seconds=60)
    result = store.complete_attempt("s", index=1, attempt=attempt, events=children("c"))
    assert result.outcome == "completed"
    assert store.read("s")[0].processed_by_attempt == attempt


def _processed_by_other_attempt(store: Store, clock: FakeClock) -> int:
    attempt = claimed_job(store, clock)
    clock.advance(ms=1000)
    store.claim_available("s", holder="w2", ttl_ms=1000)
    result = store.complete_attempt("s", index=1, attempt=attempt + 1, events=[])
    assert result.outcome == "completed"
    return attempt


def _appended_settled(store: Store, clock: FakeClock) -> int:
    store.append("s", [NewEvent("job", id="job", settled=True)])
    return 1


def _attempt_not_current(store: Store, clock: FakeClock) -> int:
    attempt = claimed_job(store, clock)
    clock.advance(ms=1000)
    store.claim_available("s", holder="w2", ttl_ms=1000)
    return attempt


def _never_claimed(store: Store, clock: FakeClock) -> int:
    store.append("s", [NewEvent("job", id="job")])
    return 1


def _released_by_fail(store: Store, clock: FakeClock) -> int:
    attempt = claimed_job(store, clock)
    store.fail_attempt("s", index=1, attempt=attempt, error="boom", max_failures=5)
    return attempt


def _dead_lettered(store: Store, clock: FakeClock) -> int:
    attempt = claimed_job(store, clock)
    store.fail_attempt("s", index=1, attempt=attempt, error="boom", max_failures=1)
    return attempt


@pytest.mark.parametrize(
    "arrange",
    [
        _processed_by_other_attempt,
        _appended_settled,
        _attempt_not_current,
        _never_claimed,
        _released_by_fail,
        _dead_lettered,
    ],
    ids=lambda arrange: arrange.__name__.strip("_"),
)
def test_complete_by_an_attempt_that_no_longer_owns_the_event_is_superseded(
    store: Store, clock: FakeClock, arrange: Callable[[Store, FakeClock], int]
) -> None:
    """§3 complete_attempt: processed by another attempt, stale, released or dead: superseded."""
    attempt = arrange(store, clock)
    before = store.read("s")
    result = store.complete_attempt("s", index=1, attempt=attempt, events=children("late"))
    assert (result.outcome, result.events) == ("superseded", [])
    assert store.read("s") == before


def test_complete_superseded_wins_over_a_returned_id_that_exists(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: a stale attempt is superseded before returned ids are checked."""
    attempt = _attempt_not_current(store, clock)
    store.append("s", [NewEvent("t", id="taken")])
    result = store.complete_attempt("s", index=1, attempt=attempt, events=children("taken"))
    assert result.outcome == "superseded"


def test_complete_replay_by_the_same_attempt_returns_the_stored_children(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: a retry with the same ids in the same order replays idempotently."""
    attempt = claimed_job(store, clock)
    first = store.complete_attempt("s", index=1, attempt=attempt, events=children("c1", "c2"))
    clock.advance(ms=10)
    store.claim_available("s", holder="w", ttl_ms=1000)
    before = store.read("s")

    replayed = store.complete_attempt("s", index=1, attempt=attempt, events=children("c1", "c2"))
    assert replayed.outcome == "completed"
    assert [e.id for e in replayed.events] == [e.id for e in first.events]
    assert replayed.events == before[1:]
    assert all(e.claim_holder == "w" for e in replayed.events)
    assert store.read("s") == before


def test_complete_replay_with_no_returned_events_is_completed(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: an empty batch retried by the same attempt completes again."""
    attempt = claimed_job(store, clock)
    store.complete_attempt("s", index=1, attempt=attempt, events=[])
    before = store.read("s")
    result = store.complete_attempt("s", index=1, attempt=attempt, events=[])
    assert (result.outcome, result.events) == ("completed", [])
    assert store.read("s") == before


@pytest.mark.parametrize(
    "retried_ids",
    [["c2", "c1"], ["c1"], ["c1", "c2", "c3"], ["c1", "x"], []],
    ids=["other-order", "subset", "superset", "other-id", "none"],
)
def test_complete_replay_with_other_ids_or_order_is_partial_duplicate_batch(
    store: Store, clock: FakeClock, retried_ids: list[str]
) -> None:
    """§3 complete_attempt: a retry must name the committed ids in the committed order."""
    attempt = claimed_job(store, clock)
    store.complete_attempt("s", index=1, attempt=attempt, events=children("c1", "c2"))
    before = store.read("s")
    with raises_code(ErrorCode.PARTIAL_DUPLICATE_BATCH):
        store.complete_attempt("s", index=1, attempt=attempt, events=children(*retried_ids))
    assert store.read("s") == before


def test_complete_replay_with_a_different_child_is_idempotency_conflict(
    store: Store, clock: FakeClock
) -> None:
    """§3 idempotent replay (complete_attempt): a child with another payload is a conflict."""
    attempt = claimed_job(store, clock)
    store.complete_attempt("s", index=1, attempt=attempt, events=children("c1"))
    before = store.read("s")
    with raises_code(ErrorCode.IDEMPOTENCY_CONFLICT):
        store.complete_attempt(
            "s", index=1, attempt=attempt, events=[NewEvent("child", {"id": "other"}, id="c1")]
        )
    assert store.read("s") == before


def test_complete_with_an_id_twice_is_partial_duplicate_batch(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: ids twice in the returned batch is PARTIAL_DUPLICATE_BATCH."""
    attempt = claimed_job(store, clock)
    before = store.read("s")
    with raises_code(ErrorCode.PARTIAL_DUPLICATE_BATCH):
        store.complete_attempt("s", index=1, attempt=attempt, events=children("c", "d", "c"))
    assert store.read("s") == before


@pytest.mark.parametrize("where", ["s", "other"], ids=["same-session", "other-session"])
def test_complete_returning_an_existing_id_is_partial_duplicate_batch(
    store: Store, clock: FakeClock, where: str
) -> None:
    """§3 complete_attempt: a returned id that exists anywhere is PARTIAL_DUPLICATE_BATCH."""
    attempt = claimed_job(store, clock)
    store.append(where, [NewEvent("t", id="taken")])
    before = store.read("s"), store.read("other")
    with raises_code(ErrorCode.PARTIAL_DUPLICATE_BATCH):
        store.complete_attempt("s", index=1, attempt=attempt, events=children("fresh", "taken"))
    assert (store.read("s"), store.read("other")) == before
    # Nothing was written: the attempt can still complete.
    result = store.complete_attempt("s", index=1, attempt=attempt, events=[])
    assert result.outcome == "completed"


def test_complete_of_unknown_index_is_event_not_found(store: Store, clock: FakeClock) -> None:
    """§3 complete_attempt: an index with no event in this session is EVENT_NOT_FOUND."""
    claimed_job(store, clock)
    store.append("other", [NewEvent("t"), NewEvent("t")])
    store.claim_available("other", holder="w", ttl_ms=1000)
    before = store.read("s"), store.read("other")
    with raises_code(ErrorCode.EVENT_NOT_FOUND):
        store.complete_attempt("s", index=2, attempt=1, events=children("c"))
    assert (store.read("s"), store.read("other")) == before


@pytest.mark.parametrize(
    "returned",
    [NewEvent("child"), NewEvent("child", id="c", cause=EventCause(1, 1))],
    ids=["without-id", "with-cause"],
)
def test_complete_rejects_returned_event_without_id_or_with_cause(
    store: Store, clock: FakeClock, returned: NewEvent
) -> None:
    """§3 complete_attempt: returned events carry an id and no cause, else INVALID_ARGUMENT."""
    attempt = claimed_job(store, clock)
    before = store.read("s")
    with raises_code(ErrorCode.INVALID_ARGUMENT):
        store.complete_attempt("s", index=1, attempt=attempt, events=[*children("ok"), returned])
    assert store.read("s") == before


@pytest.mark.parametrize("returned", [["c1"], ["c1", "c2"], []], ids=["one", "several", "none"])
def test_complete_result_says_whether_the_completion_was_replayed(
    store: Store, clock: FakeClock, returned: list[str]
) -> None:
    """§3 complete_attempt: ``replayed`` is False for the completion that commits and True
    for the same attempt retried with the same ids (as after a lost commit reply), with
    no returned events too; a superseded attempt has replayed nothing."""
    attempt = claimed_job(store, clock)
    first = store.complete_attempt("s", index=1, attempt=attempt, events=children(*returned))
    assert (first.outcome, first.replayed) == ("completed", False)
    before = store.read("s")

    retried = store.complete_attempt("s", index=1, attempt=attempt, events=children(*returned))
    assert (retried.outcome, retried.replayed) == ("completed", True)
    assert retried.events == first.events
    assert store.read("s") == before

    other = store.complete_attempt("s", index=1, attempt=attempt + 1, events=[])
    assert (other.outcome, other.replayed) == ("superseded", False)


def test_complete_result_of_a_lane_event_says_whether_it_was_replayed(
    store: Store, clock: FakeClock
) -> None:
    """§3 complete_attempt: a lane's event and laned children (no one-statement path)."""
    clock.set(START)
    store.append("s", [NewEvent("job", id="job", lane="L")])
    [event] = store.claim_available("s", holder="w", ttl_ms=1000).events
    laned = [NewEvent("child", id="c1", lane="L")]
    first = store.complete_attempt("s", index=1, attempt=event.attempt_count, events=laned)
    retried = store.complete_attempt("s", index=1, attempt=event.attempt_count, events=laned)
    assert (first.replayed, retried.replayed) == (False, True)
