"""SPEC §1/§3 lanes: only the oldest unprocessed event of a lane is ready."""

from __future__ import annotations

from a2sql import NewEvent, Store
from a2sql.testing import FakeClock


def claim_ids(store: Store, session_id: str = "s") -> list[str]:
    """Claim what is ready now (60 s lease) and return the claimed ids in index order."""
    return [e.id for e in store.claim_available(session_id, holder="w", ttl_ms=60_000).events]


def complete(store: Store, event_id: str, returned: list[NewEvent] | None = None) -> None:
    """Complete the current attempt of the event with ``event_id`` in session "s"."""
    [event] = [e for e in store.read("s") if e.id == event_id]
    result = store.complete_attempt(
        "s", index=event.index, attempt=event.attempt_count, events=returned or []
    )
    assert result.outcome == "completed"


def test_only_oldest_unprocessed_event_of_a_lane_is_ready(store: Store) -> None:
    """§3 append step 4: a lane event is ready only if its lane has no unprocessed event."""
    store.append(
        "s",
        [
            NewEvent("t", id="a1", lane="A"),
            NewEvent("t", id="n1"),
            NewEvent("t", id="a2", lane="A"),
            NewEvent("t", id="b1", lane="B"),
            NewEvent("t", id="n2"),
        ],
    )
    store.append("s", [NewEvent("t", id="a3", lane="A"), NewEvent("t", id="n3")])
    assert claim_ids(store) == ["a1", "n1", "b1", "n2", "n3"]
    assert [e.attempt_count for e in store.read("s") if e.lane == "A"] == [1, 0, 0]


def test_claimed_lane_head_keeps_blocking_and_busy_reports_its_expiry(
    store: Store, clock: FakeClock
) -> None:
    """§3: a claimed or failed head is still unprocessed: its followers stay unready."""
    store.append("s", [NewEvent("t", id="h", lane="L"), NewEvent("t", id="f", lane="L")])
    [head] = store.claim_available("s", holder="w", ttl_ms=1000).events
    busy = store.claim_available("s", holder="w", ttl_ms=1000)
    assert (busy.outcome, busy.retry_at) == ("busy", head.claim_expires_at)

    store.fail_attempt("s", index=1, attempt=1, error="retry", max_failures=5)
    assert claim_ids(store) == ["h"]


def test_completing_the_lane_head_makes_the_next_event_ready(store: Store) -> None:
    """§3 complete_attempt: the oldest unprocessed event of the lane becomes ready."""
    store.append(
        "s",
        [
            NewEvent("t", id="h", lane="L"),
            NewEvent("t", id="s1", lane="L", settled=True),
            NewEvent("t", id="x", lane="M"),
            NewEvent("t", id="next", lane="L"),
            NewEvent("t", id="last", lane="L"),
        ],
    )
    assert claim_ids(store) == ["h", "x"]
    complete(store, "h")
    assert claim_ids(store) == ["next"]
    complete(store, "next")
    assert claim_ids(store) == ["last"]


def test_a_dead_lettered_event_blocks_its_lane_forever(store: Store, clock: FakeClock) -> None:
    """§1 lanes: a dead-lettered event is unprocessed, so it blocks its lane."""
    store.append(
        "s",
        [
            NewEvent("t", id="dead", lane="L"),
            NewEvent("t", id="behind", lane="L"),
            NewEvent("t", id="free", lane="M"),
        ],
    )
    assert claim_ids(store) == ["dead", "free"]
    store.fail_attempt("s", index=1, attempt=1, error="boom", max_failures=1)
    complete(store, "free")
    clock.advance(seconds=86_400)
    store.append("s", [NewEvent("t", id="later", lane="L"), NewEvent("t", id="m2", lane="M")])

    assert claim_ids(store) == ["m2"]
    complete(store, "m2")
    clock.advance(seconds=86_400)
    assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "settled"
    assert [e.attempt_count for e in store.read("s") if e.lane == "L"] == [1, 0, 0]


def test_earlier_events_of_the_same_batch_count_but_settled_ones_do_not(store: Store) -> None:
    """§3 append step 4: earlier unsettled events of the batch block; settled events never do."""
    store.append("s", [NewEvent("t", id="old", lane="S", settled=True)])
    store.append(
        "s",
        [
            NewEvent("t", id="s1", lane="L", settled=True),
            NewEvent("t", id="l1", lane="L"),
            NewEvent("t", id="l2", lane="L"),
            NewEvent("t", id="s2", lane="S"),
        ],
    )
    assert claim_ids(store) == ["l1", "s2"]


def test_lanes_are_per_session(store: Store) -> None:
    """§1 lanes: a lane is a group inside one session; other sessions' lanes do not block."""
    store.append("a", [NewEvent("t", id="a1", lane="L"), NewEvent("t", id="a2", lane="L")])
    store.append("b", [NewEvent("t", id="b1", lane="L"), NewEvent("t", id="b2", lane="L")])
    assert claim_ids(store, "a") == ["a1"]
    assert claim_ids(store, "b") == ["b1"]


def test_children_of_a_completed_attempt_respect_lane_readiness(store: Store) -> None:
    """§3 complete_attempt: returned events are appended as in append step 4, lanes included."""
    store.append("s", [NewEvent("t", id="p", lane="L"), NewEvent("t", id="q", lane="L")])
    assert claim_ids(store) == ["p"]
    complete(
        store,
        "p",
        [
            NewEvent("child", id="c-l", lane="L"),
            NewEvent("child", id="c-m1", lane="M"),
            NewEvent("child", id="c-m2", lane="M"),
            NewEvent("child", id="c-n"),
        ],
    )
    assert claim_ids(store) == ["q", "c-m1", "c-n"]
    complete(store, "q")
    complete(store, "c-m1")
    assert claim_ids(store) == ["c-l", "c-m2"]


def test_child_in_the_lane_of_its_parent_is_ready_when_the_lane_is_otherwise_empty(
    store: Store,
) -> None:
    """§3 complete_attempt: the parent is processed before its children are appended."""
    store.append("s", [NewEvent("t", id="p", lane="L")])
    assert claim_ids(store) == ["p"]
    complete(
        store, "p", [NewEvent("child", id="c1", lane="L"), NewEvent("child", id="c2", lane="L")]
    )
    assert claim_ids(store) == ["c1"]
