"""Valid JSON round-trips exactly on every engine (SPEC §4, last sentence).

Same value, same types (a bool is not an int, 1.0 is not 1), same key order,
-0.0 stays -0.0: for event payloads, snapshot states and presence values.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from a2sql import JSON, EventCause, NewEvent, Store


def _nested(depth: int) -> JSON:
    value: JSON = "core"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


CASES: dict[str, JSON] = {
    "null": None,
    "true": True,
    "false": False,
    "bools-stay-bools": [True, False, 1, 0, {"t": True, "one": 1}],
    "zero-int": 0,
    "int-vs-float": [1, 1.0, -1, -1.0, 0, 0.0],
    "negative-zero": -0.0,
    "negative-zero-inside": {"z": [-0.0, 0.0, {"nz": -0.0}]},
    "big-ints": [2**200, -(2**200), 2**63, -(2**63) - 1, 2**64 + 1, 10**100],
    "floats": [0.1, 1e300, -1e300, 1e-300, 5e-324, 1.7976931348623157e308, 2.5, 1 / 3],
    "unicode": "héllo wörld ✓ 中文 😀 \U0001f3f3\ufe0f\u200d\U0001f308 \u2028\u2029",
    "nul-inside-strings": ["a\u0000b", "\u0000", {"\u0000key": "v\u0000"}],
    "escapes": 'quote " backslash \\ slash / newline \n tab \t cr \r ctrl \x01\x1f del \x7f',
    "key-order": {"z": 1, "a": 2, "m": {"b": 1, "a": 2, "c": 3}, "A": 4, "é": 5, "😀": 6},
    "empty-containers": {"list": [], "dict": {}, "string": "", "nested": [[], {}, [[]]]},
    "nested-objects": {"a": {"b": {"c": [1, {"d": [None, "x", 2.5, False]}]}}},
    "deep-256": _nested(256),
    "top-level-string": "just a string",
    "top-level-float": 123.456,
}


def assert_same_json(actual: object, expected: object, path: str = "$") -> None:
    """Equal value, equal types all the way down, equal key order, signed zeros kept."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert isinstance(actual, dict)
        assert list(actual) == list(expected), f"{path}: key order"
        for key, value in expected.items():
            assert_same_json(actual[key], value, f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list)
        assert len(actual) == len(expected), f"{path}: length"
        for position, (got, want) in enumerate(zip(actual, expected, strict=True)):
            assert_same_json(got, want, f"{path}[{position}]")
    elif isinstance(expected, float):
        assert isinstance(actual, float)
        assert actual == expected, path
        assert math.copysign(1.0, actual) == math.copysign(1.0, expected), f"{path}: sign"
    else:
        assert actual == expected, path
    if path == "$":
        assert json.dumps(actual) == json.dumps(expected)


def test_assert_same_json_catches_what_equality_misses() -> None:
    """The checker itself: ==  treats these as equal, the round-trip rule does not."""
    for got, want in [(1, True), (1.0, 1), (0.0, -0.0), ({"b": 1, "a": 2}, {"a": 2, "b": 1})]:
        assert got == want
        with pytest.raises(AssertionError):
            assert_same_json(got, want)


@pytest.mark.parametrize("payload", list(CASES.values()), ids=list(CASES))
def test_event_payload_round_trips_exactly(store: Store, payload: JSON) -> None:
    """Event payloads: append, read, read_state and inspect.read_events return them exactly."""
    appended = store.append("s", [NewEvent("t", payload, id="e1")])
    assert_same_json(appended.events[0].payload, payload)
    [stored] = store.read("s")
    assert_same_json(stored.payload, payload)
    [event] = store.read_state("s", "r").events
    assert_same_json(event.payload, payload)
    [paged] = store.inspect.read_events("s").events
    assert_same_json(paged.payload, payload)


@pytest.mark.a2sql_not_through_using("a stream is the store's")
def test_event_payloads_round_trip_exactly_through_a_stream(store: Store) -> None:
    """Event payloads: a stream returns them exactly (every case, one event each)."""
    store.append("s", [NewEvent("t", payload, id=f"e-{name}") for name, payload in CASES.items()])
    with store.stream("s") as stream:
        for name, payload in CASES.items():
            event = next(stream)
            assert event.id == f"e-{name}"
            assert_same_json(event.payload, payload)


def test_returned_event_payloads_round_trip_exactly(store: Store) -> None:
    """Payloads of events returned by complete_attempt and appended with a cause round-trip."""
    store.append("s", [NewEvent("t", None, id="parent")])
    store.claim_available("s", holder="w", ttl_ms=1000)
    returned = [NewEvent("r", payload, id=f"r-{name}") for name, payload in CASES.items()]
    result = store.complete_attempt("s", index=1, attempt=1, events=returned)
    assert result.outcome == "completed"
    caused = store.append("s", [NewEvent("c", CASES["key-order"], cause=EventCause(1, 1))])
    assert_same_json(caused.events[0].payload, CASES["key-order"])
    stored = store.read("s", after_index=1)
    expected = [*CASES.values(), CASES["key-order"]]
    assert len(stored) == len(expected)
    for got, want in zip(stored, expected, strict=True):
        assert_same_json(got.payload, want)


def test_snapshot_state_round_trips_exactly(store: Store) -> None:
    """Snapshot states round-trip exactly, each case as its own reducer's state."""
    store.append("s", [NewEvent("t")])
    for name in CASES:
        store.put_snapshot("s", name, 1, CASES[name])
    for name, state in CASES.items():
        snapshot = store.read_state("s", name).snapshot
        assert snapshot is not None
        assert_same_json(snapshot.state, state)


def test_presence_values_round_trip_exactly(store: Store) -> None:
    """Presence values round-trip exactly (None is a delete there, so it is nested instead)."""
    values: dict[str, JSON] = {
        name: [value] if value is None else value for name, value in CASES.items()
    }
    at = datetime(2026, 1, 1, tzinfo=UTC)
    store.presence.set("ns", "p", values, at=at, seen=0, ttl_ms=60_000)
    read = {entry.field: entry.value for entry in store.presence.read("ns")}
    assert sorted(read) == sorted(values)
    for name, value in values.items():
        assert_same_json(read[name], value)
