"""Revision 0002_dispatch_age: an index added under existing data, and taken off again.

A database at 0001_baseline already holds events of every kind (pending, claimed,
claim expired, processed, dead-lettered, waiting in a lane) when a2sql with 0002
arrives. The store refuses a schema behind head, so the rows are written with
SQLAlchemy Core against ``a2sql.sql.schema`` (or, for the seed's file, with sqlite3 in
the seed's column conventions). Every test runs on a SQLite file and on PostgreSQL
(the ``url`` fixture: a fresh file, or a schema of its own dropped afterwards),
except the seed file's, which is SQLite only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, insert, inspect, select

import a2sql
from a2sql import A2Error, ErrorCode
from a2sql import migrate as migrations
from a2sql.sql.schema import events, presence, snapshots
from a2sql.testing import FakeClock
from tests.test_schema_sqlite import seed_database

BASELINE = "0001_baseline"
# 0002 is tested on the way from 0001 to the newest revision, where the store opens.
HEAD = migrations.head_revision()
DISPATCH_AGE = "a2_events_dispatch_age"
DISPATCH_AGE_REVISION = "0002_dispatch_age"
# claim_next's indexes at head: revision 0004 split 0002's in two.
DISPATCH_AT_HEAD = {
    "a2_events_dispatch_free": ["created_at", "session_id"],
    "a2_events_dispatch_due": ["claim_expires_at", "created_at", "session_id"],
}


def has_dispatch_indexes_of_head(engine: Engine) -> bool:
    found = event_indexes(engine)
    return all(found.get(name) == columns for name, columns in DISPATCH_AT_HEAD.items())


T0 = datetime(2026, 1, 1, tzinfo=UTC)
# claim_next's now: after every row's creation, between the expired claim and the live one.
NOW = T0 + timedelta(hours=1)
LIVE_CLAIM_ENDS = T0 + timedelta(hours=2)
# Claims taken at NOW outlast the live one, so an idle claim_next's retry_at is its end.
TTL_MS = 3 * 3600 * 1000


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


# The columns a2_events had before revision 0004 added wake_on: the seed's own.
SEED_COLUMNS = [column for column in events.columns if column.name != "wake_on"]

_EVENT_DEFAULTS: dict[str, Any] = {column.name: None for column in SEED_COLUMNS} | {
    "lane_ready": False,
    "attempt_count": 0,
    "failure_count": 0,
}


def _event(session_id: str, idx: int, created: datetime, **columns: Any) -> dict[str, Any]:
    return _EVENT_DEFAULTS | {
        "session_id": session_id,
        "idx": idx,
        "event_type": "t",
        "payload": f'{{"session":"{session_id}","idx":{idx}}}',
        "event_id": f"{session_id}#{idx}",
        "created_at": created,
        **columns,
    }


# The oldest rows are the ones claim_next must pass over: claimed now, processed, dead.
EVENTS = [
    _event("a/pending", 1, minutes(1), lane_ready=True),
    _event("a/pending", 2, minutes(2), lane_ready=True, payload="[1,2.5,null]"),
    _event(
        "b/claimed",
        1,
        T0,
        lane_ready=True,
        attempt_count=1,
        first_claimed_at=minutes(50),
        last_claimed_at=minutes(50),
        claim_holder="w0",
        claim_expires_at=LIVE_CLAIM_ENDS,
    ),
    _event(
        "c/processed",
        1,
        T0,
        lane_ready=True,
        attempt_count=1,
        first_claimed_at=minutes(5),
        last_claimed_at=minutes(5),
        processed_at=minutes(10),
        processed_by_attempt=1,
        returned_event_ids="[]",
    ),
    _event(
        "d/dead",
        1,
        T0,
        lane_ready=True,
        attempt_count=3,
        failure_count=3,
        first_claimed_at=minutes(6),
        last_claimed_at=minutes(19),
        last_failed_at=minutes(20),
        last_failed_attempt=3,
        last_error="boom",
        failed_at=minutes(20),
    ),
    _event("e/lane", 1, minutes(3), lane="L", lane_ready=True),
    _event("e/lane", 2, minutes(4), lane="L", lane_ready=False),
    _event(
        "f/expired",
        1,
        minutes(5),
        lane_ready=True,
        attempt_count=1,
        first_claimed_at=minutes(29),
        last_claimed_at=minutes(29),
        claim_holder="w0",
        claim_expires_at=minutes(30),
    ),
]
SNAPSHOTS = [
    {
        "session_id": "c/processed",
        "reducer_name": "r",
        "up_to_index": 1,
        "state": '{"k":1}',
        "updated_at": minutes(11),
    }
]
PRESENCE = [
    {
        "ns": "ns",
        "participant": "p",
        "field": "f",
        "value": '"here"',
        "seen": 1,
        "at": minutes(12),
        "expires_at": T0 + timedelta(days=1),
    }
]
# What claim_next takes, call after call, at NOW: oldest free event's session first;
# then idle until the live claim ends.
DISPATCH_ORDER = [("a/pending", [1, 2]), ("e/lane", [1]), ("f/expired", [1])]


def write_rows_at_baseline(engine: Engine) -> None:
    """Upgrade an empty database to 0001 and write EVENTS, SNAPSHOTS and PRESENCE."""
    assert migrations.move_to(engine, BASELINE) == BASELINE
    with engine.begin() as connection:
        connection.execute(insert(events), EVENTS)
        connection.execute(insert(snapshots), SNAPSHOTS)
        connection.execute(insert(presence), PRESENCE)


def all_rows(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of a2sql's tables, in key order, as a2sql's column types read them."""
    with engine.connect() as connection:
        return {
            table.name: [
                tuple(row)
                for row in connection.execute(
                    select(*(SEED_COLUMNS if table is events else table.columns)).order_by(
                        *table.primary_key.columns
                    )
                )
            ]
            for table in (events, snapshots, presence)
        }


def event_indexes(engine: Engine) -> dict[str, list[str]]:
    return {
        str(index["name"]): list(index["column_names"])
        for index in inspect(engine).get_indexes("a2_events")
    }


def revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return migrations.current_revision(connection)


def dispatch_all(store: a2sql.Store) -> list[tuple[str | None, list[int]]]:
    """claim_next until idle: the sessions and event indexes it took, in order."""
    taken = []
    while (dispatch := store.claim_next(holder="w1", ttl_ms=TTL_MS)).outcome == "claimed":
        taken.append((dispatch.session_id, [event.index for event in dispatch.events]))
    assert dispatch.retry_at == LIVE_CLAIM_ENDS
    return taken


def test_upgrade_from_baseline_keeps_every_row_and_adds_the_index(url: str, engine: Engine) -> None:
    """0001 -> 0002 -> head leaves every row of every table as it was; 0002 creates
    a2_events_dispatch_age (which head replaces by its two indexes); the store then
    opens without migrating and claim_next takes the free events, oldest first,
    passing over claimed, processed and dead ones."""
    write_rows_at_baseline(engine)
    before = all_rows(engine)
    assert [len(rows) for rows in before.values()] == [len(EVENTS), 1, 1]
    assert DISPATCH_AGE not in event_indexes(engine)

    assert migrations.move_to(engine, DISPATCH_AGE_REVISION) == DISPATCH_AGE_REVISION
    assert event_indexes(engine)[DISPATCH_AGE] == ["created_at", "session_id", "claim_expires_at"]
    assert all_rows(engine) == before
    assert migrations.move_to(engine) == HEAD
    assert revision(engine) == HEAD
    assert all_rows(engine) == before
    assert has_dispatch_indexes_of_head(engine)

    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        first = store.claim_next(holder="w1", ttl_ms=TTL_MS)
        assert (first.outcome, first.session_id) == ("claimed", "a/pending")
        assert [event.payload for event in first.events] == [
            {"session": "a/pending", "idx": 1},
            [1, 2.5, None],
        ]
        assert [event.attempt_count for event in first.events] == [1, 1]
        assert dispatch_all(store) == DISPATCH_ORDER[1:]
        [dead] = store.read("d/dead")
        assert (dead.failed_at, dead.last_error) == (minutes(20), "boom")


def test_downgrade_to_baseline_drops_the_index_keeps_rows_and_upgrades_again(
    url: str, engine: Engine
) -> None:
    """head -> 0001 drops claim_next's indexes and nothing else, and keeps every row,
    those head's store wrote included; the store then refuses the database without
    migrating; 0001 -> head again restores them, and the store works on."""
    write_rows_at_baseline(engine)
    baseline_indexes = event_indexes(engine)
    assert migrations.move_to(engine) == HEAD
    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        assert store.claim_next(holder="w1", ttl_ms=TTL_MS).session_id == "a/pending"
    at_head = all_rows(engine)

    assert migrations.move_to(engine, BASELINE) == BASELINE
    assert revision(engine) == BASELINE
    assert event_indexes(engine) == baseline_indexes
    assert DISPATCH_AGE not in baseline_indexes
    assert all_rows(engine) == at_head
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:
            signature = migrations.sqlite_schema_signature(connection)
        assert signature == migrations.baseline_sqlite_signature()
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, migrate=False)
    assert raised.value.code == ErrorCode.SCHEMA_MISMATCH
    assert BASELINE in raised.value.message and HEAD in raised.value.message

    assert migrations.move_to(engine) == HEAD
    assert has_dispatch_indexes_of_head(engine)
    assert all_rows(engine) == at_head
    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        assert dispatch_all(store) == DISPATCH_ORDER[1:]


# --- A file the seed's store wrote ------------------------------------------

NOW_MS = 1_767_229_200_000  # NOW in the seed's epoch milliseconds
SEED_ROWS = [
    # session_id, idx, event_type, payload, event_id, created_at, lane, lane_ready,
    # processed_at
    ("s/new", 1, "hello", '{"a":[1,2.5,null]}', "seed-1", NOW_MS - 60_000, None, 1, None),
    ("s/old", 1, "hello", '"text"', "seed-2", NOW_MS - 120_000, "L", 1, None),
    ("s/old", 2, "hello", "null", "seed-3", NOW_MS - 110_000, "L", 0, None),
    ("s/done", 1, "hello", "{}", "seed-4", NOW_MS - 300_000, None, 1, NOW_MS - 200_000),
]


def write_seed_file(path: Path) -> None:
    """A SQLite file made by the seed's DDL, holding SEED_ROWS as the seed writes them."""
    seed_database(path)
    connection = sqlite3.connect(path)
    with connection:
        connection.executemany(
            "insert into a2_events (session_id, idx, event_type, payload, event_id,"
            " created_at, lane, lane_ready, processed_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            SEED_ROWS,
        )
    connection.close()


def _seed_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every event as stored, in the seed's representation (ms integers, JSON text)."""
    connection = sqlite3.connect(path)
    try:
        columns = ", ".join(column.name for column in SEED_COLUMNS)
        return connection.execute(
            f"select {columns} from a2_events order by session_id, idx"
        ).fetchall()
    finally:
        connection.close()


@contextmanager
def seed_file_at_head(path: Path) -> Iterator[tuple[a2sql.Store, list[tuple[Any, ...]]]]:
    """A file the seed's store wrote at ``path``, adopted and brought to head by
    ``create_store`` with its rows unchanged: the store open on it, and the rows the seed
    wrote. The file is at head once the store is closed."""
    write_seed_file(path)
    written = _seed_rows(path)
    url = f"sqlite:///{path}"
    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=True) as store:
        assert _seed_rows(path) == written
        yield store, written
    engine = create_engine(url)
    try:
        assert revision(engine) == HEAD
    finally:
        engine.dispose()


def test_seed_file_stamped_at_baseline_upgrades_to_head_keeping_its_rows(
    tmp_path: Path,
) -> None:
    """A file created by the seed's DDL, holding rows in the seed's conventions, is
    adopted at 0001 by a2sql (no upgrade yet: no new index) and upgraded to head with
    every stored value unchanged; the store then claims its work oldest first."""
    path = tmp_path / "seed.db"
    write_seed_file(path)
    written = _seed_rows(path)
    assert len(written) == len(SEED_ROWS)

    url = f"sqlite:///{path}"
    engine = create_engine(url)
    try:
        assert revision(engine) is None
        assert migrations.move_to(engine, BASELINE) == BASELINE
        assert revision(engine) == BASELINE
        assert DISPATCH_AGE not in event_indexes(engine)
        assert _seed_rows(path) == written

        assert migrations.move_to(engine) == HEAD
        assert has_dispatch_indexes_of_head(engine)
    finally:
        engine.dispose()
    assert _seed_rows(path) == written

    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        taken = [store.claim_next(holder="w", ttl_ms=1000) for _ in range(3)]
    assert [(d.outcome, d.session_id) for d in taken] == [
        ("claimed", "s/old"),
        ("claimed", "s/new"),
        ("idle", None),
    ]
    assert [event.id for event in taken[0].events] == ["seed-2"]
    assert taken[1].events[0].payload == {"a": [1, 2.5, None]}
