"""§6 Operations, retention: delete_session and prune."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from a2sql import A2Error, DeleteResult, ErrorCode, NewEvent, PruneResult, Store
from a2sql.testing import FakeClock


def _settled(store: Store, session_id: str, count: int = 2) -> None:
    """A session whose events are all processed (completed, or appended settled)."""
    store.append(session_id, [NewEvent("a", id=f"{session_id}/a")])
    store.append(session_id, [NewEvent("s", settled=True) for _ in range(count - 1)])
    [event] = store.claim_available(session_id, holder="w", ttl_ms=1_000).events
    store.complete_attempt(session_id, index=1, attempt=event.attempt_count, events=[])


def test_delete_session_deletes_events_and_snapshots_and_lets_ids_start_over(
    store: Store,
) -> None:
    """§6 delete_session: counts; the ids may be appended again, indexes from 1."""
    store.append("s", [NewEvent("a", id="e1"), NewEvent("b", id="e2")])
    store.put_snapshot("s", "r1", 1, {"n": 1})
    store.put_snapshot("s", "r2", 2, {"n": 2})
    store.append("other", [NewEvent("a")])
    assert store.delete_session("s") == DeleteResult(events=2, snapshots=2)
    assert store.read("s") == []
    assert store.inspect.list_snapshots("s") == []
    assert store.inspect.session("s") is None
    again = store.append("s", [NewEvent("b", id="e2")])
    assert [(e.index, e.id, e.type) for e in again.events] == [(1, "e2", "b")]
    assert len(store.read("other")) == 1


def test_delete_of_a_session_with_live_claims_and_dead_letters(store: Store) -> None:
    """§6 delete_session: whatever state its events are in; a late completion is
    EVENT_NOT_FOUND."""
    store.append("s", [NewEvent("a"), NewEvent("b")])
    [first, second] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.fail_attempt("s", index=2, attempt=second.attempt_count, error="x", max_failures=1)
    assert store.delete_session("s") == DeleteResult(events=2, snapshots=0)
    with pytest.raises(A2Error) as raised:
        store.complete_attempt("s", index=1, attempt=first.attempt_count, events=[])
    assert raised.value.code is ErrorCode.EVENT_NOT_FOUND


def test_delete_of_an_unknown_session_deletes_nothing(store: Store) -> None:
    """§6 delete_session: nothing there, nothing deleted."""
    assert store.delete_session("nobody") == DeleteResult(events=0, snapshots=0)


def test_prune_deletes_settled_sessions_older_than_the_cut_only(
    store: Store, clock: FakeClock
) -> None:
    """§6 prune: settled and older than the cut; pending, dead-lettered and recent ones stay."""
    _settled(store, "old-settled")
    store.put_snapshot("old-settled", "r", 1, {"n": 1})
    store.append("old-pending", [NewEvent("a")])
    store.append("old-dead", [NewEvent("a")])
    [dead] = store.claim_available("old-dead", holder="w", ttl_ms=1_000).events
    store.fail_attempt("old-dead", index=1, attempt=dead.attempt_count, error="x", max_failures=1)
    clock.advance(seconds=3600)
    cut = clock.now()
    _settled(store, "new-settled")
    assert store.inspect.prunable(settled_before=cut) == PruneResult(1, 2, 1)
    result = store.prune(settled_before=cut)
    assert result == PruneResult(sessions=1, events=2, snapshots=1)
    remaining = [s.session_id for s in store.inspect.list_sessions().sessions]
    assert remaining == ["new-settled", "old-dead", "old-pending"]
    assert store.prune(settled_before=cut) == PruneResult(sessions=0, events=0, snapshots=0)
    assert store.inspect.prunable(settled_before=cut) == PruneResult(0, 0, 0)


def test_prune_takes_the_latest_time_of_any_event(store: Store, clock: FakeClock) -> None:
    """§6 prune: an old session touched after the cut (here: completed) is kept."""
    store.append("s", [NewEvent("a")])
    [event] = store.claim_available("s", holder="w", ttl_ms=1_000).events
    cut = clock.advance(ms=10)
    clock.advance(ms=1)
    store.complete_attempt("s", index=1, attempt=event.attempt_count, events=[])
    assert store.prune(settled_before=cut).sessions == 0
    assert store.prune(settled_before=clock.now() + timedelta(milliseconds=1)).sessions == 1


def test_prune_by_prefix_and_limit_until_done(store: Store, clock: FakeClock) -> None:
    """§6 prune: only under the prefix; at most ``limit`` a call; call again until 0."""
    for n in range(5):
        _settled(store, f"job-{n}", count=1)
    _settled(store, "jobs", count=1)  # under "job" but not under "job-"
    _settled(store, "keep", count=1)
    cut = clock.advance(ms=1)
    assert store.inspect.prunable(settled_before=cut, prefix="job-") == PruneResult(5, 5, 0)
    deleted = []
    while (result := store.prune(settled_before=cut, prefix="job-", limit=2)).sessions:
        assert result.sessions <= 2
        deleted.append(result.sessions)
    assert deleted == [2, 2, 1]
    remaining = [s.session_id for s in store.inspect.list_sessions().sessions]
    assert remaining == ["jobs", "keep"]


def test_prune_and_delete_check_their_arguments(store: Store) -> None:
    """§4: a naive datetime, a bad limit, a bad session id are INVALID_ARGUMENT."""
    calls: list[Callable[[], object]] = [
        lambda: store.prune(settled_before=datetime(2026, 1, 1)),
        lambda: store.prune(settled_before="2026-01-01"),  # type: ignore[arg-type]
        lambda: store.prune(settled_before=datetime.now().astimezone(), limit=0),
        lambda: store.prune(settled_before=datetime.now().astimezone(), prefix=None),  # type: ignore[arg-type]
        lambda: store.delete_session(""),
    ]
    for call in calls:
        with pytest.raises(A2Error) as raised:
            call()
        assert raised.value.code is ErrorCode.INVALID_ARGUMENT
