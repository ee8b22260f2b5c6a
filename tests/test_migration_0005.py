"""Revision 0005_lean_indexes: two of the seed's indexes narrowed to the rows their reads
look for, beside existing data, and widened again.

A database at 0004_time_and_control already holds events of every kind (those of
tests/test_migration_0002.py: pending, claimed, claim expired, processed,
dead-lettered, waiting in a lane) when a2sql with 0005 arrives. Every row keeps its
values; the two indexes hold only the rows with a lane, and with a claim expiry;
the store claims, retries and walks lanes on them as before. Every test runs on a
SQLite file and on PostgreSQL (the ``url`` fixture), except the seed file's, SQLite
only.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import Engine, func, select, text

import a2sql
from a2sql import NewEvent
from a2sql import migrate as migrations
from a2sql.testing import FakeClock
from tests.test_migration_0002 import (
    DISPATCH_ORDER,
    NOW,
    TTL_MS,
    all_rows,
    revision,
    seed_file_at_head,
    write_rows_at_baseline,
)

TIME_AND_CONTROL = "0004_time_and_control"
LEAN = "0005_lean_indexes"


def predicates(engine: Engine) -> dict[str, str]:
    """The WHERE of a2_events_lane_pending and a2_events_claim_expiry, as the engine
    keeps it, lower case."""
    names = ("a2_events_lane_pending", "a2_events_claim_expiry")
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.execute(
                text("select name, sql from sqlite_master where type = 'index' and sql is not null")
            )
            found = {
                name: re.split(r"\swhere\s", sql.lower(), maxsplit=1)[-1] for name, sql in rows
            }
        else:
            rows = connection.execute(
                text(
                    "select c.relname, pg_get_expr(i.indpred, i.indrelid) from pg_index i"
                    " join pg_class c on c.oid = i.indexrelid"
                    " where c.relname in ('a2_events_lane_pending', 'a2_events_claim_expiry')"
                    " and pg_table_is_visible(c.oid)"
                )
            )
            found = {name: where.lower() for name, where in rows}
    return {name: found[name] for name in names}


def indexed_rows(engine: Engine) -> dict[str, int]:
    """How many rows each of the two indexes holds: the rows its predicate admits."""
    where = predicates(engine)
    with engine.connect() as connection:
        return {
            name: connection.execute(
                select(func.count()).select_from(text("a2_events")).where(text(predicate))
            ).scalar_one()
            for name, predicate in where.items()
        }


def test_upgrade_from_0004_narrows_both_indexes_and_keeps_every_row(
    url: str, engine: Engine
) -> None:
    """0004 -> 0005 leaves every row as it was; the two indexes admit only the rows with a
    lane and those with a claim expiry; claim_next serves the rows written before in the
    order it did, and a lane's events still wait for its head."""
    write_rows_at_baseline(engine)
    assert migrations.move_to(engine, TIME_AND_CONTROL) == TIME_AND_CONTROL
    before, wide = all_rows(engine), indexed_rows(engine)

    assert migrations.move_to(engine) == LEAN
    assert revision(engine) == LEAN
    assert all_rows(engine) == before
    where = predicates(engine)
    assert "lane is not null" in where["a2_events_lane_pending"], where
    assert "claim_expires_at is not null" in where["a2_events_claim_expiry"], where
    narrow = indexed_rows(engine)
    assert all(narrow[name] < wide[name] for name in narrow), (wide, narrow)

    clock = FakeClock(NOW)
    with a2sql.create_store(url, clock=clock, migrate=False) as store:
        taken = []
        while (found := store.claim_next(holder="w1", ttl_ms=TTL_MS)).outcome == "claimed":
            assert found.session_id is not None
            taken.append((found.session_id, [event.index for event in found.events]))
        assert taken == DISPATCH_ORDER
        store.append("l/lane", [NewEvent("a", lane="x"), NewEvent("b", lane="x")])
        [head] = store.claim_available("l/lane", holder="w", ttl_ms=TTL_MS).events
        busy = store.claim_available("l/lane", holder="w", ttl_ms=TTL_MS)
        assert busy.outcome == "busy" and busy.retry_at is not None
        store.complete_attempt("l/lane", index=head.index, attempt=head.attempt_count, events=[])
        [then] = store.claim_available("l/lane", holder="w", ttl_ms=TTL_MS).events
        assert then.index == head.index + 1


def test_downgrade_to_0004_widens_both_indexes_and_upgrades_again(url: str, engine: Engine) -> None:
    """0005 -> 0004 brings the seed's two indexes back as they were, keeping every row
    (what 0005 wrote included); 0004 -> 0005 again works on."""
    write_rows_at_baseline(engine)
    assert migrations.move_to(engine, TIME_AND_CONTROL) == TIME_AND_CONTROL
    wide = predicates(engine)
    assert migrations.move_to(engine) == LEAN
    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        store.append("l/lane", [NewEvent("a", lane="x"), NewEvent("b", lane="x")])
    at_head = all_rows(engine)

    assert migrations.move_to(engine, TIME_AND_CONTROL) == TIME_AND_CONTROL
    assert predicates(engine) == wide
    assert all_rows(engine) == at_head

    assert migrations.move_to(engine) == LEAN
    assert all_rows(engine) == at_head
    with a2sql.create_store(url, clock=FakeClock(NOW), migrate=False) as store:
        [head] = store.claim_available("l/lane", holder="w", ttl_ms=TTL_MS).events
        assert head.index == 1


def test_seed_file_upgrades_to_head_and_its_lanes_work_on(tmp_path: Path) -> None:
    """A file the seed's store wrote is adopted and brought to head by create_store, its
    rows unchanged; lanes work on it."""
    with seed_file_at_head(tmp_path / "seed.db") as (store, _):
        store.append("s/lane", [NewEvent("a", lane="x"), NewEvent("b", lane="x")])
        [head] = store.claim_available("s/lane", holder="w", ttl_ms=TTL_MS).events
        assert head.index == 1
