"""Revision 0003_retired_attempts: a table added beside existing data, and taken off again.

A database at 0002_dispatch_age already holds events of every kind (those of
tests/test_migration_0002.py: pending, claimed, claim expired, processed,
dead-lettered, waiting in a lane) when a2sql with 0003 arrives. The table starts
empty: sessions deleted before it left no row. Every test runs on a SQLite file
and on PostgreSQL (the ``url`` fixture), except the seed file's, SQLite only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect, select

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent
from a2sql import migrate as migrations
from a2sql.sql.schema import retired_attempts
from a2sql.testing import FakeClock
from tests.test_migration_0002 import (
    NOW,
    TTL_MS,
    _seed_rows,
    all_rows,
    revision,
    seed_file_at_head,
    write_rows_at_baseline,
)

DISPATCH_AGE = "0002_dispatch_age"
RETIRED = "0003_retired_attempts"
HEAD = migrations.head_revision()
TABLE = "a2_retired_attempts"


def has_table(engine: Engine) -> bool:
    return inspect(engine).has_table(TABLE)


def retired_rows(engine: Engine) -> list[tuple[str, int]]:
    with engine.connect() as connection:
        rows = connection.execute(select(retired_attempts).order_by(retired_attempts.c.session_id))
        return [(session_id, last_attempt) for session_id, last_attempt in rows]


def write_rows_at_0002(engine: Engine) -> None:
    write_rows_at_baseline(engine)
    assert migrations.move_to(engine, DISPATCH_AGE) == DISPATCH_AGE


def delete_and_append_again(store: a2sql.Store) -> None:
    """Sessions written before 0003, deleted and appended again: "b/claimed" (attempt 1,
    still held by w0) and "d/dead" (dead at attempt 3) count their attempts on;
    "a/pending" (never claimed) leaves no row and starts at 1."""
    for session_id in ("a/pending", "b/claimed", "d/dead"):
        store.delete_session(session_id)
        store.append(session_id, [NewEvent("again", id=f"{session_id}#again")])
    claimed = {
        session_id: store.claim_available(session_id, holder="w1", ttl_ms=TTL_MS).events[0]
        for session_id in ("a/pending", "b/claimed", "d/dead")
    }
    assert {sid: event.attempt_count for sid, event in claimed.items()} == {
        "a/pending": 1,
        "b/claimed": 2,
        "d/dead": 4,
    }
    # w0's attempt 1 of the deleted "b/claimed" no longer fences event 1.
    stale = store.complete_attempt("b/claimed", index=1, attempt=1, events=[])
    assert stale.outcome == "superseded"
    assert store.read("b/claimed")[0].processed_at is None


def test_upgrade_from_0002_keeps_every_row_and_adds_an_empty_table(
    url: str, engine: Engine
) -> None:
    """0002 -> head leaves every row as it was and creates a2_retired_attempts, empty;
    the store then opens without migrating, and deletions fill it."""
    write_rows_at_0002(engine)
    before = all_rows(engine)
    assert not has_table(engine)

    assert migrations.move_to(engine) == HEAD
    assert revision(engine) == HEAD
    assert all_rows(engine) == before
    assert retired_rows(engine) == []

    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        delete_and_append_again(store)
    assert retired_rows(engine) == [("b/claimed", 1), ("d/dead", 3)]


def test_downgrade_to_0002_drops_the_table_keeps_rows_and_upgrades_again(
    url: str, engine: Engine
) -> None:
    """head -> 0002 drops a2_retired_attempts and nothing else, keeping every row of the
    other tables, those head's store wrote included; the store then refuses the
    database without migrating; 0002 -> head again brings the table back, empty (what
    0002 forgot is gone), and the store works on."""
    write_rows_at_0002(engine)
    assert migrations.move_to(engine) == HEAD
    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        delete_and_append_again(store)
    at_head = all_rows(engine)
    assert retired_rows(engine) != []

    assert migrations.move_to(engine, DISPATCH_AGE) == DISPATCH_AGE
    assert revision(engine) == DISPATCH_AGE
    assert not has_table(engine)
    assert all_rows(engine) == at_head
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, migrate=False)
    assert raised.value.code == ErrorCode.SCHEMA_MISMATCH
    assert DISPATCH_AGE in raised.value.message and HEAD in raised.value.message

    assert migrations.move_to(engine) == HEAD
    assert retired_rows(engine) == []
    assert all_rows(engine) == at_head
    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        store.delete_session("d/dead")
        store.append("d/dead", [NewEvent("third")])
        [event] = store.claim_available("d/dead", holder="w1", ttl_ms=TTL_MS).events
        # After attempt 4 of the session appended at head, which its event kept.
        assert event.attempt_count == 5
    assert retired_rows(engine) == [("d/dead", 4)]


def test_seed_file_upgrades_to_head_and_deletes_keep_their_attempts(tmp_path: Path) -> None:
    """A file the seed's store wrote is adopted and brought to head by create_store, its
    rows unchanged; a session claimed, deleted and appended again counts its attempts
    on, and the seed's other sessions are as they were."""
    path = tmp_path / "seed.db"
    with seed_file_at_head(path) as (store, written):
        [old] = store.claim_available("s/new", holder="w", ttl_ms=TTL_MS).events
        assert old.attempt_count == 1
        store.delete_session("s/new")
        store.append("s/new", [NewEvent("hello", id="seed-1")])
        [new] = store.claim_available("s/new", holder="w", ttl_ms=TTL_MS).events
        assert (new.index, new.attempt_count) == (1, 2)
        failed = store.fail_attempt("s/new", index=1, attempt=1, error="stale", max_failures=1)
        assert failed.outcome == "superseded"
    engine = create_engine(f"sqlite:///{path}")
    try:
        assert retired_rows(engine) == [("s/new", 1)]
    finally:
        engine.dispose()
    assert [row for row in _seed_rows(path) if row[0] != "s/new"] == [
        row for row in written if row[0] != "s/new"
    ]
