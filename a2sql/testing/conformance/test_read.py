"""SPEC §3 read: events with ``after_index < index <= through_index``, by index."""

from __future__ import annotations

import pytest

from a2sql import NewEvent, Store


def test_read_of_empty_or_unknown_session_is_empty(store: Store) -> None:
    """§3 read: a session without events reads as an empty list, whatever the bounds."""
    store.append("other", [NewEvent("t")])
    assert store.read("s") == []
    assert store.read("s", after_index=0, through_index=10) == []


@pytest.mark.parametrize(
    ("after_index", "through_index", "expected"),
    [
        (None, None, [1, 2, 3, 4, 5]),
        (0, None, [1, 2, 3, 4, 5]),
        (2, None, [3, 4, 5]),
        (None, 3, [1, 2, 3]),
        (1, 4, [2, 3, 4]),
        (2, 3, [3]),
        (3, 3, []),
        (4, 2, []),
        (5, None, []),
        (None, 0, []),
        (0, 99, [1, 2, 3, 4, 5]),
    ],
)
def test_read_returns_events_after_after_index_through_through_index(
    store: Store, after_index: int | None, through_index: int | None, expected: list[int]
) -> None:
    """§3 read: after_index is exclusive, through_index inclusive; either may be omitted."""
    store.append("s", [NewEvent("t", id=f"e{n}") for n in (1, 2)])
    store.append("other", [NewEvent("t", id="x")])
    store.append("s", [NewEvent("t", id=f"e{n}") for n in (3, 4, 5)])
    events = store.read("s", after_index=after_index, through_index=through_index)
    assert [e.index for e in events] == expected
    assert [e.id for e in events] == [f"e{n}" for n in expected]
    assert {e.session_id for e in events} <= {"s"}


def test_read_orders_by_index_across_appends_and_completions(store: Store) -> None:
    """§3 read: events come back by index, whichever operation appended them."""
    store.append("s", [NewEvent("job", id="p"), NewEvent("other", id="q")])
    store.claim_available("s", holder="w", ttl_ms=1000)
    store.complete_attempt(
        "s", index=2, attempt=1, events=[NewEvent("child", id="c1"), NewEvent("child", id="c2")]
    )
    store.append("s", [NewEvent("late", id="r")])
    store.complete_attempt("s", index=1, attempt=1, events=[NewEvent("child", id="c3")])
    events = store.read("s")
    assert [(e.index, e.id) for e in events] == [
        (1, "p"),
        (2, "q"),
        (3, "c1"),
        (4, "c2"),
        (5, "r"),
        (6, "c3"),
    ]
    assert store.read("s", after_index=2, through_index=4) == events[2:4]
