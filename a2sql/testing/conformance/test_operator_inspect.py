"""§6 Operations, reading: inspect.session, the new SessionSummary counts, inspect.totals,
which events wait or are blocked, and inspect.list_dead_letters; §7's waiting and
scheduled events among them (counts, and inspect.list_waiting_and_scheduled)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from a2sql import A2Error, ClaimRef, ErrorCode, NewEvent, Store
from a2sql.testing import FakeClock


def _dead_letter(store: Store, session_id: str, *indexes: int) -> None:
    """Claim what is claimable, fail the events at ``indexes`` for good, release the rest."""
    claim = store.claim_available(session_id, holder="w", ttl_ms=60_000)
    for event in claim.events:
        if event.index in indexes:
            dead = store.fail_attempt(
                session_id,
                index=event.index,
                attempt=event.attempt_count,
                error="fatal",
                max_failures=1,
            )
            assert dead.outcome == "dead_lettered"
        else:
            store.release_claims(
                session_id, holder="w", claims=[ClaimRef(event.index, event.attempt_count)]
            )
    assert {e.index for e in claim.events} >= set(indexes)


def test_session_is_the_exact_session_not_a_prefix(store: Store) -> None:
    """§6 inspect.session: 'order-1' is not 'order-17'; an unknown session is None."""
    store.append("order-1", [NewEvent("a")])
    store.append("order-17", [NewEvent("a"), NewEvent("b")])
    one = store.inspect.session("order-1")
    assert one is not None and (one.session_id, one.event_count) == ("order-1", 1)
    assert store.inspect.session("order-") is None
    assert store.inspect.session("nobody") is None
    [listed] = [s for s in store.inspect.list_sessions().sessions if s.session_id == "order-17"]
    assert store.inspect.session("order-17") == listed


def test_claimed_blocked_and_oldest_pending(store: Store, clock: FakeClock) -> None:
    """§6 SessionSummary: live claims only; pending behind a lane's dead letter; oldest pending."""
    start = clock.now()
    store.append(
        "s",
        [
            NewEvent("a", lane="L"),  # 1: dead-lettered below
            NewEvent("b", lane="L"),  # 2: blocked behind 1
            NewEvent("c", lane="L"),  # 3: blocked behind 1
            NewEvent("d", lane="M"),  # 4: claimed, live
            NewEvent("e"),  # 5: claimed, then its lease runs out
            NewEvent("done", settled=True),  # 6
        ],
    )
    _dead_letter(store, "s", 1)
    clock.advance(ms=10)
    store.append("s", [NewEvent("late", lane="M")])  # 7: waits behind 4, not blocked
    store.claim_available("s", holder="w", ttl_ms=1_000, exclude_indexes=[4])
    clock.advance(ms=500)
    store.claim_available("s", holder="w", ttl_ms=60_000, exclude_indexes=[5])
    clock.advance(ms=600)  # 5's lease has run out, 4's has not
    summary = store.inspect.session("s")
    assert summary is not None
    assert (summary.pending_count, summary.failed_count) == (5, 1)
    assert (summary.claimed_count, summary.blocked_count) == (1, 2)
    assert summary.oldest_pending_at == start


def test_oldest_pending_is_none_when_nothing_is_pending(store: Store, clock: FakeClock) -> None:
    """§6 SessionSummary: processed and dead-lettered events are not pending."""
    store.append("s", [NewEvent("a"), NewEvent("b", settled=True)])
    _dead_letter(store, "s", 1)
    summary = store.inspect.session("s")
    assert summary is not None
    assert (summary.pending_count, summary.oldest_pending_at, summary.blocked_count) == (0, None, 0)


def test_skipping_a_dead_letter_unblocks_its_lane_in_the_counts(store: Store) -> None:
    """§6 SessionSummary.blocked_count follows the lane's head."""
    store.append("s", [NewEvent("a", lane="L"), NewEvent("b", lane="L")])
    _dead_letter(store, "s", 1)
    before = store.inspect.session("s")
    assert before is not None and before.blocked_count == 1
    assert store.inspect.list_dead_letters().blocking == [1]
    store.skip_event("s", index=1, reason="bad input")
    after = store.inspect.session("s")
    assert after is not None and (after.blocked_count, after.failed_count) == (0, 0)


def test_read_events_says_which_wait_and_which_are_blocked(store: Store) -> None:
    """§6: a page marks pending events behind their lane, and those behind a dead letter."""
    store.append(
        "s",
        [
            NewEvent("a", lane="L"),
            NewEvent("b", lane="L"),
            NewEvent("c", lane="M"),
            NewEvent("d", lane="M"),
            NewEvent("e"),
        ],
    )
    _dead_letter(store, "s", 1)
    page = store.inspect.read_events("s")
    assert (page.waiting, page.blocked) == ([4], [2])
    # A page that starts after the dead letter still knows.
    later = store.inspect.read_events("s", after_index=1)
    assert (later.waiting, later.blocked) == ([4], [2])


def test_totals_count_the_whole_database(store: Store, clock: FakeClock) -> None:
    """inspect.totals: sessions, events, pending, live claims, dead letters, oldest pending."""
    empty = store.inspect.totals()
    assert (empty.sessions, empty.events, empty.pending, empty.claimed) == (0, 0, 0, 0)
    assert (empty.dead_letters, empty.oldest_pending_at) == (0, None)
    first = clock.now()
    store.append("a", [NewEvent("x"), NewEvent("y"), NewEvent("z", settled=True)])
    clock.advance(ms=5)
    store.append("b", [NewEvent("x")])
    _dead_letter(store, "a", 1)  # also claims and releases 2
    store.claim_available("b", holder="w", ttl_ms=60_000)
    totals = store.inspect.totals()
    assert (totals.sessions, totals.events, totals.pending) == (2, 4, 2)
    assert (totals.claimed, totals.dead_letters, totals.oldest_pending_at) == (1, 1, first)


def test_list_dead_letters_by_session_then_index_with_a_prefix_and_pages(store: Store) -> None:
    """§6 inspect.list_dead_letters: order, prefix (a range, not a lookup), opaque cursor."""
    for sid in ("job-2", "job-1", "other"):
        store.append(sid, [NewEvent("a"), NewEvent("b"), NewEvent("c")])
    _dead_letter(store, "job-2", 3)
    _dead_letter(store, "job-1", 2, 1)
    _dead_letter(store, "other", 1)
    everything = store.inspect.list_dead_letters()
    assert [(e.session_id, e.index) for e in everything.events] == [
        ("job-1", 1),
        ("job-1", 2),
        ("job-2", 3),
        ("other", 1),
    ]
    assert everything.cursor is None
    assert everything.blocking == [0, 0, 0, 0]  # no lanes
    assert all(e.failed_at is not None for e in everything.events)
    seen = []
    cursor = None
    while True:
        page = store.inspect.list_dead_letters(prefix="job-", cursor=cursor, limit=2)
        seen += [(e.session_id, e.index) for e in page.events]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == [("job-1", 1), ("job-1", 2), ("job-2", 3)]


def test_a_retried_or_skipped_dead_letter_is_no_longer_listed(store: Store) -> None:
    """§6 list_dead_letters lists unprocessed dead letters only."""
    store.append("s", [NewEvent("a")])
    store.append("t", [NewEvent("a")])
    _dead_letter(store, "s", 1)
    _dead_letter(store, "t", 1)
    store.retry_dead_letter("s", index=1)
    store.skip_event("t", index=1, reason="r")
    assert store.inspect.list_dead_letters().events == []


@pytest.mark.parametrize("cursor", ["", "x", "[1, 2]", '["s"]', '["s", "1"]', "null"])
def test_a_cursor_list_dead_letters_did_not_make_is_invalid(store: Store, cursor: str) -> None:
    """§4: a bad cursor is INVALID_ARGUMENT, not an empty page."""
    with pytest.raises(A2Error) as raised:
        store.inspect.list_dead_letters(cursor=cursor)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT


def test_claimed_count_uses_the_store_clock(store: Store, clock: FakeClock) -> None:
    """§6 SessionSummary.claimed_count: a claim counts while its lease lasts, by the store's
    clock."""
    store.append("s", [NewEvent("a")])
    store.claim_available("s", holder="w", ttl_ms=1_000)
    summary = store.inspect.session("s")
    assert summary is not None and summary.claimed_count == 1
    clock.advance(ms=1_000)
    summary = store.inspect.session("s")
    assert summary is not None and summary.claimed_count == 0
    assert clock.now() - summary.first_event_at == timedelta(milliseconds=1_000)


HOUR = timedelta(hours=1)


def _counts(store: Store, session_id: str = "s") -> tuple[int, int, int, int]:
    """(pending, claimed, waiting, scheduled) of the session."""
    summary = store.inspect.session(session_id)
    assert summary is not None
    return (
        summary.pending_count,
        summary.claimed_count,
        summary.waiting_count,
        summary.scheduled_count,
    )


def _held(store: Store, session_id: str = "s") -> list[int]:
    return [e.index for e in store.inspect.list_waiting_and_scheduled(session_id)]


def _claim_indexes(store: Store, session_id: str = "s") -> list[int]:
    """Claim what is claimable, for a day: the claims outlive the test's clock moves."""
    claim = store.claim_available(session_id, holder="w", ttl_ms=24 * 3_600_000)
    return [e.index for e in claim.events]


def test_waiting_and_scheduled_events_are_pending_never_claimed(
    store: Store, clock: FakeClock
) -> None:
    """§7 in SessionSummary: a wait (with or without a timeout) and a later run count as
    waiting and scheduled, and as pending, never as claimed; a run whose time came is
    not scheduled, a wait whose timeout passed waits until a claim takes it, a signal
    ends its waits."""
    later = clock.now() + HOUR
    store.append(
        "s",
        [
            NewEvent("approve?", wake_on="go"),  # 1: waits for the signal alone
            NewEvent("remind?", wake_on="go", available_at=later),  # 2: or its timeout
            NewEvent("follow-up", available_at=later),  # 3: scheduled
            NewEvent("now"),  # 4: ready
            NewEvent("past", available_at=clock.now() - HOUR),  # 5: ready too
        ],
    )
    assert _counts(store) == (5, 0, 2, 1)
    assert _held(store) == [1, 2, 3]
    assert _claim_indexes(store) == [4, 5]
    assert _counts(store) == (5, 2, 2, 1)
    clock.set(later)  # 3's time came; 2's timeout passed, but nothing claimed it yet
    assert _counts(store) == (5, 2, 2, 0)
    assert _held(store) == [1, 2]
    assert _claim_indexes(store) == [2, 3]
    assert _counts(store) == (5, 4, 1, 0)
    assert store.signal("s", "go").woken == [1]
    summary = store.inspect.session("s")
    assert summary is not None
    assert (summary.event_count, summary.pending_count, summary.waiting_count) == (6, 5, 0)
    assert _held(store) == []


def test_a_delayed_retry_a_signal_and_a_cancel_are_neither_waiting_nor_scheduled(
    store: Store, clock: FakeClock
) -> None:
    """§7 counts: a failed event claimable again later was claimed before (not scheduled);
    a signal's own event is settled (not waiting); a cancelled session holds neither."""
    store.append("s", [NewEvent("job")])
    [job] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.fail_attempt(
        "s", index=1, attempt=job.attempt_count, error="e", max_failures=3, retry_after_ms=60_000
    )
    store.signal("s", "go")
    assert _counts(store) == (1, 0, 0, 0)
    store.append(
        "s", [NewEvent("w", wake_on="go2"), NewEvent("l", available_at=clock.now() + HOUR)]
    )
    assert _counts(store) == (3, 0, 1, 1)
    assert store.cancel_session("s", reason="stop").cancelled == 3
    assert _counts(store) == (0, 0, 0, 0)
    assert _held(store) == []


def test_a_scheduled_event_behind_its_lane_is_scheduled(store: Store, clock: FakeClock) -> None:
    """§7 counts: a later run waiting behind its lane is scheduled all the same; the events
    its lane holds behind it are neither."""
    at = clock.now() + HOUR
    store.append(
        "s",
        [
            NewEvent("first", lane="L"),
            NewEvent("later", lane="L", available_at=at),
            NewEvent("after", lane="L"),
        ],
    )
    assert _counts(store) == (3, 0, 0, 1)
    assert _held(store) == [2]
    [held] = store.inspect.list_waiting_and_scheduled("s")
    assert (held.claim_expires_at, held.claim_holder, held.wake_on) == (at, None, None)


def test_totals_count_waiting_and_scheduled_over_every_session(
    store: Store, clock: FakeClock
) -> None:
    """inspect.totals: waiting and scheduled summed over the sessions, among the pending."""
    empty = store.inspect.totals()
    assert (empty.waiting, empty.scheduled) == (0, 0)
    at = clock.now() + HOUR
    store.append("a", [NewEvent("w", wake_on="go"), NewEvent("l", available_at=at)])
    store.append("b", [NewEvent("w", wake_on="go", available_at=at), NewEvent("x")])
    store.signal("c", "go")
    totals = store.inspect.totals()
    assert (totals.sessions, totals.events, totals.pending, totals.claimed) == (3, 5, 4, 0)
    assert (totals.waiting, totals.scheduled) == (2, 1)
    store.claim_available("b", holder="w", ttl_ms=2 * 3_600_000)  # x, not the wait
    clock.set(at)
    totals = store.inspect.totals()
    assert (totals.pending, totals.claimed, totals.waiting, totals.scheduled) == (4, 1, 2, 0)
    listed = {s.session_id: s for s in store.inspect.list_sessions().sessions}
    assert [(s.waiting_count, s.scheduled_count) for s in listed.values()] == [
        (1, 0),
        (1, 0),
        (0, 0),
    ]
    assert listed["a"] == store.inspect.session("a")


def test_list_waiting_and_scheduled_pages_by_index(store: Store, clock: FakeClock) -> None:
    """inspect.list_waiting_and_scheduled: the session's waiting and scheduled events alone,
    by index, after ``after_index``, at most ``limit``; [] for a session without any."""
    at = clock.now() + HOUR
    store.append("s", [NewEvent("x")])
    for n in range(3):
        store.append("s", [NewEvent(f"l{n}", available_at=at), NewEvent(f"w{n}", wake_on="go")])
    store.append("s", [NewEvent("y"), NewEvent("done", settled=True)])
    store.append("t", [NewEvent("w", wake_on="go")])
    assert _held(store) == [2, 3, 4, 5, 6, 7]
    page = store.inspect.list_waiting_and_scheduled("s", after_index=3, limit=2)
    assert [(e.index, e.type, e.waiting) for e in page] == [(4, "l1", False), (5, "w1", True)]
    assert [e.index for e in store.inspect.list_waiting_and_scheduled("s", after_index=7)] == []
    assert store.inspect.list_waiting_and_scheduled("nobody") == []
    summary = store.inspect.session("s")
    assert summary is not None
    assert (summary.waiting_count, summary.scheduled_count) == (3, 3)


@pytest.mark.parametrize(
    ("session_id", "keywords"), [("", {}), ("s", {"after_index": -1}), ("s", {"limit": 0})]
)
def test_list_waiting_and_scheduled_refuses_bad_arguments(
    store: Store, session_id: str, keywords: dict[str, int]
) -> None:
    """§4: a bad session id, index or limit is INVALID_ARGUMENT."""
    with pytest.raises(A2Error) as raised:
        store.inspect.list_waiting_and_scheduled(session_id, **keywords)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
