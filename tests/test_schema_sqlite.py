"""On SQLite the DDL is the seed's (SPEC §5): a file of either store opens in the other.

The baseline revision (0001) is exactly the seed's DDL; head adds a2sql's own
index a2_events_dispatch_age (0002) and table a2_retired_attempts (0003), and
nothing else. The seed's DDL is kept
in ``tests/seed_schema.sql``, as that store creates its file.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

import a2sql
from a2sql import A2Error, ErrorCode
from a2sql import migrate as migrations

REPO = Path(__file__).resolve().parents[1]
SEED_SCHEMA = Path(__file__).with_name("seed_schema.sql")
VERSION_TABLE = "a2sql_alembic_version"
ALEMBIC = Path(sys.executable).parent / "alembic"
DISPATCH_AGE = "a2_events_dispatch_age"
DISPATCH_FREE = "a2_events_dispatch_free"
DISPATCH_DUE = "a2_events_dispatch_due"
DISPATCHABLE = "lane_ready = 1 and processed_at is null and failed_at is null"
RETIRED_ATTEMPTS = "a2_retired_attempts"
WAITING = "a2_events_waiting"


def seed_schema() -> str:
    """The seed store's DDL (its ``SCHEMA``), as kept in tests/seed_schema.sql."""
    return SEED_SCHEMA.read_text(encoding="utf-8")


def seed_database(path: Path, ddl: str | None = None) -> None:
    """A SQLite file created the way the seed's store creates one."""
    connection = sqlite3.connect(path)
    try:
        connection.executescript(ddl if ddl is not None else seed_schema())
    finally:
        connection.close()


def migrated_database(path: Path, cwd: Path, revision: str = "head") -> None:
    """A SQLite file created by ``alembic upgrade REVISION``."""
    result = subprocess.run(
        [
            str(ALEMBIC),
            "-c",
            str(REPO / "alembic.ini"),
            "-x",
            f"url=sqlite:///{path}",
            "upgrade",
            revision,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def _where(sql: str | None) -> str | None:
    match = re.search(r"\bwhere\b(.*)$", sql or "", re.IGNORECASE | re.DOTALL)
    return re.sub(r"\s+", " ", match.group(1)).strip().lower() if match else None


def describe(connection: sqlite3.Connection) -> dict[str, Any]:
    """Every table but the version table: columns, STRICT flag, indexes; plus other objects."""
    described: dict[str, Any] = {}
    for _schema, table, kind, _ncol, _wr, strict in connection.execute(
        "pragma main.table_list"
    ).fetchall():
        if table.startswith("sqlite_") or table == VERSION_TABLE:
            continue
        columns = [
            (name, decl.lower(), bool(notnull), default, pk, hidden)
            for _cid, name, decl, notnull, default, pk, hidden in connection.execute(
                f"pragma table_xinfo({table})"
            )
        ]
        indexes = {}
        for _seq, index, unique, origin, partial in connection.execute(
            f"pragma index_list({table})"
        ).fetchall():
            keys = [
                (name, bool(desc), collation)
                for _seqno, _cid, name, desc, collation, key in connection.execute(
                    f"pragma index_xinfo({index})"
                )
                if key
            ]
            sql = connection.execute(
                "select sql from sqlite_master where type = 'index' and name = ?", (index,)
            ).fetchone()[0]
            indexes[index] = {
                "columns": keys,
                "unique": bool(unique),
                "origin": origin,
                "partial": bool(partial),
                "where": _where(sql),
            }
        described[table] = {
            "kind": kind,
            "strict": bool(strict),
            "columns": columns,
            "indexes": indexes,
        }
    others = connection.execute(
        "select type, name, tbl_name from sqlite_master "
        "where type in ('trigger', 'view') and tbl_name != ?",
        (VERSION_TABLE,),
    ).fetchall()
    described["<triggers and views>"] = sorted(others)
    return described


@pytest.fixture
def seed_file(tmp_path: Path) -> Path:
    path = tmp_path / "seed.db"
    seed_database(path)
    return path


@pytest.fixture
def alembic_file(tmp_path: Path) -> Path:
    """A SQLite file upgraded by the `alembic` command to the baseline revision."""
    path = tmp_path / "alembic.db"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    migrated_database(path, cwd, migrations.BASELINE)
    return path


@pytest.fixture
def head_file(tmp_path: Path) -> Path:
    """A SQLite file upgraded by the `alembic` command to head."""
    path = tmp_path / "head.db"
    cwd = tmp_path / "cwd-head"
    cwd.mkdir()
    migrated_database(path, cwd)
    return path


@pytest.fixture
def connect() -> Iterator[Any]:
    opened: list[sqlite3.Connection] = []

    def _connect(path: Path) -> sqlite3.Connection:
        connection = sqlite3.connect(path)
        opened.append(connection)
        return connection

    yield _connect
    for connection in opened:
        connection.close()


def test_migrated_sqlite_schema_equals_the_seed_ddl(
    seed_file: Path, alembic_file: Path, connect: Any
) -> None:
    """`alembic upgrade 0001_baseline` on SQLite yields the seed's tables, columns and indexes."""
    assert _version(alembic_file) == [migrations.BASELINE]
    seed, ours = describe(connect(seed_file)), describe(connect(alembic_file))
    assert set(ours) == set(seed)
    for table in seed:
        assert ours[table] == seed[table], f"table {table} differs from the seed's"


def test_head_is_the_seed_ddl_plus_a2sqls_indexes_table_and_column(
    seed_file: Path, head_file: Path, connect: Any
) -> None:
    """`alembic upgrade head` on SQLite yields the seed's DDL plus: claim_next's two
    indexes, a2_events_dispatch_free on (created_at, session_id) and
    a2_events_dispatch_due on (claim_expires_at, created_at, session_id), partial on the
    dispatchable events without and with a claim expiry (0004, in place of 0002's
    a2_events_dispatch_age); one strict table, a2_retired_attempts (session_id
    text key, last_attempt integer) (0003); one nullable column at the end of
    a2_events, wake_on, and its index a2_events_waiting on (session_id, wake_on, idx),
    partial on the rows that have it (0004); the seed's a2_events_lane_pending and
    a2_events_claim_expiry partial on the rows with a lane and with a claim expiry
    only (0005). No other table, column, index, trigger or view differs."""
    assert migrations.head_revision() == "0005_lean_indexes"
    assert _version(head_file) == [migrations.head_revision()]
    seed, head = describe(connect(seed_file)), describe(connect(head_file))
    assert head.pop(RETIRED_ATTEMPTS) == {
        "kind": "table",
        "strict": True,
        "columns": [
            ("session_id", "text", True, None, 1, 0),
            ("last_attempt", "integer", True, None, 0, 0),
        ],
        "indexes": {
            "sqlite_autoindex_a2_retired_attempts_1": {
                "columns": [("session_id", False, "BINARY")],
                "unique": True,
                "origin": "pk",
                "partial": False,
                "where": None,
            }
        },
    }
    assert set(head) == set(seed)
    assert head["a2_events"]["indexes"].pop(DISPATCH_FREE) == {
        "columns": [("created_at", False, "BINARY"), ("session_id", False, "BINARY")],
        "unique": False,
        "origin": "c",
        "partial": True,
        "where": f"{DISPATCHABLE} and claim_expires_at is null",
    }
    assert head["a2_events"]["indexes"].pop(DISPATCH_DUE) == {
        "columns": [
            ("claim_expires_at", False, "BINARY"),
            ("created_at", False, "BINARY"),
            ("session_id", False, "BINARY"),
        ],
        "unique": False,
        "origin": "c",
        "partial": True,
        "where": f"{DISPATCHABLE} and claim_expires_at is not null",
    }
    assert head["a2_events"]["indexes"].pop(WAITING) == {
        "columns": [
            ("session_id", False, "BINARY"),
            ("wake_on", False, "BINARY"),
            ("idx", False, "BINARY"),
        ],
        "unique": False,
        "origin": "c",
        "partial": True,
        "where": "wake_on is not null",
    }
    assert head["a2_events"]["columns"].pop() == ("wake_on", "text", False, None, 0, 0)
    seed_indexes, head_indexes = seed["a2_events"]["indexes"], head["a2_events"]["indexes"]
    for name, narrower in (
        ("a2_events_lane_pending", "processed_at is null and lane is not null"),
        ("a2_events_claim_expiry", f"{DISPATCHABLE} and claim_expires_at is not null"),
    ):
        assert head_indexes[name] == {**seed_indexes[name], "where": narrower}, name
        head_indexes[name] = seed_indexes[name]
    for table in seed:
        assert head[table] == seed[table], f"table {table} differs from the seed's"


def test_seed_ddl_has_strict_tables_and_partial_indexes(seed_file: Path, connect: Any) -> None:
    """The comparison is not vacuous: the seed has strict tables and partial indexes."""
    seed = describe(connect(seed_file))
    assert {"a2_events", "a2_snapshots", "a2_presence"} <= set(seed)
    assert all(seed[table]["strict"] for table in ("a2_events", "a2_snapshots", "a2_presence"))
    events = seed["a2_events"]
    assert events["indexes"]["a2_events_dispatch_ready"]["where"] == (
        "lane_ready = 1 and processed_at is null and failed_at is null"
    )
    assert events["indexes"]["a2_events_event_id"]["unique"]
    assert [column[0] for column in events["columns"]][:2] == ["session_id", "idx"]


def _signature(path: Path) -> dict[str, Any]:
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            return migrations.sqlite_schema_signature(connection)
    finally:
        engine.dispose()


def test_sqlite_schema_signature_agrees_for_seed_and_migrated_files(
    seed_file: Path, alembic_file: Path, head_file: Path
) -> None:
    """a2sql's own signature of the seed file equals that of the baseline revision, and
    tells head apart from it by claim_next's indexes, the table 0003 adds, the
    column 0004 adds and the two indexes 0005 narrows (so
    adoption, which compares signatures, takes a seed file for 0001 and never for
    head)."""
    seed, baseline = _signature(seed_file), _signature(alembic_file)
    assert seed == baseline == migrations.baseline_sqlite_signature()
    head = _signature(head_file)
    assert head != baseline
    assert head.pop(RETIRED_ATTEMPTS) == {
        "columns": [
            ("session_id", "text", True, None, 1),
            ("last_attempt", "integer", True, None, 0),
        ],
        "strict": True,
        "indexes": {},
    }
    assert head["a2_events"]["indexes"].pop(DISPATCH_FREE) == (
        ["created_at", "session_id"],
        False,
        f"{DISPATCHABLE} and claim_expires_at is null",
    )
    assert head["a2_events"]["indexes"].pop(DISPATCH_DUE) == (
        ["claim_expires_at", "created_at", "session_id"],
        False,
        f"{DISPATCHABLE} and claim_expires_at is not null",
    )
    waiting = head["a2_events"]["indexes"].pop(WAITING)
    assert waiting == (["session_id", "wake_on", "idx"], False, "wake_on is not null")
    assert head["a2_events"]["columns"].pop() == ("wake_on", "text", False, None, 0)
    for name, narrower in (
        ("a2_events_lane_pending", "processed_at is null and lane is not null"),
        ("a2_events_claim_expiry", f"{DISPATCHABLE} and claim_expires_at is not null"),
    ):
        columns, unique, _ = baseline["a2_events"]["indexes"][name]
        assert head["a2_events"]["indexes"].pop(name) == (columns, unique, narrower), name
        head["a2_events"]["indexes"][name] = baseline["a2_events"]["indexes"][name]
    assert head == baseline


# --- Opening a file the seed's store created --------------------------------


def _version(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        has_table = connection.execute(
            "select 1 from sqlite_master where type = 'table' and name = ?", (VERSION_TABLE,)
        ).fetchone()
        if not has_table:
            return []
        return [row[0] for row in connection.execute(f"select version_num from {VERSION_TABLE}")]
    finally:
        connection.close()


def _indexes(path: Path) -> set[str]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("select name from sqlite_master where type = 'index'")
        return {row[0] for row in rows}
    finally:
        connection.close()


@pytest.mark.parametrize("migrate", [None, True])
def test_create_store_adopts_a_seed_file_and_upgrades_it_to_head(
    seed_file: Path, migrate: bool | None
) -> None:
    """A seed-created file (no version table), opened where upgrading is allowed, is
    adopted as the baseline and upgraded to head: it gets claim_next's indexes."""
    assert DISPATCH_AGE not in _indexes(seed_file)
    with a2sql.create_store(f"sqlite:///{seed_file}", migrate=migrate) as store:
        store.append("s", [a2sql.NewEvent("t", {"k": 1}, id="e1")])
        assert [event.id for event in store.read("s")] == ["e1"]
    assert _version(seed_file) == [migrations.head_revision()]
    assert DISPATCH_FREE in _indexes(seed_file)
    assert _signature(seed_file) != migrations.baseline_sqlite_signature()


def test_create_store_migrate_false_on_a_seed_file_refuses_and_writes_nothing(
    seed_file: Path,
) -> None:
    """migrate=False on a seed-created file raises SCHEMA_MISMATCH saying it holds the
    seed store's tables and naming the head it needs; checking writes nothing: no
    version table, no a2_events_dispatch_age."""
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(f"sqlite:///{seed_file}", migrate=False)
    assert raised.value.code == ErrorCode.SCHEMA_MISMATCH
    assert "seed store" in raised.value.message
    assert migrations.head_revision() in raised.value.message
    assert _version(seed_file) == []
    assert DISPATCH_AGE not in _indexes(seed_file)
    assert _signature(seed_file) == migrations.baseline_sqlite_signature()


def test_create_store_reads_rows_the_seed_wrote(seed_file: Path) -> None:
    """Rows written in the seed's format (ms integers, JSON text) read back as records."""
    connection = sqlite3.connect(seed_file)
    with connection:
        connection.execute(
            "insert into a2_events (session_id, idx, event_type, payload, event_id, created_at,"
            " lane_ready) values ('s', 1, 'hello', ?, 'seed-1', 1700000000123, 1)",
            (json.dumps({"a": [1, 2.5, None]}),),
        )
    connection.close()
    with a2sql.create_store(f"sqlite:///{seed_file}") as store:
        [event] = store.read("s")
        assert (event.id, event.type, event.payload, event.index) == (
            "seed-1",
            "hello",
            {"a": [1, 2.5, None]},
            1,
        )
        assert int(event.created_at.timestamp() * 1000) == 1700000000123
        assert store.claim_available("s", holder="w", ttl_ms=1000).outcome == "claimed"


def _seed_variant(path: Path, change: str) -> None:
    seed_database(path)
    connection = sqlite3.connect(path)
    try:
        connection.executescript(change)
    finally:
        connection.close()


@pytest.mark.parametrize("migrate", [None, False, True])
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("drop index a2_events_claim_expiry;", "a2_events_claim_expiry"),
        ("alter table a2_snapshots add column extra_column text;", "extra_column"),
        ("drop table a2_presence;", "a2_presence"),
        (
            "drop index a2_events_unprocessed;"
            " create index a2_events_unprocessed on a2_events (session_id, idx);",
            "a2_events_unprocessed",
        ),
        # Index names that need quoting in SQL: read, not run as SQL.
        ('create index "my index" on a2_events (lane);', "my index"),
        ('create index "it\'s-an ""index""" on a2_events (lane);', "s-an"),
        ('create index "a); drop table a2_events; --" on a2_events (lane);', "drop table"),
    ],
    ids=[
        "missing_index",
        "extra_column",
        "missing_table",
        "index_not_partial",
        "extra_index_with_a_space",
        "extra_index_with_quotes_and_a_dash",
        "extra_index_named_like_sql",
    ],
)
def test_create_store_rejects_seed_tables_that_differ_naming_the_difference(
    tmp_path: Path, change: str, named: str, migrate: bool | None
) -> None:
    """Seed tables that do not match the baseline raise SCHEMA_MISMATCH naming what differs."""
    path = tmp_path / "variant.db"
    _seed_variant(path, change)
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(f"sqlite:///{path}", migrate=migrate)
    assert raised.value.code == ErrorCode.SCHEMA_MISMATCH
    assert named in raised.value.message
    assert _version(path) == []
