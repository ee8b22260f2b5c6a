"""a2sql.reduce: fold read_state with a reducer, snapshot every N events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, Event, NewEvent, Store


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


def total(state: Any, event: Event) -> Any:
    return {"sum": state["sum"] + event.payload, "seen": state["seen"] + 1}


def settled(values: list[int]) -> list[NewEvent]:
    return [NewEvent("n", value, settled=True) for value in values]


def test_reduce_folds_every_event_from_the_initial_state(store: Store) -> None:
    """Without a snapshot, every event is folded from ``initial``; none is written yet."""
    store.append("s", settled([1, 2, 3]))
    assert a2sql.reduce(store, "s", "total", total, {"sum": 0, "seen": 0}) == {"sum": 6, "seen": 3}
    assert store.inspect.list_snapshots("s") == []


def test_reduce_writes_a_snapshot_every_n_events_and_starts_from_it(store: Store) -> None:
    """At ``snapshot_every`` folded events the state is stored; the next fold starts there."""
    store.append("s", settled([1, 2, 3, 4]))
    state = a2sql.reduce(store, "s", "total", total, {"sum": 0, "seen": 0}, snapshot_every=3)
    assert state == {"sum": 10, "seen": 4}
    [info] = store.inspect.list_snapshots("s")
    assert (info.reducer_name, info.index) == ("total", 4)
    store.append("s", settled([5]))
    folded: list[int] = []

    def watching(state: Any, event: Event) -> Any:
        folded.append(event.index)
        return total(state, event)

    state = a2sql.reduce(store, "s", "total", watching, {"sum": 0, "seen": 0}, snapshot_every=3)
    assert state == {"sum": 15, "seen": 5}
    assert folded == [5]  # only what came after the snapshot
    assert store.inspect.list_snapshots("s")[0].index == 4  # one event: not due yet


def test_reduce_names_keep_separate_snapshots(store: Store) -> None:
    """Each reducer name has its own snapshot."""
    store.append("s", settled([2, 3]))
    a2sql.reduce(store, "s", "a", total, {"sum": 0, "seen": 0}, snapshot_every=1)
    assert a2sql.reduce(store, "s", "b", total, {"sum": 100, "seen": 0}) == {"sum": 105, "seen": 2}
    assert [i.reducer_name for i in store.inspect.list_snapshots("s")] == ["a"]


def test_reduce_refuses_a_bad_snapshot_interval(store: Store) -> None:
    """``snapshot_every`` is an int of at least 1."""
    with pytest.raises(A2Error) as raised:
        a2sql.reduce(store, "s", "r", total, {}, snapshot_every=0)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert "snapshot_every" in str(raised.value)


def test_reduce_inside_the_callers_transaction(store: Store) -> None:
    """``reduce`` takes ``store.using(connection)`` too: the snapshot commits with it."""
    store.append("s", settled([7]))
    with store.begin() as connection:
        view = store.using(connection)
        assert a2sql.reduce(view, "s", "t", total, {"sum": 0, "seen": 0}, snapshot_every=1) == {
            "sum": 7,
            "seen": 1,
        }
        connection.rollback()
    assert store.inspect.list_snapshots("s") == []
