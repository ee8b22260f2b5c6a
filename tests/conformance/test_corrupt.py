"""A stored row that does not decode is ``CORRUPT_RECORD`` on every read path (SPEC §4).

Rows are corrupted directly in the database, around a2sql: a payload that is
not JSON (SQLite; PostgreSQL's ``json`` type refuses such text itself), a
cause or a list of returned ids that is not what a2sql writes (both
engines), a snapshot state or presence value that is not JSON (SQLite).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, create_engine, text

from a2sql import A2Error, ErrorCode, NewEvent, Store

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


@pytest.fixture
def raw(db_url: str, engine_kind: str) -> Iterator[Engine]:
    """The store's database, reached around a2sql."""
    if engine_kind == "sqlite_memory":
        pytest.skip("a SQLite memory database is reachable only through its store")
    engine = create_engine(db_url)
    yield engine
    engine.dispose()


def corrupt(raw: Engine, sql: str) -> None:
    with raw.begin() as connection:
        connection.execute(text(sql))


def assert_corrupt(read: Callable[[Store], object], store: Store) -> None:
    with pytest.raises(A2Error) as raised:
        result = read(store)
        if hasattr(result, "close"):
            result.close()
    assert raised.value.code == ErrorCode.CORRUPT_RECORD, raised.value


@pytest.mark.parametrize("read", EVENT_READS.values(), ids=EVENT_READS.keys())
def test_a_payload_that_is_not_json(
    store: Store, raw: Engine, engine_kind: str, read: Callable[[Store], object]
) -> None:
    if engine_kind == "postgres":
        pytest.skip("PostgreSQL's json column refuses text that is not JSON")
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    corrupt(raw, "update a2_events set payload = '{\"n\": ' where idx = 1")
    assert_corrupt(read, store)


# read_state gives Events, which carry no cause.
WITH_CAUSE = {name: read for name, read in EVENT_READS.items() if name != "read_state"}


@pytest.mark.parametrize("read", WITH_CAUSE.values(), ids=WITH_CAUSE.keys())
def test_a_cause_that_is_not_a_cause(
    store: Store, raw: Engine, read: Callable[[Store], object]
) -> None:
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    corrupt(raw, 'update a2_events set cause = \'{"index": "one"}\' where idx = 1')
    assert_corrupt(read, store)


@pytest.mark.parametrize(
    "read",
    [EVENT_READS["read"], EVENT_READS["read_events"], EVENT_READS["stream"]],
    ids=["read", "read_events", "stream"],
)
def test_returned_ids_that_are_not_a_list_of_ids(
    store: Store, raw: Engine, read: Callable[[Store], object]
) -> None:
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1000).events
    store.complete_attempt(
        "s", index=1, attempt=claimed.attempt_count, events=[NewEvent("r", 0, id="r1")]
    )
    corrupt(raw, "update a2_events set returned_event_ids = '[1, 2' where idx = 1")
    assert_corrupt(read, store)


def test_a_completion_replay_of_a_corrupt_event(store: Store, raw: Engine) -> None:
    store.append("s", [NewEvent("t", {"n": 1}, id="e1")])
    [claimed] = store.claim_available("s", holder="w", ttl_ms=1000).events
    returned = [NewEvent("r", 0, id="r1")]
    store.complete_attempt("s", index=1, attempt=claimed.attempt_count, events=returned)
    corrupt(raw, "update a2_events set returned_event_ids = 'not json' where idx = 1")
    with pytest.raises(A2Error) as raised:
        store.complete_attempt("s", index=1, attempt=claimed.attempt_count, events=returned)
    assert raised.value.code == ErrorCode.CORRUPT_RECORD


def test_a_snapshot_state_that_is_not_json(store: Store, raw: Engine, engine_kind: str) -> None:
    if engine_kind == "postgres":
        pytest.skip("PostgreSQL's json column refuses text that is not JSON")
    store.append("s", [NewEvent("t", 1, id="e1")])
    store.put_snapshot("s", "r", 1, {"total": 1})
    corrupt(raw, "update a2_snapshots set state = '{total' where session_id = 's'")
    assert_corrupt(lambda s: s.read_state("s", "r"), store)


def test_a_presence_value_that_is_not_json(store: Store, raw: Engine, engine_kind: str) -> None:
    if engine_kind == "postgres":
        pytest.skip("PostgreSQL's json column refuses text that is not JSON")
    store.presence.set("ns", "p", {"f": 1}, at=AT, seen=1, ttl_ms=3_600_000)
    corrupt(raw, "update a2_presence set value = 'nope' where ns = 'ns'")
    assert_corrupt(lambda s: s.presence.read("ns"), store)
