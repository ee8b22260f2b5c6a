"""SPEC §6 claim_next: work across sessions, oldest claimable event first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from a2sql import A2Error, ClaimRef, Dispatch, ErrorCode, NewEvent, Store
from a2sql.testing import FakeClock

START = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def test_claim_next_is_idle_with_no_retry_on_an_empty_store(store: Store) -> None:
    """§6 claim_next: nothing anywhere is ``idle`` with ``retry_at`` unset."""
    assert store.claim_next(holder="w", ttl_ms=1000) == Dispatch("idle")


def test_claim_next_picks_the_session_whose_oldest_claimable_event_is_oldest(
    store: Store, clock: FakeClock
) -> None:
    """§6 claim_next: sessions are served by the age of their oldest claimable event."""
    clock.set(START)
    store.append("b", [NewEvent("t")])
    clock.advance(ms=5)
    store.append("a", [NewEvent("t")])
    clock.advance(ms=5)
    store.append("b", [NewEvent("t")])
    clock.advance(ms=5)
    first = store.claim_next(holder="w", ttl_ms=1000)
    assert (first.outcome, first.session_id) == ("claimed", "b")
    # Every claimable event of "b" is taken, as claim_available would.
    assert [e.index for e in first.events] == [1, 2]
    second = store.claim_next(holder="w", ttl_ms=1000)
    assert (second.outcome, second.session_id, [e.index for e in second.events]) == (
        "claimed",
        "a",
        [1],
    )


def test_claim_next_breaks_ties_of_age_by_session_id(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: events created in the same millisecond go by session id."""
    clock.set(START)
    for session_id in ("c", "a", "b"):
        store.append(session_id, [NewEvent("t")])
    order = [store.claim_next(holder="w", ttl_ms=1000).session_id for _ in range(3)]
    assert order == ["a", "b", "c"]


def test_claim_next_claims_exactly_as_claim_available_does(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: the claim sets attempt, times, holder and expiry as claim_available."""
    clock.set(START)
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    clock.advance(ms=7)
    dispatch = store.claim_next(holder="worker-1", ttl_ms=250)
    [claimed] = dispatch.events
    [stored] = store.read("s")
    assert claimed == stored
    assert (stored.attempt_count, stored.claim_holder) == (1, "worker-1")
    assert stored.first_claimed_at == stored.last_claimed_at == START + ms(7)
    assert stored.claim_expires_at == START + ms(257)
    assert dispatch.retry_at is None


def test_claim_next_uses_expires_at_when_given(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: ``expires_at`` overrides ``now + ttl_ms``, truncated to the ms."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    expires_at = datetime(2026, 3, 4, 9, 0, 0, 999999, tzinfo=UTC)
    [claimed] = store.claim_next(holder="w", ttl_ms=1, expires_at=expires_at).events
    assert claimed.claim_expires_at == datetime(2026, 3, 4, 9, 0, 0, 999000, tzinfo=UTC)


def test_claim_next_honours_limit_lowest_indexes_first(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: at most ``limit`` events, the lowest indexes, then the rest next time."""
    clock.set(START)
    store.append("s", [NewEvent("t") for _ in range(5)])
    assert [e.index for e in store.claim_next(holder="w", ttl_ms=1000, limit=2).events] == [1, 2]
    assert [e.index for e in store.claim_next(holder="w", ttl_ms=1000, limit=2).events] == [3, 4]
    assert [e.index for e in store.claim_next(holder="w", ttl_ms=1000, limit=2).events] == [5]


def test_claim_next_passes_over_live_claims_and_takes_expired_ones(
    store: Store, clock: FakeClock
) -> None:
    """§6 claim_next: a live claim is not claimable; an expired one is, as a new attempt."""
    clock.set(START)
    store.append("old", [NewEvent("t")])
    clock.advance(ms=1)
    store.append("new", [NewEvent("t")])
    assert store.claim_available("old", holder="w1", ttl_ms=100).outcome == "claimed"
    # "old" has nothing claimable, so its age does not count.
    assert store.claim_next(holder="w2", ttl_ms=1000).session_id == "new"
    clock.advance(ms=100)
    taken = store.claim_next(holder="w2", ttl_ms=1000)
    assert (taken.session_id, [(e.index, e.attempt_count) for e in taken.events]) == (
        "old",
        [(1, 2)],
    )


def test_claim_next_ages_a_session_by_its_oldest_claimable_event(
    store: Store, clock: FakeClock
) -> None:
    """§6 claim_next: an older event in flight does not make its session go first."""
    clock.set(START)
    store.append("x", [NewEvent("t")])
    clock.advance(ms=1)
    store.append("y", [NewEvent("t")])
    clock.advance(ms=1)
    assert store.claim_available("x", holder="w", ttl_ms=10_000).outcome == "claimed"
    store.append("x", [NewEvent("t")])  # x's only claimable event is now the newest
    assert store.claim_next(holder="w", ttl_ms=1000).session_id == "y"
    assert [e.index for e in store.claim_next(holder="w", ttl_ms=1000).events] == [2]


def test_claim_next_serves_only_lane_heads(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: only ready events are claimable; a lane's next waits for its head."""
    clock.set(START)
    store.append(
        "s",
        [NewEvent("a", lane="L"), NewEvent("b", lane="L"), NewEvent("c"), NewEvent("d", lane="M")],
    )
    dispatch = store.claim_next(holder="w", ttl_ms=1000)
    assert [e.index for e in dispatch.events] == [1, 3, 4]
    assert store.complete_attempt("s", index=1, attempt=1, events=[]).outcome == "completed"
    assert [e.index for e in store.claim_next(holder="w", ttl_ms=1000).events] == [2]


def test_claim_next_never_picks_a_session_blocked_behind_a_dead_letter(
    store: Store, clock: FakeClock
) -> None:
    """§6 claim_next: dead letters and the lane behind them are never handed out."""
    clock.set(START)
    store.append("blocked", [NewEvent("a", lane="L"), NewEvent("b", lane="L")])
    [head] = store.claim_available("blocked", holder="w", ttl_ms=1000).events
    failed = store.fail_attempt(
        "blocked", index=1, attempt=head.attempt_count, error="x", max_failures=1
    )
    assert failed.outcome == "dead_lettered"
    assert store.claim_next(holder="w", ttl_ms=1000) == Dispatch("idle")
    store.append("other", [NewEvent("t")])
    taken = store.claim_next(holder="w", ttl_ms=1000)
    assert taken.session_id == "other"
    store.complete_attempt("other", index=1, attempt=1, events=[])
    assert store.claim_next(holder="w", ttl_ms=1000) == Dispatch("idle")


def test_claim_next_skips_processed_and_settled_events(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: processed events (and events appended settled) are not work."""
    clock.set(START)
    store.append("s", [NewEvent("done", settled=True)])
    assert store.claim_next(holder="w", ttl_ms=1000) == Dispatch("idle")
    store.append("s", [NewEvent("job")])
    [job] = store.claim_next(holder="w", ttl_ms=1000).events
    store.complete_attempt("s", index=job.index, attempt=job.attempt_count, events=[])
    assert store.claim_next(holder="w", ttl_ms=1000) == Dispatch("idle")


def test_claim_next_idle_reports_the_earliest_claim_to_expire(
    store: Store, clock: FakeClock
) -> None:
    """§6 claim_next: idle's ``retry_at`` is when the first live claim ends."""
    clock.set(START)
    store.append("a", [NewEvent("t")])
    store.append("b", [NewEvent("t")])
    store.claim_available("a", holder="w", ttl_ms=500)
    store.claim_available("b", holder="w", ttl_ms=300)
    assert store.claim_next(holder="w", ttl_ms=1000) == Dispatch("idle", retry_at=START + ms(300))
    clock.advance(ms=300)
    assert store.claim_next(holder="w2", ttl_ms=1000).session_id == "b"


def test_claim_next_idle_reports_a_delayed_retry(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: a failure's retry delay is when the event becomes claimable again."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    [event] = store.claim_next(holder="w", ttl_ms=10_000).events
    store.fail_attempt(
        "s", index=1, attempt=event.attempt_count, error="x", max_failures=5, retry_after_ms=2000
    )
    assert store.claim_next(holder="w", ttl_ms=1000) == Dispatch("idle", retry_at=START + ms(2000))
    clock.advance(ms=1999)
    assert store.claim_next(holder="w", ttl_ms=1000).outcome == "idle"
    clock.advance(ms=1)
    [again] = store.claim_next(holder="w", ttl_ms=1000).events
    assert again.attempt_count == 2


@pytest.mark.parametrize("prefix", ["order-1", "a%", "b_", "ü"])
def test_claim_next_serves_only_sessions_under_the_prefix(
    store: Store, clock: FakeClock, prefix: str
) -> None:
    """§6 claim_next: ``prefix`` is an exact, case-sensitive string prefix, no wildcards."""
    clock.set(START)
    inside = [prefix + suffix for suffix in ("", "7", "z")]
    outside = ["order-2", "a", "ab", "bx", "b", "u", "Order-1", "order-", "ORDER-1"]
    outside = [o for o in outside if not o.startswith(prefix)]
    for session_id in outside + inside:
        store.append(session_id, [NewEvent("t")])
    served = []
    while (
        dispatch := store.claim_next(holder="w", ttl_ms=1000, prefix=prefix)
    ).outcome == "claimed":
        assert dispatch.session_id is not None
        served.append(dispatch.session_id)
    assert sorted(served) == sorted(inside)
    assert dispatch == Dispatch("idle", retry_at=START + ms(1000))  # the prefix's own claims
    # What lies outside the prefix is still there for everyone else.
    rest = []
    while (dispatch := store.claim_next(holder="w", ttl_ms=1000)).outcome == "claimed":
        assert dispatch.session_id is not None
        rest.append(dispatch.session_id)
    assert sorted(rest) == sorted(outside)


def test_claim_next_idle_retry_at_only_counts_the_prefix(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: ``retry_at`` is about sessions under the prefix only."""
    clock.set(START)
    store.append("job-1", [NewEvent("t")])
    store.append("other", [NewEvent("t")])
    store.claim_available("job-1", holder="w", ttl_ms=900)
    store.claim_available("other", holder="w", ttl_ms=100)
    assert store.claim_next(holder="w", ttl_ms=1000, prefix="job-") == Dispatch(
        "idle", retry_at=START + ms(900)
    )
    assert store.claim_next(holder="w", ttl_ms=1000, prefix="none-") == Dispatch("idle")


def test_claim_next_claims_complete_like_any_claim(store: Store, clock: FakeClock) -> None:
    """§6 claim_next: its attempts are fenced as any other: complete, renew, release."""
    clock.set(START)
    store.append("s", [NewEvent("a"), NewEvent("b")])
    first, second = store.claim_next(holder="w", ttl_ms=1000).events
    renewed = store.renew_claims(
        "s", holder="w", claims=[ClaimRef(1, first.attempt_count)], ttl_ms=5000
    )
    assert renewed.renewed == [1]
    done = store.complete_attempt(
        "s", index=1, attempt=first.attempt_count, events=[NewEvent("c", id="c")]
    )
    assert done.outcome == "completed"
    assert store.release_claims(
        "s", holder="w", claims=[ClaimRef(2, second.attempt_count)]
    ).released == [2]
    again = store.claim_next(holder="w", ttl_ms=1000)
    assert [(e.index, e.attempt_count) for e in again.events] == [(2, 2), (3, 1)]


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"holder": ""}, "holder"),
        ({"holder": 7}, "holder"),
        ({"ttl_ms": 0}, "ttl_ms"),
        ({"ttl_ms": True}, "ttl_ms"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2.0}, "limit"),
        ({"prefix": None}, "prefix"),
        ({"prefix": b"x"}, "prefix"),
        ({"prefix": "a\x00"}, "prefix"),
        ({"expires_at": datetime(2026, 1, 1)}, "expires_at"),
    ],
)
def test_claim_next_refuses_bad_arguments(
    store: Store, clock: FakeClock, arguments: dict[str, object], argument: str
) -> None:
    """§4 on claim_next: bad arguments are INVALID_ARGUMENT, naming them; nothing claimed."""
    clock.set(START)
    store.append("s", [NewEvent("t")])
    call: dict[str, object] = {"holder": "w", "ttl_ms": 1000, **arguments}
    with pytest.raises(A2Error) as raised:
        store.claim_next(**call)  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert argument in str(raised.value)
    assert store.read("s")[0].attempt_count == 0
