"""On PostgreSQL the schema uses native types and the "C" collation (SPEC §5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text

from a2sql import migrate
from a2sql.execution.engines import resolve_url

KEY_COLUMNS = {
    "a2_events": ("session_id", "event_id", "event_type", "lane", "claim_holder"),
    "a2_snapshots": ("session_id", "reducer_name"),
    "a2_presence": ("ns", "participant", "field"),
    "a2_retired_attempts": ("session_id",),
}
JSON_COLUMNS = {"a2_events": ("payload",), "a2_snapshots": ("state",), "a2_presence": ("value",)}
TIMESTAMP_COLUMNS = {
    "a2_events": (
        "created_at",
        "processed_at",
        "first_claimed_at",
        "last_claimed_at",
        "last_failed_at",
        "failed_at",
        "claim_expires_at",
    ),
    "a2_snapshots": ("updated_at",),
    "a2_presence": ("at", "expires_at"),
}
BIGINT_COLUMNS = {
    "a2_events": (
        "idx",
        "processed_by_attempt",
        "attempt_count",
        "failure_count",
        "last_failed_attempt",
    ),
    "a2_snapshots": ("up_to_index",),
    "a2_presence": ("seen",),
    "a2_retired_attempts": ("last_attempt",),
}
UNPROCESSED = "(processed_at IS NULL)"
DISPATCHABLE = "(lane_ready AND (processed_at IS NULL) AND (failed_at IS NULL))"
VERSION_PKEY = "a2sql_alembic_version_pkc"


@pytest.fixture
def migrated(postgres_url: str) -> Iterator[Connection]:
    """A connection to a PostgreSQL schema upgraded by a2sql.migrate.upgrade."""
    engine = create_engine(resolve_url(postgres_url))
    try:
        migrate.upgrade(engine)
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


def columns(connection: Connection) -> dict[tuple[str, str], dict[str, Any]]:
    rows = connection.execute(
        text(
            "select table_name, column_name, data_type, collation_name, is_nullable"
            " from information_schema.columns where table_schema = current_schema()"
        )
    ).mappings()
    return {(row["table_name"], row["column_name"]): dict(row) for row in rows}


def indexes(connection: Connection) -> dict[str, dict[str, Any]]:
    rows = connection.execute(
        text(
            """
            select i.relname as name, t.relname as table_name, ix.indisunique as unique,
                   pg_get_expr(ix.indpred, ix.indrelid) as predicate,
                   array(
                     select a.attname
                       from unnest(ix.indkey) with ordinality as k(attnum, position)
                       join pg_attribute a
                         on a.attrelid = ix.indrelid and a.attnum = k.attnum
                      order by k.position
                   ) as columns
              from pg_index ix
              join pg_class i on i.oid = ix.indexrelid
              join pg_class t on t.oid = ix.indrelid
              join pg_namespace n on n.oid = t.relnamespace
             where n.nspname = current_schema()
            """
        )
    ).mappings()
    return {row["name"]: dict(row) for row in rows}


def test_partial_indexes_exist_with_their_predicates(migrated: Connection) -> None:
    """The seed's indexes, partial ones with their WHERE, are declared on PostgreSQL too,
    and so is a2sql's own a2_events_dispatch_age (revision 0002); no other index is."""
    found = indexes(migrated)
    expected = {
        "a2_events_event_id": (["event_id"], True, None),
        "a2_events_unprocessed": (["session_id", "idx"], False, UNPROCESSED),
        "a2_events_lane_pending": (
            ["session_id", "lane", "idx"],
            False,
            "((processed_at IS NULL) AND (lane IS NOT NULL))",
        ),
        "a2_events_dispatch_ready": (["session_id", "idx"], False, DISPATCHABLE),
        "a2_events_claim_expiry": (
            ["session_id", "claim_expires_at"],
            False,
            DISPATCHABLE[:-1] + " AND (claim_expires_at IS NOT NULL))",
        ),
        "a2_events_dispatch_free": (
            ["created_at", "session_id"],
            False,
            DISPATCHABLE[:-1] + " AND (claim_expires_at IS NULL))",
        ),
        "a2_events_dispatch_due": (
            ["claim_expires_at", "created_at", "session_id"],
            False,
            DISPATCHABLE[:-1] + " AND (claim_expires_at IS NOT NULL))",
        ),
        "a2_events_waiting": (["session_id", "wake_on", "idx"], False, "(wake_on IS NOT NULL)"),
    }
    for name, (index_columns, unique, predicate) in expected.items():
        assert name in found, f"index {name} is missing"
        index = found[name]
        assert index["table_name"] == "a2_events"
        assert (list(index["columns"]), index["unique"], index["predicate"]) == (
            index_columns,
            unique,
            predicate,
        ), name
    primary_keys = {
        "a2_events_pkey",
        "a2_snapshots_pkey",
        "a2_presence_pkey",
        "a2_retired_attempts_pkey",
    }
    assert set(found) - primary_keys - {VERSION_PKEY} == set(expected)


def test_partial_index_predicates_appear_in_pg_indexes(migrated: Connection) -> None:
    """pg_indexes shows the partial indexes' WHERE clauses."""
    definitions: dict[str, str] = dict(
        migrated.execute(
            text(
                "select indexname, indexdef from pg_indexes"
                " where schemaname = current_schema() and tablename = 'a2_events'"
            )
        ).all()
    )
    assert definitions["a2_events_unprocessed"].endswith(f"WHERE {UNPROCESSED}")
    assert definitions["a2_events_dispatch_ready"].endswith(f"WHERE {DISPATCHABLE}")
    free = DISPATCHABLE[:-1] + " AND (claim_expires_at IS NULL))"
    assert definitions["a2_events_dispatch_free"].endswith(f"WHERE {free}")
    assert definitions["a2_events_waiting"].endswith("WHERE (wake_on IS NOT NULL)")
    assert "WHERE" not in definitions["a2_events_event_id"]


def test_primary_keys_match_the_seed(migrated: Connection) -> None:
    """Primary keys: (session_id, idx), (session_id, reducer_name), (ns, participant, field);
    a2sql's own a2_retired_attempts (revision 0003): session_id."""
    rows = migrated.execute(
        text(
            """
            select tc.table_name, array_agg(k.column_name::text order by k.ordinal_position)
              from information_schema.table_constraints tc
              join information_schema.key_column_usage k
                on k.constraint_name = tc.constraint_name and k.table_schema = tc.table_schema
             where tc.table_schema = current_schema() and tc.constraint_type = 'PRIMARY KEY'
             group by tc.table_name
            """
        )
    ).all()
    keys = {table: list(key) for table, key in rows}
    assert keys["a2_events"] == ["session_id", "idx"]
    assert keys["a2_snapshots"] == ["session_id", "reducer_name"]
    assert keys["a2_presence"] == ["ns", "participant", "field"]
    assert keys["a2_retired_attempts"] == ["session_id"]


def test_text_keys_use_the_c_collation(migrated: Connection) -> None:
    """Text keys sort by code point: their collation is "C"."""
    found = columns(migrated)
    for table, names in KEY_COLUMNS.items():
        for name in names:
            column = found[(table, name)]
            assert (column["data_type"], column["collation_name"]) == ("text", "C"), (
                f"{table}.{name}"
            )


def test_json_columns_are_json_not_jsonb(migrated: Connection) -> None:
    """Payloads, states and presence values are `json`, which keeps the text exactly."""
    found = columns(migrated)
    for table, names in JSON_COLUMNS.items():
        for name in names:
            assert found[(table, name)]["data_type"] == "json", f"{table}.{name}"


def test_counters_and_indexes_are_bigint(migrated: Connection) -> None:
    """idx and every counter are bigint."""
    found = columns(migrated)
    for table, names in BIGINT_COLUMNS.items():
        for name in names:
            assert found[(table, name)]["data_type"] == "bigint", f"{table}.{name}"


def test_timestamps_are_timestamptz(migrated: Connection) -> None:
    """Every stored time is timestamptz."""
    found = columns(migrated)
    for table, names in TIMESTAMP_COLUMNS.items():
        for name in names:
            assert found[(table, name)]["data_type"] == "timestamp with time zone", (
                f"{table}.{name}"
            )


def test_lane_ready_is_boolean_not_null(migrated: Connection) -> None:
    """lane_ready is a native boolean."""
    column = columns(migrated)[("a2_events", "lane_ready")]
    assert (column["data_type"], column["is_nullable"]) == ("boolean", "NO")


def test_every_column_is_typed_and_nullable_as_on_sqlite(migrated: Connection) -> None:
    """The column set and NOT NULL flags equal the SQLite baseline's, table by table, with
    the nullable column revision 0004 adds to a2_events."""
    found = columns(migrated)
    baseline = migrate.baseline_sqlite_signature()
    added = {"a2_events": {"wake_on": False}}
    for table, described in baseline.items():
        expected = {name: notnull for name, _decl, notnull, _default, _pk in described["columns"]}
        expected |= added.get(table, {})
        have = {
            name: column["is_nullable"] == "NO"
            for (table_name, name), column in found.items()
            if table_name == table
        }
        assert have == expected, table
