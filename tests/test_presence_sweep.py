"""presence.set sweeps a namespace's expired rows a bounded batch at a time (SPEC §3
presence): with 200,000 rows expired, one write deletes at most ``SWEEP_BATCH`` of
them, repeated writes delete them all, reads never return an expired field
meanwhile, and the sweep seeks the primary key rather than scanning the table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, text

import a2sql
from a2sql import Store
from a2sql.sql.queries.presence import SWEEP_BATCH

EXPIRED = 200_000
LIVE = 10
AT = datetime(2026, 1, 1, tzinfo=UTC)

# ``count`` rows of ``ns`` that expired long ago, participants gone-0000001 on, and
# ``live`` rows of participants live-0000001 on that expire in a long while.
_PG_LOAD = """
insert into a2_presence (ns, participant, field, value, seen, at, expires_at)
select %(ns)s, 'gone-' || lpad(i::text, 7, '0'), 'f', '1'::json, 1,
    timestamptz '2020-01-01', timestamptz '2020-01-01'
from generate_series(1, %(count)s) as i
union all
select %(ns)s, 'live-' || lpad(i::text, 7, '0'), 'f', '2'::json, 1,
    timestamptz '2020-01-01', timestamptz '2999-01-01'
from generate_series(1, %(live)s) as i
"""

_SQLITE_LOAD = """
insert into a2_presence (ns, participant, field, value, seen, at, expires_at)
with recursive k(i) as (select 1 union all select i + 1 from k where i < max(:count, :live))
select :ns, 'gone-' || printf('%07d', i), 'f', '1', 1, 1577836800000, 1577836800000
from k where i <= :count
union all
select :ns, 'live-' || printf('%07d', i), 'f', '2', 1, 1577836800000, 32472144000000
from k where i <= :live
"""


def load(store: Store, ns: str, count: int, live: int = LIVE) -> None:
    postgres = store.engine.dialect.name == "postgresql"
    with store.engine.connect() as connection:
        with connection.begin():
            connection.exec_driver_sql(
                _PG_LOAD if postgres else _SQLITE_LOAD, {"ns": ns, "count": count, "live": live}
            )
        if postgres:
            connection.exec_driver_sql("analyze a2_presence")
            connection.commit()


def rows(store: Store, ns: str) -> tuple[int, int]:
    """How many of ``ns``'s stored rows are expired, and how many live."""
    with store.engine.connect() as connection:
        expired = connection.execute(
            text("select count(*) from a2_presence where ns = :ns and participant like 'gone-%'"),
            {"ns": ns},
        ).scalar_one()
        live = connection.execute(
            text(
                "select count(*) from a2_presence where ns = :ns and participant not like 'gone-%'"
            ),
            {"ns": ns},
        ).scalar_one()
    return int(expired), int(live)


def write(store: Store, ns: str, seen: int) -> None:
    store.presence.set(ns, "writer", {"x": seen}, at=AT, seen=seen, ttl_ms=3_600_000)


def live_participants(store: Store, ns: str) -> list[str]:
    return sorted({entry.participant for entry in store.presence.read(ns)})


LIVE_NAMES = [f"live-{n:07d}" for n in range(1, LIVE + 1)]


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


def test_one_set_sweeps_at_most_a_batch_of_a_namespaces_expired_rows(store: Store) -> None:
    """200,000 expired rows in the namespace, a few in another: one presence.set deletes
    exactly SWEEP_BATCH of the namespace's, none of the other's, and no live row."""
    load(store, "room", EXPIRED)
    load(store, "other", 50, live=0)
    assert live_participants(store, "room") == LIVE_NAMES
    write(store, "room", 1)
    assert rows(store, "room") == (EXPIRED - SWEEP_BATCH, LIVE + 1)
    assert rows(store, "other") == (50, 0)
    assert live_participants(store, "room") == sorted([*LIVE_NAMES, "writer"])
    assert store.presence.read("other") == []


def test_repeated_sets_sweep_every_expired_row(store: Store) -> None:
    """Two and a half batches expired: each write sweeps one batch more, and reads return
    the live fields alone throughout, until no expired row is left."""
    count = SWEEP_BATCH * 5 // 2
    load(store, "room", count)
    writes = 0
    while rows(store, "room")[0]:
        writes += 1
        write(store, "room", writes)
        assert rows(store, "room") == (max(0, count - writes * SWEEP_BATCH), LIVE + 1)
        assert live_participants(store, "room") == sorted([*LIVE_NAMES, "writer"])
        assert writes <= count
    assert writes == math.ceil(count / SWEEP_BATCH)


def _pg_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _pg_nodes(child)


def test_the_sweep_seeks_the_primary_key(store: Store) -> None:
    """The sweep's DELETE, as a2sql sends it, on 200,000 expired rows: every access to
    a2_presence seeks its primary key, none scans the table."""
    load(store, "room", EXPIRED)
    sent: list[tuple[str, Any]] = []

    def grab(_conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
        if sql.startswith("DELETE FROM a2_presence"):
            sent.append((sql, params))

    event.listen(store.engine, "before_cursor_execute", grab)
    try:
        write(store, "room", 1)
    finally:
        event.remove(store.engine, "before_cursor_execute", grab)
    [(sql, params)] = sent
    with store.engine.connect() as connection:
        if store.engine.dialect.name == "postgresql":
            raw: Any = connection.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql, params).scalar()
            tree = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
            scans = [
                node
                for node in _pg_nodes(tree)
                if node.get("Relation Name") == "a2_presence" and "Scan" in node["Node Type"]
            ]
            assert scans, json.dumps(tree, indent=1)
            for node in scans:
                assert node.get("Index Name") == "a2_presence_pkey", json.dumps(tree, indent=1)
                assert "ns =" in node.get("Index Cond", ""), json.dumps(tree, indent=1)
        else:
            plan = [
                str(row[-1])
                for row in connection.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)
            ]
            accesses = [detail for detail in plan if "a2_presence" in detail]
            assert accesses, plan
            assert all(
                detail.startswith("SEARCH a2_presence USING INDEX sqlite_autoindex_a2_presence_1")
                for detail in accesses
            ), plan
            assert not any("TEMP B-TREE" in detail for detail in plan), plan
