"""inspect.overview, inspect.in_flight and inspect.list_sessions(state=...): what an
operator's screen and a metrics scrape read, counted as far as a bound; and
inspect.event, one event by its id."""

from __future__ import annotations

from datetime import timedelta

import pytest

from a2sql import A2Error, NewEvent, Store
from a2sql.testing import FakeClock


def _claim(store: Store, session_id: str, *, ttl_ms: int = 60_000) -> list[int]:
    result = store.claim_available(session_id, holder="w", ttl_ms=ttl_ms)
    assert result.outcome == "claimed"
    return [event.index for event in result.events]


def _mixed(store: Store, clock: FakeClock) -> None:
    """ready 2, claimed 1, waiting 1, scheduled 1, dead letters 2 (one in a lane that
    blocks one event), processed 1, signals 1."""
    now = clock.now()
    store.append("o/ready", [NewEvent("a"), NewEvent("b")])
    store.append("o/claimed", [NewEvent("c")])
    _claim(store, "o/claimed")
    store.append("o/waiting", [NewEvent("w", wake_on="go")])
    store.signal("o/other", "go")
    store.append("o/later", [NewEvent("l", available_at=now + timedelta(hours=1))])
    store.append("o/dead", [NewEvent("d", lane="L"), NewEvent("e", lane="L"), NewEvent("f")])
    [head, _free] = _claim(store, "o/dead")
    assert store.fail_attempt("o/dead", index=head, attempt=1, error="x", max_failures=1)
    store.complete_attempt("o/dead", index=3, attempt=1, events=[])
    store.append("p/dead", [NewEvent("g")])
    _claim(store, "p/dead")
    store.fail_attempt("p/dead", index=1, attempt=1, error="y", max_failures=1)


def test_overview_counts_each_kind_of_work(store: Store, clock: FakeClock) -> None:
    start = clock.now()
    _mixed(store, clock)
    view = store.inspect.overview()
    assert (view.ready, view.claimed, view.waiting, view.scheduled) == (2, 1, 1, 1)
    assert (view.dead_letters, view.blocked_lanes) == (2, 1)
    assert view.at == clock.now() and view.bound == 10_000
    assert view.oldest_ready_at == start
    assert not view.capped(view.ready)
    assert view.table_bytes and all(size > 0 for size in view.table_bytes.values())
    assert view.appended_total is None or view.appended_total >= 0


def test_overview_follows_the_clock(store: Store, clock: FakeClock) -> None:
    """An expired claim, a wait past its timeout and a run-at come due: each is ready,
    since the time it became claimable."""
    start = clock.now()
    store.append("s", [NewEvent("c")])
    _claim(store, "s", ttl_ms=1_000)
    store.append(
        "t",
        [
            NewEvent("w", wake_on="go", available_at=start + timedelta(seconds=5)),
            NewEvent("l", available_at=start + timedelta(seconds=3)),
        ],
    )
    before = store.inspect.overview()
    assert (before.ready, before.claimed, before.waiting, before.scheduled) == (0, 1, 1, 1)
    assert before.oldest_ready_at is None
    clock.advance(ms=10_000)
    after = store.inspect.overview()
    assert (after.ready, after.claimed, after.waiting, after.scheduled) == (3, 0, 0, 0)
    assert after.oldest_ready_at == start + timedelta(seconds=1)


def test_overview_counts_stop_at_the_bound(store: Store) -> None:
    store.append("s", [NewEvent("n") for _ in range(5)])
    view = store.inspect.overview(bound=3)
    assert view.ready == 3 and view.capped(view.ready)
    assert view.dead_letters == 0 and not view.capped(view.dead_letters)
    with pytest.raises(A2Error) as raised:
        store.inspect.overview(bound=0)
    assert raised.value.code == "INVALID_ARGUMENT"


def test_overview_under_a_prefix(store: Store, clock: FakeClock) -> None:
    _mixed(store, clock)
    view = store.inspect.overview(prefix="p/")
    assert (view.ready, view.claimed, view.waiting, view.dead_letters) == (0, 0, 0, 1)
    assert store.inspect.overview(prefix="o/ready").ready == 2
    assert store.inspect.overview(prefix="zzz").ready == 0


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("dead_letters", ["o/dead", "p/dead"]),
        ("blocked", ["o/dead"]),
        ("claimed", ["o/claimed"]),
        ("waiting", ["o/waiting"]),
    ],
)
def test_list_sessions_by_state(
    store: Store, clock: FakeClock, state: str, expected: list[str]
) -> None:
    _mixed(store, clock)
    page = store.inspect.list_sessions(state=state)  # type: ignore[arg-type]
    assert [s.session_id for s in page.sessions] == expected
    assert page.cursor is None
    whole = {s.session_id: s for s in store.inspect.list_sessions(limit=100).sessions}
    assert page.sessions == [whole[sid] for sid in expected]


def test_list_sessions_by_state_pages_under_a_prefix(store: Store) -> None:
    for n in range(5):
        store.append(f"q/{n}", [NewEvent("w", wake_on="go")])
    store.append("r/0", [NewEvent("w", wake_on="go")])
    seen: list[str] = []
    cursor = None
    while True:
        page = store.inspect.list_sessions(prefix="q/", state="waiting", limit=2, cursor=cursor)
        seen += [s.session_id for s in page.sessions]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == [f"q/{n}" for n in range(5)]
    with pytest.raises(A2Error) as raised:
        store.inspect.list_sessions(state="sleeping")  # type: ignore[arg-type]
    assert raised.value.code == "INVALID_ARGUMENT"


def test_in_flight_lists_live_and_expired_claims(store: Store, clock: FakeClock) -> None:
    store.append("a", [NewEvent("x")])
    store.append("b", [NewEvent("y")])
    store.append("c", [NewEvent("z", available_at=clock.now() + timedelta(seconds=30))])
    _claim(store, "a", ttl_ms=5_000)
    _claim(store, "b", ttl_ms=20_000)
    clock.advance(ms=10_000)
    view = store.inspect.in_flight()
    assert [(e.session_id, e.claim_holder) for e in view.live] == [("b", "w")]
    assert [(e.session_id, e.claim_holder) for e in view.expired] == [("a", "w")]
    assert view.at == clock.now()
    assert store.inspect.in_flight(limit=1).live == view.live


def test_event_finds_an_event_by_its_id_in_any_session(store: Store) -> None:
    store.append("a", [NewEvent("x", {"n": 1}, id="ev-a")])
    store.append("b", [NewEvent("y", id="ev-b1"), NewEvent("z", {"n": 3}, id="ev-b2")])
    found = store.inspect.event("ev-b2")
    assert found is not None
    assert (found.session_id, found.index, found.type, found.payload) == ("b", 2, "z", {"n": 3})
    assert found == store.read("b")[1]
    assert store.inspect.event("ev-a") == store.read("a")[0]
    assert store.inspect.event("no-such-id") is None
    with pytest.raises(A2Error) as raised:
        store.inspect.event("")
    assert raised.value.code == "INVALID_ARGUMENT"
