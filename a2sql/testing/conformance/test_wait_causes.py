"""SPEC §7 no lost wake-up, event by event: a signal the session already holds wakes a wait
appended later only if it is newer than that wait's own cause (any signal, without a
cause), whatever else the same append carries."""

from __future__ import annotations

import pytest

from a2sql import EventCause, NewEvent, Store


@pytest.mark.parametrize("caused_first", [False, True])
def test_waits_of_one_batch_see_signals_newer_than_their_own_cause(
    store: Store, caused_first: bool
) -> None:
    """§7 waits: in one append, a wait without a cause is woken by the signal at 2, and a
    wait caused by the event at 3 is not (the signal is older than its cause), in either
    order."""
    store.append("s", [NewEvent("draft")])  # 1
    store.signal("s", "go")  # 2
    store.append("s", [NewEvent("next")])  # 3
    claimed = store.claim_available("s", holder="w", ttl_ms=60_000).events
    [third] = [event for event in claimed if event.index == 3]
    uncaused = NewEvent("a", wake_on="go")
    caused = NewEvent("b", wake_on="go", cause=EventCause(3, third.attempt_count))
    batch = [caused, uncaused] if caused_first else [uncaused, caused]
    appended = store.append("s", batch).events
    waiting = {event.type: event.waiting for event in appended}
    assert waiting == {"a": False, "b": True}
