"""Revision 0004_time_and_control: a column and indexes added beside existing data, and
taken off again.

A database at 0003_retired_attempts already holds events of every kind (those of
tests/test_migration_0002.py: pending, claimed, claim expired, processed,
dead-lettered, waiting in a lane) when a2sql with 0004 arrives. Every row keeps its
values; the new column is NULL on all of them; claim_next serves them in the same
order through the new indexes. Every test runs on a SQLite file and on PostgreSQL
(the ``url`` fixture), except the seed file's, SQLite only.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent
from a2sql import migrate as migrations
from a2sql.sql.schema import events
from a2sql.testing import FakeClock
from tests.test_migration_0002 import (
    DISPATCH_ORDER,
    NOW,
    TTL_MS,
    _seed_rows,
    all_rows,
    event_indexes,
    revision,
    seed_file_at_head,
    write_rows_at_baseline,
)

RETIRED = "0003_retired_attempts"
# Head, with 0004 and the revisions after it (0005 narrows two of the seed's indexes,
# tests/test_migration_0005.py).
HEAD = migrations.head_revision()
NEW_INDEXES = {"a2_events_waiting", "a2_events_dispatch_free", "a2_events_dispatch_due"}


def write_rows_at_0003(engine: Engine) -> None:
    write_rows_at_baseline(engine)
    assert migrations.move_to(engine, RETIRED) == RETIRED


def wake_on_values(engine: Engine) -> list[str | None]:
    with engine.connect() as connection:
        rows = connection.execute(select(events.c.wake_on).order_by(events.c.session_id))
        return [value for (value,) in rows]


def dispatched(store: a2sql.Store) -> list[tuple[str, list[int]]]:
    """claim_next until idle: which session, which indexes, call after call."""
    taken = []
    while (found := store.claim_next(holder="w1", ttl_ms=TTL_MS)).outcome == "claimed":
        assert found.session_id is not None
        taken.append((found.session_id, [event.index for event in found.events]))
    return taken


def test_upgrade_from_0003_keeps_every_row_and_claim_next_serves_them_in_order(
    url: str, engine: Engine
) -> None:
    """0003 -> head leaves every row as it was, the new column NULL on each, claim_next's
    two indexes in place of a2_events_dispatch_age; claim_next serves the rows written
    before in the order it did, and the store waits and signals on them."""
    write_rows_at_0003(engine)
    before = all_rows(engine)

    assert migrations.move_to(engine) == HEAD
    assert revision(engine) == HEAD
    assert all_rows(engine) == before
    assert set(wake_on_values(engine)) == {None}
    indexes = set(event_indexes(engine))
    assert indexes >= NEW_INDEXES and "a2_events_dispatch_age" not in indexes

    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        assert dispatched(store) == DISPATCH_ORDER
        store.append("g/waits", [NewEvent("approve?", wake_on="approval")])
        assert store.signal("g/waits", "approval").woken == [1]


def test_downgrade_to_0003_drops_the_column_keeps_rows_and_upgrades_again(
    url: str, engine: Engine
) -> None:
    """head -> 0003 drops wake_on and the two dispatch indexes, and brings
    a2_events_dispatch_age back, keeping every row (what head wrote included: a waiting
    event keeps its claim expiry, so that the a2sql of 0003 leaves it alone until then);
    the store refuses the database without migrating; 0003 -> head again works on."""
    write_rows_at_0003(engine)
    assert migrations.move_to(engine) == HEAD
    clock = FakeClock(NOW)
    with a2sql.create_store(url, clock=clock, migrate=False) as store:
        store.append("g/waits", [NewEvent("approve?", wake_on="approval")])
        store.append("h/later", [NewEvent("later", available_at=NOW + timedelta(hours=1))])
    at_head = all_rows(engine)

    assert migrations.move_to(engine, RETIRED) == RETIRED
    assert revision(engine) == RETIRED
    indexes = set(event_indexes(engine))
    assert "a2_events_dispatch_age" in indexes and not NEW_INDEXES & indexes
    assert all_rows(engine) == at_head
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, migrate=False)
    assert raised.value.code == ErrorCode.SCHEMA_MISMATCH
    assert RETIRED in raised.value.message and HEAD in raised.value.message

    assert migrations.move_to(engine) == HEAD
    assert all_rows(engine) == at_head
    assert set(wake_on_values(engine)) == {None}
    with a2sql.create_store(url, clock=clock, migrate=False) as store:
        # The wait forgot its name with the column: it waits for its expiry, no signal.
        assert store.signal("g/waits", "approval").woken == []
        clock.set(NOW + timedelta(hours=1))
        [later] = store.claim_available("h/later", holder="w", ttl_ms=TTL_MS).events
        assert later.index == 1


def test_seed_file_upgrades_to_head_and_waits_work_on_it(tmp_path: Path) -> None:
    """A file the seed's store wrote is adopted and brought to head by create_store, its
    rows unchanged; waits and signals work on it, and its old rows read as before."""
    path = tmp_path / "seed.db"
    with seed_file_at_head(path) as (store, written):
        store.append("s/waits", [NewEvent("approve?", wake_on="approval")])
        assert store.claim_available("s/waits", holder="w", ttl_ms=TTL_MS).outcome == "busy"
        assert store.signal("s/waits", "approval").woken == [1]
    assert [row for row in _seed_rows(path) if row[0] != "s/waits"] == written
