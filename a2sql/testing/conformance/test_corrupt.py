"""A stored row that does not decode is ``CORRUPT_RECORD`` on every read path (SPEC §4).

Rows are corrupted directly in the database, around a2sql (on the store's own
engine): a payload that is not JSON (where the engine does not validate JSON
itself: SQLite; PostgreSQL's ``json`` type refuses such text), a cause or a
list of returned ids that is not what a2sql writes (every engine), a snapshot
state or presence value that is not JSON (where the engine does not validate).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from a2sql import A2Error, ErrorCode, NewEvent, Store
from a2sql.backends import backend_of
from a2sql.testing.facades import execute_sql

AT = datetime(2026, 1, 1, tzinfo=UTC)

# A read of each kind that decodes event 1 of session "s".
EVENT_READS: dict[str, Callable[[Store], object]] = {
    "read": lambda store: store.read("s"),
    "read_state": lambda store: store.read_state("s", "r"),
    "read_events": lambda store: store.inspect.read_events("s"),
    "claim_available": lambda store: store.claim_available("s", holder="w", ttl_ms=1000),
    "append_replay": lambda store: store.append("s", [NewEvent("t", {"n": 1}, id="e1")]),
    "stream": lambda store: next(iter(store.stream("s"))),
}
# using() has no stream: a stream is the store's, not an operation of a transaction.
STREAM_IS_THE_STORES = pytest.mark.a2sql_not_through_using("a stream is the store's")


def reads(chosen: dict[str, Callable[[Store], object]]) -> list[object]:
    """``chosen`` as parameters, the stream's marked as not through ``using``."""
    return [
        pytest.param(read, id=name, marks=[STREAM_IS_THE_STORES] if name == "stream" else [])
        for name, read in chosen.items()
    ]


def corrupt(store: Store, sql: str) -> None:
    """Change rows of the store's database around a2sql."""
    execute_sql(store, text(sql))


def validates_json(store: Store) -> bool:
    return backend_of(store.engine).capabilities.json_validation


def assert_corrupt(read: Callable[[Store], object], store: Store) -> None:
    with pytest.raises(A2Error) as raised:
        result = read(store)
        if hasattr(result, "close"):
            result.close()
    assert raised.value.code == ErrorCode.CORRUPT_RECORD, raised.value


@pytest.mark.parametrize("read", reads(EVENT_READS))
def test_a_payload_that_is_not_json(store: Store, read: Callable[[Store], object]) -> None:
    if validates_json(store):
        pytest.skip("the engine's json column refuses text that is not JSON")
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    corrupt(store, "update a2_events set payload = '{\"n\": ' where idx = 1")
    assert_corrupt(read, store)


# read_state gives Events, which carry no cause.
WITH_CAUSE = {name: read for name, read in EVENT_READS.items() if name != "read_state"}


@pytest.mark.parametrize("read", reads(WITH_CAUSE))
def test_a_cause_that_is_not_a_cause(store: Store, read: Callable[[Store], object]) -> None:
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    corrupt(store, 'update a2_events set cause = \'{"index": "one"}\' where idx = 1')
    assert_corrupt(read, store)


@pytest.mark.parametrize(
    "read", reads({name: EVENT_READS[name] for name in ("read", "read_events", "stream")})
)
def test_returned_ids_that_are_not_a_list_of_ids(
    store: Store, read: Callable[[Store], object]
) -> None:
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1000).events
    store.complete_attempt(
        "s", index=1, attempt=claimed.attempt_count, events=[NewEvent("r", 0, id="r1")]
    )
    corrupt(store, "update a2_events set returned_event_ids = '[1, 2' where idx = 1")
    assert_corrupt(read, store)


def test_a_completion_replay_of_a_corrupt_event(store: Store) -> None:
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1000).events
    returned = [NewEvent("r", 0, id="r1")]
    store.complete_attempt("s", index=1, attempt=claimed.attempt_count, events=returned)
    corrupt(store, "update a2_events set returned_event_ids = 'not json' where idx = 1")
    with pytest.raises(A2Error) as raised:
        store.complete_attempt("s", index=1, attempt=claimed.attempt_count, events=returned)
    assert raised.value.code == ErrorCode.CORRUPT_RECORD


def test_a_snapshot_state_that_is_not_json(store: Store) -> None:
    if validates_json(store):
        pytest.skip("the engine's json column refuses text that is not JSON")
    store.append("s", [NewEvent("t", 1, id="e1")])
    store.put_snapshot("s", "r", 1, {"total": 1})
    corrupt(store, "update a2_snapshots set state = '{total' where session_id = 's'")
    assert_corrupt(lambda s: s.read_state("s", "r"), store)


def test_a_presence_value_that_is_not_json(store: Store) -> None:
    if validates_json(store):
        pytest.skip("the engine's json column refuses text that is not JSON")
    store.presence.set("ns", "p", {"f": 1}, at=AT, seen=1, ttl_ms=3_600_000)
    corrupt(store, "update a2_presence set value = 'nope' where ns = 'ns'")
    assert_corrupt(lambda s: s.presence.read("ns"), store)
