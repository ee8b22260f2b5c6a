"""SPEC §7 Waiting for a signal: ``NewEvent(wake_on=...)`` and ``signal``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from a2sql import A2Error, ClaimResult, ErrorCode, EventCause, NewEvent, SignalResult, Store
from a2sql.testing import FakeClock

HOUR = timedelta(hours=1)


def claimed_indexes(store: Store, session_id: str = "s") -> list[int]:
    return [e.index for e in store.claim_available(session_id, holder="w", ttl_ms=60_000).events]


def test_a_wait_without_timeout_is_woken_by_its_signal_alone(
    store: Store, clock: FakeClock
) -> None:
    """§7 waits: not claimable until the signal, however late; ``busy`` without a
    ``retry_at`` meanwhile (nothing becomes claimable by itself)."""
    [waiting] = store.append("s", [NewEvent("approve?", wake_on="approval")]).events
    assert (waiting.wake_on, waiting.waiting, waiting.wait_until) == ("approval", True, None)
    assert store.claim_available("s", holder="w", ttl_ms=1_000) == ClaimResult("busy")
    assert store.claim_next(holder="w", ttl_ms=1_000).retry_at is None
    clock.advance(ms=365 * 24 * 3600 * 1000)
    assert store.claim_available("s", holder="w", ttl_ms=1_000).outcome == "busy"

    result = store.signal("s", "approval", {"yes": True}, id="sig-1")
    assert result.woken == [1] and not result.replayed
    assert claimed_indexes(store) == [1]


def test_a_signal_is_a_settled_event_of_its_type(store: Store, clock: FakeClock) -> None:
    """§7 signal: appends a settled event of type ``name`` with the payload and id; a
    signal to a session with no waiter is recorded and wakes nothing."""
    result = store.signal("s", "approval", {"by": "ana"}, id="sig-1")
    assert result == SignalResult(store.read("s")[0], [])
    event = result.event
    assert (event.type, event.payload, event.id, event.index) == (
        "approval",
        {"by": "ana"},
        "sig-1",
        1,
    )
    assert event.processed_at == event.created_at == clock.now()
    assert event.processed_by_attempt is None and not event.waiting
    assert store.claim_available("s", holder="w", ttl_ms=1_000).outcome == "settled"


def test_a_wait_is_woken_by_its_timeout_without_a_signal(store: Store, clock: FakeClock) -> None:
    """§7 waits: ``available_at`` is the timeout; ``busy`` with it as ``retry_at``."""
    deadline = clock.now() + HOUR
    [waiting] = store.append(
        "s", [NewEvent("approve?", wake_on="approval", available_at=deadline)]
    ).events
    assert waiting.wait_until == deadline
    assert store.claim_available("s", holder="w", ttl_ms=1_000) == ClaimResult(
        "busy", retry_at=deadline
    )
    clock.set(deadline)
    assert claimed_indexes(store) == [1]
    # Claimed, it waits no more: a late signal does not touch it.
    assert store.signal("s", "approval").woken == []
    assert store.read("s", through_index=1)[0].claim_holder == "w"


def test_a_signal_before_the_timeout_wakes_at_once(store: Store, clock: FakeClock) -> None:
    """§7 waits: the signal makes the waiting event claimable now."""
    store.append("s", [NewEvent("approve?", wake_on="approval", available_at=clock.now() + HOUR)])
    clock.advance(ms=1_000)
    assert store.signal("s", "approval").woken == [1]
    [woken] = store.read("s", through_index=1)
    assert (woken.claim_expires_at, woken.wake_on, woken.waiting) == (None, None, False)
    assert claimed_indexes(store) == [1]


def test_two_signals_wake_once(store: Store) -> None:
    """§7 waits: the second signal finds nothing waiting."""
    store.append("s", [NewEvent("approve?", wake_on="approval")])
    assert store.signal("s", "approval").woken == [1]
    assert store.signal("s", "approval").woken == []
    assert claimed_indexes(store) == [1]


def test_a_signal_wakes_every_event_waiting_for_its_name_and_no_other(store: Store) -> None:
    """§7 signal: ``woken`` lists the indexes of the session's events waiting for ``name``."""
    store.append(
        "s",
        [
            NewEvent("a", wake_on="approval"),
            NewEvent("b", wake_on="callback"),
            NewEvent("c", wake_on="approval"),
        ],
    )
    store.append("other", [NewEvent("d", wake_on="approval")])
    assert store.signal("s", "approval").woken == [1, 3]
    assert claimed_indexes(store) == [1, 3]
    assert store.claim_available("other", holder="w", ttl_ms=1_000).outcome == "busy"


def test_a_signal_replayed_by_id_wakes_nothing(store: Store) -> None:
    """§7 signal: idempotent by ``id`` like any append: the same event, nothing woken."""
    first = store.signal("s", "approval", {"n": 1}, id="sig-1")
    store.append("s", [NewEvent("approve?", wake_on="approval")])
    again = store.signal("s", "approval", {"n": 1}, id="sig-1")
    assert (again.event, again.woken, again.replayed) == (first.event, [], True)
    # A signal that came before the wait was appended already woke it (no lost wake-up).
    assert claimed_indexes(store) == [2]


def test_a_signal_that_came_first_wakes_a_wait_appended_later(store: Store) -> None:
    """§7 no lost wake-up: an event without a cause, appended to wait for a signal the
    session already holds, is claimable at once."""
    store.signal("s", "approval")
    [waiting] = store.append("s", [NewEvent("approve?", wake_on="approval")]).events
    assert (waiting.claim_expires_at, waiting.wake_on, waiting.waiting) == (None, None, False)
    assert claimed_indexes(store) == [2]


def test_a_wait_returned_by_a_handler_sees_a_signal_sent_while_it_ran(store: Store) -> None:
    """§7 no lost wake-up: the handler asks for approval, the approval comes while it still
    runs, and the wait it returns is woken at once."""
    store.append("s", [NewEvent("draft")])
    [draft] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.signal("s", "approval")  # index 2, after the cause (1)
    done = store.complete_attempt(
        "s",
        index=1,
        attempt=draft.attempt_count,
        events=[NewEvent("send", id="send-1", wake_on="approval")],
    )
    [send] = done.events
    assert (send.index, send.claim_expires_at, send.wake_on) == (3, None, None)
    assert claimed_indexes(store) == [3]


def test_a_signal_older_than_the_cause_does_not_wake(store: Store) -> None:
    """§7 no lost wake-up: only a signal newer than the event's cause counts."""
    store.signal("s", "approval")  # index 1: an earlier round's approval
    store.append("s", [NewEvent("draft")])
    [draft] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.append(
        "s",
        [
            NewEvent(
                "send",
                wake_on="approval",
                cause=EventCause(index=draft.index, attempt=draft.attempt_count),
            )
        ],
    )
    assert store.read("s", after_index=2)[0].waiting
    assert store.signal("s", "approval").woken == [3]


def test_a_waiting_event_is_pending(store: Store) -> None:
    """§7 waits: a waiting event counts as pending."""
    result = store.append("s", [NewEvent("approve?", wake_on="approval")])
    assert result.has_pending
    assert store.append("s", []).has_pending
    summary = store.inspect.session("s")
    assert summary is not None and summary.pending_count == 1


def test_a_waiting_event_holds_its_lane(store: Store) -> None:
    """§7 waits: the lane's later events wait behind it, until it is woken and done."""
    store.append("s", [NewEvent("a", lane="L", wake_on="go"), NewEvent("b", lane="L")])
    assert store.claim_available("s", holder="w", ttl_ms=60_000).outcome == "busy"
    assert store.signal("s", "go").woken == [1]
    [first] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    assert first.index == 1
    store.complete_attempt("s", index=1, attempt=first.attempt_count, events=[])
    assert claimed_indexes(store) == [2]


def test_a_settled_event_cannot_wait(store: Store) -> None:
    """§7 waits: ``wake_on`` on a settled event is ``INVALID_ARGUMENT``; nothing written."""
    with pytest.raises(A2Error) as raised:
        store.append("s", [NewEvent("x", settled=True, wake_on="approval")])
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert "wake_on" in raised.value.message
    assert store.read("s") == []


@pytest.mark.parametrize("name", ["", 7, "x" * 256])
def test_a_bad_signal_name_is_refused(store: Store, name: object) -> None:
    """§7 signal: the name is a non-empty string of at most 255 characters."""
    with pytest.raises(A2Error) as raised:
        store.signal("s", name)  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert store.read("s") == []
