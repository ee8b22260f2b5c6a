"""inspect.list_sessions and inspect.read_events (SPEC §3 inspect.*)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from a2sql import NewEvent, SessionSummary, Store
from a2sql.testing import FakeClock


def _append(store: Store, session_id: str, count: int = 1) -> None:
    store.append(session_id, [NewEvent("n", {"n": n}) for n in range(count)])


def _claim(store: Store, session_id: str, *, exclude: list[int] | None = None) -> list[int]:
    result = store.claim_available(
        session_id, holder="w", ttl_ms=60_000, exclude_indexes=exclude or []
    )
    assert result.outcome == "claimed"
    return [event.index for event in result.events]


def _all_ids(store: Store, prefix: str = "") -> list[str]:
    return [
        summary.session_id
        for summary in store.inspect.list_sessions(prefix=prefix, limit=1000).sessions
    ]


def test_list_sessions_counts_events_pending_failed_attempts_and_failures(
    store: Store, clock: FakeClock
) -> None:
    """list_sessions: counts; pending excludes processed and dead-lettered events; sums add up."""
    start = clock.now()
    store.append("s", [NewEvent("n") for _ in range(4)] + [NewEvent("settled", settled=True)])
    clock.advance(ms=10)
    assert _claim(store, "s", exclude=[4]) == [1, 2, 3]
    assert store.complete_attempt("s", index=1, attempt=1, events=[]).outcome == "completed"
    fail = store.fail_attempt("s", index=2, attempt=1, error="boom", max_failures=3)
    assert fail.outcome == "failed"
    dead = store.fail_attempt("s", index=3, attempt=1, error="fatal", max_failures=1)
    assert dead.outcome == "dead_lettered"
    clock.advance(ms=10)
    assert _claim(store, "s", exclude=[4]) == [2]
    store.fail_attempt("s", index=2, attempt=2, error="again", max_failures=3)
    _append(store, "t", 2)
    [summary, other] = store.inspect.list_sessions().sessions
    assert summary == SessionSummary(
        session_id="s",
        event_count=5,
        pending_count=2,  # 2 (failed, retryable) and 4 (never claimed)
        failed_count=1,  # 3 (dead-lettered)
        attempt_count=1 + 2 + 1,
        failure_count=2 + 1,
        first_event_at=start,
        updated_at=clock.now(),
        claimed_count=0,  # 2's claim was released by its failure; 4 was never claimed
        blocked_count=0,  # no lanes
        oldest_pending_at=start,
    )
    assert (other.session_id, other.event_count, other.pending_count) == ("t", 2, 2)
    assert (other.failed_count, other.attempt_count, other.failure_count) == (0, 0, 0)


def _created(store: Store, clock: FakeClock) -> None:
    _claim(store, "s")
    clock.advance(ms=7)
    _append(store, "s")


def _claimed(store: Store, clock: FakeClock) -> None:
    _claim(store, "s")


def _reclaimed(store: Store, clock: FakeClock) -> None:
    _claim(store, "s")
    clock.advance(seconds=61)  # the lease ran out: the next claim is a second attempt
    _claim(store, "s")


def _failed(store: Store, clock: FakeClock) -> None:
    _claim(store, "s")
    clock.advance(ms=7)
    store.fail_attempt("s", index=1, attempt=1, error="e", max_failures=5)


def _processed(store: Store, clock: FakeClock) -> None:
    _claim(store, "s")
    clock.advance(ms=7)
    store.complete_attempt("s", index=1, attempt=1, events=[])


def _dead_lettered(store: Store, clock: FakeClock) -> None:
    _claim(store, "s")
    clock.advance(ms=7)
    store.fail_attempt("s", index=1, attempt=1, error="e", max_failures=1)


@pytest.mark.parametrize(
    "last_change",
    [_created, _claimed, _reclaimed, _failed, _processed, _dead_lettered],
    ids=["created", "claimed", "reclaimed", "failed", "processed", "dead-lettered"],
)
def test_list_sessions_updated_at_is_the_latest_timestamp_of_any_event(
    store: Store, clock: FakeClock, last_change: Callable[[Store, FakeClock], None]
) -> None:
    """list_sessions: first_event_at = earliest created_at; updated_at = latest of every time."""
    clock.set(datetime(2026, 2, 3, 4, 5, 6, 789_999, tzinfo=UTC))
    first = datetime(2026, 2, 3, 4, 5, 6, 789_000, tzinfo=UTC)
    _append(store, "s", 2)
    clock.advance(ms=100)
    last_change(store, clock)
    [summary] = store.inspect.list_sessions().sessions
    assert summary.first_event_at == first
    assert summary.updated_at == clock.now().replace(
        microsecond=clock.now().microsecond // 1000 * 1000
    )
    assert summary.updated_at > first


def test_list_sessions_updated_at_spans_all_events_of_the_session(
    store: Store, clock: FakeClock
) -> None:
    """list_sessions: updated_at is the latest time over every event, not over the last one."""
    start = clock.now()
    _append(store, "s")
    clock.advance(ms=5)
    _append(store, "s")
    clock.advance(ms=5)
    _claim(store, "s", exclude=[2])
    clock.advance(ms=5)
    store.complete_attempt("s", index=1, attempt=1, events=[])
    [summary] = store.inspect.list_sessions().sessions
    assert summary.first_event_at == start
    assert summary.updated_at == start + timedelta(milliseconds=15)


SESSIONS = [
    "ab",
    "abc",
    "Ab",
    "AB",
    "abd",
    "a%c",
    "a_c",
    "a\\c",
    "axc",
    "a%",
    "a",
    "b",
    "é1",
    "é2",
    "ê",
]


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("ab", ["ab", "abc", "abd"]),
        ("Ab", ["Ab"]),
        ("A", ["AB", "Ab"]),
        ("a%", ["a%", "a%c"]),
        ("a_", ["a_c"]),
        ("a\\", ["a\\c"]),
        ("%", []),
        ("_", []),
        ("abc", ["abc"]),
        ("abcd", []),
        ("é", ["é1", "é2"]),
        ("", sorted(SESSIONS)),
    ],
    ids=[
        "plain",
        "case-upper",
        "case-single",
        "percent",
        "underscore",
        "backslash",
        "percent-alone",
        "underscore-alone",
        "whole-id",
        "longer-than-id",
        "non-ascii",
        "empty",
    ],
)
def test_list_sessions_prefix_is_exact_case_sensitive_and_has_no_wildcards(
    store: Store, prefix: str, expected: list[str]
) -> None:
    """list_sessions: `prefix` matches exactly, case-sensitively; `%`, `_`, `\\` are plain."""
    for session_id in SESSIONS:
        _append(store, session_id)
    assert _all_ids(store, prefix) == expected


def test_list_sessions_prefix_ending_in_the_last_code_point(store: Store) -> None:
    """list_sessions: a prefix ending in U+10FFFF still matches exactly its own ids."""
    top = "\U0010ffff"
    for session_id in ["a", f"a{top}", f"a{top}x", "b", f"b{top}"]:
        _append(store, session_id)
    assert _all_ids(store, f"a{top}") == [f"a{top}", f"a{top}x"]
    assert _all_ids(store, top) == []


def test_list_sessions_orders_ids_by_code_point(store: Store) -> None:
    """list_sessions: ordered by session id in code point order, on every engine."""
    ids = ["b", "B", "a", "Z", "_", "é", "ä", "A", "aa", "a b", "😀", "ÿ", "z", "Ā", "-", "~"]
    assert sorted(ids) != sorted(ids, key=lambda name: (name.casefold(), name))
    for session_id in reversed(ids):
        _append(store, session_id)
    assert _all_ids(store) == sorted(ids)


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 7, 8])
def test_list_sessions_cursor_pages_through_every_session(store: Store, limit: int) -> None:
    """list_sessions: cursor = last id shown when more follow, else None; pages concatenate."""
    ids = ["x", "X", "é", "a", "_", "a1", "😀"]
    for session_id in ids:
        _append(store, session_id)
    shown: list[str] = []
    cursor: str | None = None
    for _ in range(len(ids) + 1):
        page = store.inspect.list_sessions(cursor=cursor, limit=limit)
        assert len(page.sessions) <= limit
        shown += [summary.session_id for summary in page.sessions]
        if page.cursor is None:
            break
        assert page.cursor == page.sessions[-1].session_id
        assert len(page.sessions) == limit
        cursor = page.cursor
    assert page.cursor is None
    assert shown == sorted(ids)


def test_list_sessions_cursor_is_none_when_a_full_page_is_the_last(store: Store) -> None:
    """list_sessions: a page that exactly exhausts the sessions has cursor None."""
    for session_id in ["a", "b", "c", "d"]:
        _append(store, session_id)
    first = store.inspect.list_sessions(limit=2)
    assert ([s.session_id for s in first.sessions], first.cursor) == (["a", "b"], "b")
    last = store.inspect.list_sessions(cursor=first.cursor, limit=2)
    assert ([s.session_id for s in last.sessions], last.cursor) == (["c", "d"], None)


def test_list_sessions_cursor_and_prefix_combine(store: Store) -> None:
    """list_sessions: the cursor pages within the prefix; ids outside it never appear."""
    for session_id in ["a", "ab1", "ab2", "ab3", "ab4", "ac", "b"]:
        _append(store, session_id)
    page = store.inspect.list_sessions(prefix="ab", limit=3)
    assert ([s.session_id for s in page.sessions], page.cursor) == (["ab1", "ab2", "ab3"], "ab3")
    page = store.inspect.list_sessions(prefix="ab", cursor=page.cursor, limit=3)
    assert ([s.session_id for s in page.sessions], page.cursor) == (["ab4"], None)
    page = store.inspect.list_sessions(prefix="ab", cursor="a", limit=10)
    assert [s.session_id for s in page.sessions] == ["ab1", "ab2", "ab3", "ab4"]
    page = store.inspect.list_sessions(prefix="ab", cursor="ab2", limit=10)
    assert [s.session_id for s in page.sessions] == ["ab3", "ab4"]


def test_read_events_pages_with_default_after_index_and_limit(store: Store) -> None:
    """read_events: after_index defaults to 0; at most `limit` events; through_index = frontier."""
    _append(store, "s", 5)
    _append(store, "other", 3)
    page = store.inspect.read_events("s", limit=2)
    assert ([e.index for e in page.events], page.through_index) == ([1, 2], 5)
    assert all(e.session_id == "s" for e in page.events)
    page = store.inspect.read_events("s", after_index=2, limit=2)
    assert ([e.index for e in page.events], page.through_index) == ([3, 4], 5)
    page = store.inspect.read_events("s")
    assert ([e.index for e in page.events], page.through_index) == ([1, 2, 3, 4, 5], 5)
    assert page.events == store.read("s")
    page = store.inspect.read_events("s", after_index=5)
    assert (page.events, page.through_index) == ([], 5)


@pytest.mark.parametrize(
    ("through_index", "expected_through"),
    [(3, 3), (5, 5), (6, 5), (1000, 5), (0, 0)],
    ids=["below", "at-frontier", "just-past", "far-past", "zero"],
)
def test_read_events_through_index_is_capped_at_the_frontier(
    store: Store, through_index: int, expected_through: int
) -> None:
    """read_events: through_index is used as given up to the frontier, and capped there."""
    _append(store, "s", 5)
    page = store.inspect.read_events("s", through_index=through_index)
    assert page.through_index == expected_through
    assert [e.index for e in page.events] == list(range(1, expected_through + 1))


def test_read_events_of_empty_session_has_through_index_0(store: Store) -> None:
    """read_events: a session without events has frontier 0."""
    page = store.inspect.read_events("nobody")
    assert (page.events, page.through_index) == ([], 0)


def test_read_events_paging_to_the_returned_through_index_is_stable(store: Store) -> None:
    """read_events: passing the returned through_index on, later appends do not extend the run."""
    _append(store, "s", 5)
    page = store.inspect.read_events("s", limit=2)
    through = page.through_index
    seen = [e.index for e in page.events]
    _append(store, "s", 3)
    while True:
        page = store.inspect.read_events("s", after_index=seen[-1], through_index=through, limit=2)
        assert page.through_index == through
        if not page.events:
            break
        seen += [e.index for e in page.events]
    assert seen == [1, 2, 3, 4, 5]
    fresh = store.inspect.read_events("s", after_index=5)
    assert ([e.index for e in fresh.events], fresh.through_index) == ([6, 7, 8], 8)


def test_read_events_limit_caps_a_long_page(store: Store) -> None:
    """read_events: `limit` bounds the page (up to 1000)."""
    _append(store, "s", 120)
    assert len(store.inspect.read_events("s").events) == 100  # the default limit
    assert [e.index for e in store.inspect.read_events("s", limit=1).events] == [1]
    page = store.inspect.read_events("s", limit=1000)
    assert [e.index for e in page.events] == list(range(1, 121))
