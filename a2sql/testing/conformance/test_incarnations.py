"""§6 delete_session and prune, and the fence: a session deleted and appended again
starts its indexes over at 1, but never its attempt numbers, so an attempt of the
deleted session (a worker still running when it was deleted) can never complete,
fail, renew, release or cause anything in the new one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from a2sql import (
    A2Error,
    ClaimRef,
    ErrorCode,
    EventCause,
    NewEvent,
    ReleaseResult,
    RenewResult,
    Store,
)
from a2sql.testing import FakeClock

TTL_MS = 60_000


def stale_attempt_of_a_deleted_session(store: Store, clock: FakeClock) -> int:
    """Event 1 of session "s" claimed by a worker as attempt 1, then the session deleted
    under it: the stale attempt, the highest attempt number "s" issued."""
    store.append("s", [NewEvent("old", {"n": 1}, id="old-1")])
    [old] = store.claim_available("s", holder="w", ttl_ms=TTL_MS).events
    assert (old.index, old.attempt_count) == (1, 1)
    assert store.delete_session("s").events == 1
    return old.attempt_count


def stale_attempt_of_a_pruned_session(store: Store, clock: FakeClock) -> int:
    """Event 1 of session "s" claimed as attempt 1 by a worker that stalls past its
    claim; attempt 2 completes it; "s", settled, is pruned: attempt 1 is stale, and 2
    is the highest attempt number "s" issued."""
    store.append("s", [NewEvent("old", {"n": 1}, id="old-1")])
    [stale] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    clock.advance(seconds=2)
    [taken_over] = store.claim_available("s", holder="w", ttl_ms=TTL_MS).events
    assert (stale.attempt_count, taken_over.attempt_count) == (1, 2)
    store.complete_attempt("s", index=1, attempt=2, events=[])
    clock.advance(seconds=60)
    assert store.prune(settled_before=clock.now()).sessions == 1
    assert store.read("s") == []
    return stale.attempt_count


REMOVALS: dict[str, Callable[[Store, FakeClock], int]] = {
    "delete_session": stale_attempt_of_a_deleted_session,
    "prune": stale_attempt_of_a_pruned_session,
}
HIGHEST_ISSUED = {"delete_session": 1, "prune": 2}


def appended_again(store: Store) -> None:
    """Session "s" appended again, under a2sql's own ids as well as the deleted session's."""
    again = store.append("s", [NewEvent("new", {"n": 2}, id="old-1"), NewEvent("new", {"n": 3})])
    assert [event.index for event in again.events] == [1, 2]
    assert again.events == store.read("s")


def stale_call(store: Store, call: str, attempt: int) -> None:
    """The call the stale worker makes with its attempt of event 1: every one of them
    must leave the new session as it was (asserted by the caller)."""
    if call == "complete":
        result = store.complete_attempt(
            "s", index=1, attempt=attempt, events=[NewEvent("stale", id="stale-out")]
        )
        assert result.outcome == "superseded"
    elif call == "fail":
        failed = store.fail_attempt("s", index=1, attempt=attempt, error="stale", max_failures=1)
        assert failed.outcome == "superseded"
    elif call == "renew":
        renewed = store.renew_claims(
            "s", holder="w", claims=[ClaimRef(1, attempt)], ttl_ms=10 * TTL_MS
        )
        assert renewed.renewed == []
    elif call == "release":
        released = store.release_claims("s", holder="w", claims=[ClaimRef(1, attempt)])
        assert released.released == []
    else:
        with pytest.raises(A2Error) as raised:
            store.append("s", [NewEvent("stale", id="stale-out", cause=EventCause(1, attempt))])
        assert raised.value.code is ErrorCode.SUPERSEDED_ATTEMPT


CALLS = ("complete", "fail", "renew", "release", "append_caused")


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("removal", REMOVALS)
def test_an_attempt_of_a_removed_session_cannot_touch_the_claimed_event_of_the_new_one(
    store: Store, clock: FakeClock, removal: str, call: str
) -> None:
    """§6: the new session's first claim is a new attempt number, after the highest the
    removed session issued; the stale worker's call with its old attempt is superseded
    (renew, release: listed superseded) and the current holder completes."""
    stale = REMOVALS[removal](store, clock)
    appended_again(store)
    [current] = store.claim_available("s", holder="w", ttl_ms=TTL_MS, limit=1).events
    assert current.index == 1
    assert current.attempt_count == HIGHEST_ISSUED[removal] + 1
    before = store.read("s")

    stale_call(store, call, stale)
    if call == "renew":
        assert store.renew_claims(
            "s", holder="w", claims=[ClaimRef(1, stale)], ttl_ms=TTL_MS
        ) == RenewResult(renewed=[], superseded=[1])
    if call == "release":
        assert store.release_claims("s", holder="w", claims=[ClaimRef(1, stale)]) == (
            ReleaseResult(released=[], superseded=[1])
        )
    assert store.read("s") == before

    done = store.complete_attempt(
        "s", index=1, attempt=current.attempt_count, events=[NewEvent("out", id="out-1")]
    )
    assert done.outcome == "completed"
    [first, _, out] = store.read("s")
    assert first.processed_by_attempt == current.attempt_count
    assert (out.id, out.cause) == ("out-1", EventCause(1, current.attempt_count))


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("removal", REMOVALS)
def test_an_attempt_of_a_removed_session_cannot_touch_an_unclaimed_event_of_the_new_one(
    store: Store, clock: FakeClock, removal: str, call: str
) -> None:
    """§6: before anyone claims the new session's event, a stale attempt (even the
    highest one issued, where the new event's attempt count starts) does nothing to it."""
    stale = REMOVALS[removal](store, clock)
    appended_again(store)
    before = store.read("s")
    for attempt in range(1, HIGHEST_ISSUED[removal] + 1):
        stale_call(store, call, attempt)
    assert stale <= HIGHEST_ISSUED[removal]
    assert store.read("s") == before
    [first, second] = store.claim_available("s", holder="w", ttl_ms=TTL_MS).events
    assert [first.attempt_count, second.attempt_count] == [HIGHEST_ISSUED[removal] + 1] * 2


def test_attempt_numbers_continue_over_every_deletion_of_a_session(store: Store) -> None:
    """§6: each deletion keeps the highest attempt number ever issued in the session,
    the events returned by a completion included; a session deleted before any claim
    changes nothing; other sessions start at 1. The session's summary counts its
    claims."""
    for expected in (1, 2, 3):
        store.append("s", [NewEvent("a")])
        [claimed] = store.claim_available("s", holder="w", ttl_ms=TTL_MS).events
        assert claimed.attempt_count == expected
        store.delete_session("s")
    store.append("s", [NewEvent("a")])
    store.delete_session("s")  # never claimed
    store.append("s", [NewEvent("a")])
    [claimed] = store.claim_available("s", holder="w", ttl_ms=TTL_MS).events
    assert claimed.attempt_count == 4
    done = store.complete_attempt("s", index=1, attempt=4, events=[NewEvent("child", id="c1")])
    assert [e.attempt_count for e in done.events] == [3]
    assert done.events == store.read("s", after_index=1)
    [child] = store.claim_available("s", holder="w", ttl_ms=TTL_MS).events
    assert (child.index, child.attempt_count) == (2, 4)
    summary = store.inspect.session("s")
    assert summary is not None
    assert summary.attempt_count == 2  # claims, counted from where the session started
    store.delete_session("s")
    store.append("s", [NewEvent("a")])
    assert store.claim_available("s", holder="w", ttl_ms=TTL_MS).events[0].attempt_count == 5

    store.append("other", [NewEvent("a")])
    assert store.claim_available("other", holder="w", ttl_ms=TTL_MS).events[0].attempt_count == 1
