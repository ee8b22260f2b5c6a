"""read_state, put_snapshot and inspect.list_snapshots (SPEC §3 read_state / put_snapshot)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from a2sql import A2Error, ErrorCode, Event, NewEvent, Snapshot, SnapshotInfo, Store
from a2sql.testing import FakeClock


def _append(store: Store, session_id: str, count: int) -> None:
    store.append(session_id, [NewEvent("n", {"n": n}) for n in range(1, count + 1)])


def _ms(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def test_read_state_without_snapshot_returns_every_event_as_event(
    store: Store, clock: FakeClock
) -> None:
    """read_state: no snapshot -> snapshot None and all events, by index, as `Event`s."""
    store.append("s", [NewEvent("a", {"n": 1}, id="s-1"), NewEvent("b", [2], id="s-2")])
    store.append("other", [NewEvent("x", None)])
    read = store.read_state("s", "counter")
    assert read.snapshot is None
    assert all(type(event) is Event for event in read.events)
    assert read.events == [
        Event(
            id="s-1", type="a", payload={"n": 1}, index=1, session_id="s", created_at=clock.now()
        ),
        Event(id="s-2", type="b", payload=[2], index=2, session_id="s", created_at=clock.now()),
    ]


def test_read_state_of_unknown_session_is_empty(store: Store) -> None:
    """read_state: a session without events has no snapshot and no events."""
    read = store.read_state("nobody", "counter")
    assert read.snapshot is None
    assert read.events == []


def test_read_state_with_snapshot_returns_only_events_after_its_index(store: Store) -> None:
    """read_state: the snapshot, then every event with index greater than the snapshot's."""
    _append(store, "s", 5)
    store.put_snapshot("s", "counter", 3, {"sum": 6})
    read = store.read_state("s", "counter")
    assert read.snapshot == Snapshot(index=3, state={"sum": 6})
    assert [event.index for event in read.events] == [4, 5]
    assert [event.payload for event in read.events] == [{"n": 4}, {"n": 5}]
    assert all(type(event) is Event for event in read.events)


def test_read_state_with_snapshot_at_last_index_returns_no_events(store: Store) -> None:
    """read_state: a snapshot at the frontier leaves no events to fold, until more are appended."""
    _append(store, "s", 2)
    store.put_snapshot("s", "counter", 2, 3)
    assert store.read_state("s", "counter").events == []
    _append(store, "s", 1)
    assert [event.index for event in store.read_state("s", "counter").events] == [3]


def test_put_snapshot_replaces_with_greater_index(store: Store, clock: FakeClock) -> None:
    """put_snapshot: a snapshot with a greater index replaces the stored one, with its time."""
    _append(store, "s", 4)
    store.put_snapshot("s", "r", 2, "old")
    later = clock.advance(ms=5)
    store.put_snapshot("s", "r", 4, "new")
    assert store.read_state("s", "r").snapshot == Snapshot(index=4, state="new")
    assert store.inspect.list_snapshots("s") == [
        SnapshotInfo(reducer_name="r", index=4, updated_at=later)
    ]


@pytest.mark.parametrize("offset", [0, -1, -2], ids=["equal", "lower", "much-lower"])
def test_put_snapshot_with_equal_or_lower_index_is_ignored(
    store: Store, clock: FakeClock, offset: int
) -> None:
    """put_snapshot guard: an equal or lower index keeps the stored state and its updated_at."""
    _append(store, "s", 5)
    written = clock.now()
    store.put_snapshot("s", "r", 3, {"v": "stored"})
    clock.advance(seconds=1)
    store.put_snapshot("s", "r", 3 + offset, {"v": "slow writer"})
    assert store.read_state("s", "r").snapshot == Snapshot(index=3, state={"v": "stored"})
    assert store.inspect.list_snapshots("s") == [
        SnapshotInfo(reducer_name="r", index=3, updated_at=written)
    ]


@pytest.mark.parametrize("index", [1, 3], ids=["first", "last"])
def test_put_snapshot_accepts_index_between_1_and_last_index(store: Store, index: int) -> None:
    """put_snapshot: `index` may be anything from 1 to the session's last index."""
    _append(store, "s", 3)
    store.put_snapshot("s", "r", index, [index])
    assert store.read_state("s", "r").snapshot == Snapshot(index=index, state=[index])


@pytest.mark.parametrize(
    ("events", "index"),
    [(3, 0), (3, -1), (3, 4), (3, 100), (0, 1)],
    ids=["zero", "negative", "past-end", "far-past-end", "empty-session"],
)
def test_put_snapshot_index_outside_1_to_last_index_is_invalid_and_stores_nothing(
    store: Store, events: int, index: int
) -> None:
    """put_snapshot: `index` outside 1..last index -> INVALID_ARGUMENT naming it, nothing stored."""
    _append(store, "s", events)
    with pytest.raises(A2Error) as raised:
        store.put_snapshot("s", "r", index, {"any": "state"})
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert "index" in raised.value.message
    assert store.inspect.list_snapshots("s") == []
    assert store.read_state("s", "r").snapshot is None


def test_put_snapshot_past_end_leaves_a_stored_snapshot_unchanged(
    store: Store, clock: FakeClock
) -> None:
    """put_snapshot: a rejected index leaves the stored snapshot and its updated_at as they were."""
    _append(store, "s", 2)
    store.put_snapshot("s", "r", 1, "kept")
    written = clock.now()
    clock.advance(ms=10)
    with pytest.raises(A2Error) as raised:
        store.put_snapshot("s", "r", 3, "too far")
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert store.read_state("s", "r").snapshot == Snapshot(index=1, state="kept")
    assert store.inspect.list_snapshots("s") == [SnapshotInfo("r", 1, written)]


def test_snapshots_are_kept_per_reducer_and_per_session(store: Store) -> None:
    """Snapshots: one per (session, reducer); each reducer folds from its own index."""
    _append(store, "s", 5)
    _append(store, "t", 5)
    store.put_snapshot("s", "count", 2, 2)
    store.put_snapshot("s", "sum", 4, 10)
    store.put_snapshot("t", "count", 5, 5)
    count = store.read_state("s", "count")
    total = store.read_state("s", "sum")
    assert count.snapshot == Snapshot(2, 2)
    assert [event.index for event in count.events] == [3, 4, 5]
    assert total.snapshot == Snapshot(4, 10)
    assert [event.index for event in total.events] == [5]
    assert store.read_state("s", "other").snapshot is None
    assert store.read_state("t", "count").snapshot == Snapshot(5, 5)
    assert store.read_state("t", "sum").snapshot is None
    assert [info.reducer_name for info in store.inspect.list_snapshots("t")] == ["count"]


def test_list_snapshots_orders_reducer_names_by_code_point_with_updated_at_in_ms(
    store: Store, clock: FakeClock
) -> None:
    """list_snapshots: ordered by reducer name in code point order; updated_at = clock, ms."""
    names = ["é", "a", "_", "Z", "B", "ab", "A", "b", "😀"]
    expected_order = sorted(names)
    # A locale collation (case- and accent-insensitive) would order these differently.
    assert expected_order != sorted(names, key=lambda name: (name.casefold(), name))
    _append(store, "s", len(names))
    clock.set(datetime(2026, 3, 4, 5, 6, 7, 891_234, tzinfo=UTC))
    written: dict[str, datetime] = {}
    for position, name in enumerate(names, start=1):
        written[name] = _ms(clock.now())
        store.put_snapshot("s", name, position, {"name": name})
        clock.advance(ms=1, seconds=0.0005)
    infos = store.inspect.list_snapshots("s")
    assert [info.reducer_name for info in infos] == expected_order
    for info in infos:
        assert info.index == names.index(info.reducer_name) + 1
        assert info.updated_at == written[info.reducer_name]
        assert info.updated_at.utcoffset() == timedelta(0)
        assert info.updated_at.microsecond % 1000 == 0


def test_list_snapshots_of_session_without_snapshots_is_empty(store: Store) -> None:
    """list_snapshots: a session with events but no snapshots lists nothing."""
    _append(store, "s", 2)
    store.put_snapshot("s", "r", 1, None)
    assert store.inspect.list_snapshots("t") == []
    assert store.read_state("s", "r").snapshot == Snapshot(1, None)
