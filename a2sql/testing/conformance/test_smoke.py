"""The store opens on every engine and round-trips one event."""

from a2sql import NewEvent, Store


def test_append_then_read_round_trips_one_event(store: Store) -> None:
    result = store.append("s", [NewEvent("greeting", {"text": "hello"}, id="e1")])
    assert [e.index for e in result.events] == [1]
    [stored] = store.read("s")
    assert (stored.id, stored.type, stored.payload, stored.index) == (
        "e1",
        "greeting",
        {"text": "hello"},
        1,
    )
