"""stream: tail a session without skipping or repeating an index (SPEC §3 stream).

No sleeps: ``next()`` is only called when the event it returns is already stored.
"""

from __future__ import annotations

import pytest

from a2sql import EventStream, NewEvent, Store, StoredEvent

# store.using(connection) has no stream: a stream is the store's, not an operation of
# the caller's transaction.
pytestmark = pytest.mark.a2sql_not_through_using("a stream is the store's")


def _append(store: Store, session_id: str, count: int) -> None:
    store.append(session_id, [NewEvent("n", {"i": i}) for i in range(count)])


def _take(stream: EventStream, count: int) -> list[int]:
    return [next(stream).index for _ in range(count)]


def test_stream_yields_stored_events_in_order_then_new_appends(store: Store) -> None:
    """stream: every event after start_after in index order, then events appended after start."""
    _append(store, "s", 3)
    _append(store, "other", 2)
    with store.stream("s") as stream:
        first = [next(stream) for _ in range(3)]
        assert [e.index for e in first] == [1, 2, 3]
        assert all(isinstance(e, StoredEvent) and e.session_id == "s" for e in first)
        assert first == store.read("s")
        _append(store, "s", 2)
        _append(store, "other", 1)
        assert _take(stream, 2) == [4, 5]
        assert stream.poll() == []


@pytest.mark.parametrize("start_after", [0, 1, 4, 5])
def test_stream_start_after_k_begins_at_k_plus_1(store: Store, start_after: int) -> None:
    """stream: start_after=k yields index k+1 first."""
    _append(store, "s", 5)
    with store.stream("s", start_after=start_after) as stream:
        assert [e.index for e in stream.poll()] == list(range(start_after + 1, 6))
        _append(store, "s", 1)
        assert next(stream).index == 6


def test_stream_start_after_past_the_end_waits_for_that_index(store: Store) -> None:
    """stream: start_after beyond the frontier yields nothing until a later index exists."""
    _append(store, "s", 2)
    with store.stream("s", start_after=3) as stream:
        assert stream.poll() == []
        _append(store, "s", 2)
        assert next(stream).index == 4


def test_stream_never_skips_or_repeats_across_pages(store: Store) -> None:
    """stream: across several pages (> 100 events) and appends in between, each index once."""
    _append(store, "s", 250)
    with store.stream("s") as stream:
        seen = _take(stream, 150)
        _append(store, "s", 130)
        seen += _take(stream, 200)
        _append(store, "s", 1)
        seen += _take(stream, 31)
        assert stream.poll() == []
    assert seen == list(range(1, 382))


def test_stream_poll_and_next_share_one_position(store: Store) -> None:
    """stream: poll() returns what is available now (a page at most); next() continues after it."""
    _append(store, "s", 230)
    with store.stream("s") as stream:
        seen = _take(stream, 5)
        while batch := stream.poll():
            seen += [e.index for e in batch]
        _append(store, "s", 3)
        seen += _take(stream, 1)
        seen += [e.index for e in stream.poll()]
    assert seen == list(range(1, 234))


def test_closing_the_stream_ends_iteration(store: Store) -> None:
    """stream: after close(), next() raises StopIteration even with events left to yield."""
    _append(store, "s", 3)
    stream = store.stream("s")
    assert next(stream).index == 1
    stream.close()
    _append(store, "s", 1)
    with pytest.raises(StopIteration):
        next(stream)
    assert stream.poll() == []
    assert list(stream) == []


def test_stream_is_a_context_manager_that_closes_on_exit(store: Store) -> None:
    """stream: leaving the `with` block closes it; iteration ends."""
    _append(store, "s", 2)
    with store.stream("s") as stream:
        assert next(stream).index == 1
    with pytest.raises(StopIteration):
        next(stream)


def test_stream_for_loop_stops_when_closed_inside(store: Store) -> None:
    """stream: a `for` loop over the stream ends when the consumer closes it."""
    _append(store, "s", 4)
    seen = []
    with store.stream("s") as stream:
        for event in stream:
            seen.append(event.index)
            if event.index == 4:
                stream.close()
    assert seen == [1, 2, 3, 4]
