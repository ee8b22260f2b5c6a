"""presence.set and presence.read (SPEC §3 presence.set / presence.read)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from a2sql import PresenceEntry, Store
from a2sql.testing import FakeClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(ms: int) -> datetime:
    """A writer's timestamp, ``ms`` after T0."""
    return T0 + timedelta(milliseconds=ms)


def _values(store: Store, ns: str = "ns") -> dict[tuple[str, str], object]:
    return {(entry.participant, entry.field): entry.value for entry in store.presence.read(ns)}


def test_set_then_read_returns_each_field_with_seen_at_and_expiry(
    store: Store, clock: FakeClock
) -> None:
    """presence.set/read: one entry per field, with value, seen, at and expires_at."""
    store.presence.set(
        "ns", "alice", {"name": "Alice", "cursor": [3, 4]}, at=_at(0), seen=7, ttl_ms=30_000
    )
    expires = clock.now() + timedelta(milliseconds=30_000)
    assert store.presence.read("ns") == [
        PresenceEntry("alice", "cursor", [3, 4], 7, _at(0), expires),
        PresenceEntry("alice", "name", "Alice", 7, _at(0), expires),
    ]


def test_set_with_empty_values_writes_nothing(store: Store, clock: FakeClock) -> None:
    """presence.set: empty `values` writes nothing (it does not even refresh the expiry)."""
    store.presence.set("ns", "bob", {}, at=_at(0), seen=1, ttl_ms=1000)
    assert store.presence.read("ns") == []
    store.presence.set("ns", "bob", {"f": 1}, at=_at(0), seen=1, ttl_ms=1000)
    clock.advance(ms=500)
    store.presence.set("ns", "bob", {}, at=_at(500), seen=2, ttl_ms=60_000)
    [entry] = store.presence.read("ns")
    assert (entry.seen, entry.at) == (1, _at(0))
    clock.advance(ms=500)
    assert store.presence.read("ns") == []


@pytest.mark.parametrize(
    "writer_offset",
    [timedelta(hours=-1), timedelta(0), timedelta(days=1)],
    ids=["writer-behind", "writer-equal", "writer-ahead"],
)
def test_expires_at_is_store_clock_now_plus_ttl_not_the_writers_at(
    store: Store, clock: FakeClock, writer_offset: timedelta
) -> None:
    """presence.set: expires_at = store clock now (ms) + ttl_ms; the writer's `at` only orders."""
    clock.set(datetime(2026, 5, 6, 7, 8, 9, 123_789, tzinfo=UTC))
    now_ms = datetime(2026, 5, 6, 7, 8, 9, 123_000, tzinfo=UTC)
    at = now_ms + writer_offset
    store.presence.set("ns", "p", {"f": True}, at=at, seen=0, ttl_ms=2500)
    [entry] = store.presence.read("ns")
    assert entry.expires_at == now_ms + timedelta(milliseconds=2500)
    assert entry.at == at


def test_field_expires_on_the_store_clock_exactly_at_expires_at(
    store: Store, clock: FakeClock
) -> None:
    """presence.read: live means expires_at > now; a field exactly at expires_at is gone."""
    store.presence.set("ns", "p", {"f": 1}, at=_at(0), seen=0, ttl_ms=1000)
    clock.advance(ms=999)
    assert _values(store) == {("p", "f"): 1}
    clock.advance(ms=1)
    assert store.presence.read("ns") == []


def test_expiry_is_per_field_from_its_own_write(store: Store, clock: FakeClock) -> None:
    """presence: each field carries the expiry of the write that stored it."""
    store.presence.set("ns", "p", {"old": 1, "new": 1}, at=_at(0), seen=0, ttl_ms=1000)
    clock.advance(ms=600)
    store.presence.set("ns", "p", {"new": 2}, at=_at(600), seen=1, ttl_ms=1000)
    clock.advance(ms=400)
    assert _values(store) == {("p", "new"): 2}
    clock.advance(ms=600)
    assert _values(store) == {}


@pytest.mark.parametrize(
    ("second_at", "winner"),
    [(5, "second"), (0, "second"), (-5, "first")],
    ids=["newer-wins", "tie-goes-to-incoming", "older-loses"],
)
def test_last_writer_wins_per_field_by_at(
    store: Store, clock: FakeClock, second_at: int, winner: str
) -> None:
    """presence.set: a value upserts unless the stored `at` is strictly newer; ties go incoming."""
    store.presence.set("ns", "p", {"f": "first"}, at=_at(0), seen=1, ttl_ms=1000)
    first = store.presence.read("ns")
    clock.advance(ms=100)
    store.presence.set("ns", "p", {"f": "second"}, at=_at(second_at), seen=2, ttl_ms=1000)
    [entry] = store.presence.read("ns")
    if winner == "first":
        assert [entry] == first  # untouched: value, seen, at and expiry
    else:
        assert entry == PresenceEntry(
            "p", "f", "second", 2, _at(second_at), clock.now() + timedelta(milliseconds=1000)
        )


def test_last_writer_wins_field_by_field_within_one_write(store: Store) -> None:
    """presence.set: the `at` comparison is per field, so one write can win some and lose others."""
    store.presence.set("ns", "p", {"a": "a-new"}, at=_at(10), seen=1, ttl_ms=1000)
    store.presence.set("ns", "p", {"b": "b-old"}, at=_at(0), seen=1, ttl_ms=1000)
    store.presence.set("ns", "p", {"a": "a-mid", "b": "b-mid"}, at=_at(5), seen=2, ttl_ms=1000)
    assert _values(store) == {("p", "a"): "a-new", ("p", "b"): "b-mid"}


@pytest.mark.parametrize(
    ("delete_at", "deleted"),
    [(5, True), (0, True), (-5, False)],
    ids=["newer-deletes", "tie-deletes", "older-keeps"],
)
def test_none_deletes_the_field_unless_stored_at_is_newer(
    store: Store, delete_at: int, deleted: bool
) -> None:
    """presence.set: `None` deletes the field unless the stored row's `at` is newer."""
    store.presence.set("ns", "p", {"f": 1, "g": 2}, at=_at(0), seen=0, ttl_ms=1000)
    store.presence.set("ns", "p", {"f": None}, at=_at(delete_at), seen=1, ttl_ms=1000)
    expected = {("p", "g"): 2} if deleted else {("p", "f"): 1, ("p", "g"): 2}
    assert _values(store) == expected


def test_none_for_an_absent_field_writes_nothing(store: Store) -> None:
    """presence.set: deleting a field that is not stored leaves nothing behind."""
    store.presence.set("ns", "p", {"ghost": None}, at=_at(0), seen=0, ttl_ms=1000)
    assert store.presence.read("ns") == []
    store.presence.set("ns", "p", {"ghost": None, "real": 0}, at=_at(0), seen=0, ttl_ms=1000)
    assert _values(store) == {("p", "real"): 0}


def test_read_orders_by_participant_then_field_by_code_point(store: Store) -> None:
    """presence.read: ordered by participant, then field, by code point on every engine."""
    names = ["b", "B", "é", "_", "a", "Z", "A", "ä", "😀", "a b"]
    assert sorted(names) != sorted(names, key=lambda name: (name.casefold(), name))
    for participant in reversed(names):
        store.presence.set(
            "ns", participant, {field: 0 for field in names}, at=_at(0), seen=0, ttl_ms=1000
        )
    keys = [(entry.participant, entry.field) for entry in store.presence.read("ns")]
    assert keys == [(p, f) for p in sorted(names) for f in sorted(names)]


def test_namespaces_are_isolated(store: Store) -> None:
    """presence: a namespace sees only its own rows; writes in one never touch another."""
    store.presence.set("one", "p", {"f": "in one"}, at=_at(0), seen=0, ttl_ms=1000)
    store.presence.set("two", "p", {"f": "in two"}, at=_at(10), seen=0, ttl_ms=1000)
    store.presence.set("one", "p", {"f": None}, at=_at(5), seen=0, ttl_ms=1000)
    assert _values(store, "one") == {}
    assert _values(store, "two") == {("p", "f"): "in two"}
    assert store.presence.read("three") == []


@pytest.mark.parametrize("read_between", [True, False], ids=["read-between", "no-read"])
def test_an_expired_field_never_blocks_a_later_older_write(
    store: Store, clock: FakeClock, read_between: bool
) -> None:
    """presence: an expired field is gone, swept or not: a later write with an older `at`
    is not blocked by it, whether or not a read came in between."""
    store.presence.set("ns", "p", {"f": "newer but expired"}, at=_at(1000), seen=1, ttl_ms=100)
    clock.advance(ms=100)
    if read_between:
        assert store.presence.read("ns") == []
    store.presence.set("ns", "p", {"f": "older, after expiry"}, at=_at(0), seen=2, ttl_ms=100)
    [entry] = store.presence.read("ns")
    assert (entry.value, entry.seen, entry.at) == ("older, after expiry", 2, _at(0))


def test_a_deletion_and_upserts_in_one_write_each_apply(store: Store) -> None:
    """presence.set: one write may delete some fields and upsert others, in any order."""
    store.presence.set("ns", "p", {"a": 1, "b": 1, "c": 1}, at=_at(0), seen=0, ttl_ms=1000)
    store.presence.set("ns", "p", {"c": 2, "b": None, "a": 2}, at=_at(1), seen=1, ttl_ms=1000)
    assert _values(store) == {("p", "a"): 2, ("p", "c"): 2}


def test_at_defaults_to_the_store_clock_at_the_write(store: Store, clock: FakeClock) -> None:
    """presence.set without `at`: the write is stamped with the store's clock (to the ms)."""
    clock.set(datetime(2026, 5, 6, 7, 8, 9, 123_789, tzinfo=UTC))
    now_ms = datetime(2026, 5, 6, 7, 8, 9, 123_000, tzinfo=UTC)
    store.presence.set("ns", "p", {"f": 1}, seen=3, ttl_ms=1000)
    assert store.presence.read("ns") == [
        PresenceEntry("p", "f", 1, 3, now_ms, now_ms + timedelta(milliseconds=1000))
    ]


def test_seen_defaults_to_at_in_ms_since_the_epoch(store: Store, clock: FakeClock) -> None:
    """presence.set without `seen`: it is the write's `at` in ms since 1970-01-01 UTC,
    whether `at` is given or the store's clock."""
    clock.set(datetime(2026, 5, 6, 7, 8, 9, 123_789, tzinfo=UTC))
    store.presence.set("ns", "p", {"f": 1}, ttl_ms=1000)
    store.presence.set(
        "ns", "q", {"f": 1}, at=datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC), ttl_ms=1000
    )
    store.presence.set("ns", "r", {"f": 1}, at=_at(5), ttl_ms=1000)
    seen = {entry.participant: entry.seen for entry in store.presence.read("ns")}
    assert seen == {
        "p": int(datetime(2026, 5, 6, 7, 8, 9, 123_000, tzinfo=UTC).timestamp() * 1000),
        "q": -1000,
        "r": int(T0.timestamp()) * 1000 + 5,
    }


def test_defaulted_writes_are_last_writer_wins_by_the_store_clock(
    store: Store, clock: FakeClock
) -> None:
    """presence.set with neither `at` nor `seen`: a later write wins, and its `seen`
    is greater; an explicit older `at` loses to it, a newer one wins."""
    store.presence.set("ns", "p", {"f": "first"}, ttl_ms=60_000)
    clock.advance(ms=10)
    store.presence.set("ns", "p", {"f": "second"}, ttl_ms=60_000)
    [second] = store.presence.read("ns")
    assert (second.value, second.at) == ("second", clock.now())
    store.presence.set(
        "ns", "p", {"f": "stale"}, at=clock.now() - timedelta(milliseconds=1), ttl_ms=60_000
    )
    assert [entry.value for entry in store.presence.read("ns")] == ["second"]
    clock.advance(ms=10)
    store.presence.set("ns", "p", {"f": "third"}, ttl_ms=60_000)
    [third] = store.presence.read("ns")
    assert third.value == "third" and third.seen > second.seen
    store.presence.set("ns", "p", {"f": None}, seen=0, ttl_ms=60_000)
    assert store.presence.read("ns") == []
