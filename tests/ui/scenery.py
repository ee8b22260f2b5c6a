"""A store with something on every screen: completed events and their children, a dead
letter blocking its lane, a wait, a run-at, a live claim, an expired one, a snapshot
and presence."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from a2sql import NewEvent, Store


def populate(store: Store) -> None:
    """Sessions ``chat/1`` (a bit of everything), ``job/live`` (a live claim),
    ``job/expired`` (an expired claim) and ``job/dead`` (a dead letter without a lane)."""
    store.append(
        "chat/1",
        [
            NewEvent("user_message", {"text": "book a table for two"}),
            NewEvent("tool_call", {"tool": "search"}, lane="tools"),
            NewEvent("tool_call", {"tool": "book"}, lane="tools"),
            NewEvent("approval_wait", {"ask": "pay 20 EUR?"}, wake_on="approval"),
            NewEvent(
                "follow_up",
                {"in": "1h"},
                available_at=datetime.now(UTC) + timedelta(hours=1),
            ),
        ],
    )
    claimed = store.claim_available("chat/1", holder="worker-a", ttl_ms=60_000)
    assert [e.index for e in claimed.events] == [1, 2]
    store.complete_attempt(
        "chat/1",
        index=1,
        attempt=1,
        events=[NewEvent("assistant_message", {"text": "On it."}, id="chat-1-reply")],
    )
    dead = store.fail_attempt(
        "chat/1", index=2, attempt=1, error="search: timed out after 30 s", max_failures=1
    )
    assert dead.outcome == "dead_lettered"
    store.put_snapshot("chat/1", "transcript", 1, {"messages": 1})
    store.presence.set("chat/1", "user-42", {"typing": True}, ttl_ms=600_000)

    store.append("job/live", [NewEvent("render", {"page": 1})])
    store.claim_available("job/live", holder="worker-b", ttl_ms=600_000)

    store.append("job/expired", [NewEvent("render", {"page": 2})])
    store.claim_available("job/expired", holder="worker-gone", ttl_ms=1)
    time.sleep(0.01)

    store.append("job/dead", [NewEvent("export", {})])
    store.claim_available("job/dead", holder="worker-a", ttl_ms=60_000)
    store.fail_attempt("job/dead", index=1, attempt=1, error="disk full", max_failures=1)
