"""The databases the benchmarks run on, and fast set-based loading in a2sql's row format.

SQLite: a fresh file (WAL) in a temporary folder per workload. PostgreSQL:
``A2SQL_BENCH_POSTGRES_URL`` or ``postgresql://postgres@127.0.0.1/a2sql_bench``,
created if missing; a2sql's tables are truncated before each workload.
The schema is always the one a2sql's migrations create. With ``--rtt``,
the workloads' connections go through ``bench/delay_proxy.py``
(:func:`route_through`); setting up a database (create, migrate, truncate)
goes direct.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import a2sql

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1/a2sql_bench"
A2SQL_TABLES = ("a2_events", "a2_snapshots", "a2_presence")
# Filler events start here (epoch ms), well before anything a workload writes.
FILLER_T0_MS = 1_700_000_000_000

# A burst of pending events appended to one session in one statement (parameters
# sid, events and t0, created_at in epoch ms on SQLite), as a sudden backlog
# arrives between two of autovacuum's ANALYZE runs. Per engine, for a raw driver
# connection or SQLAlchemy's exec_driver_sql alike.
BURST = {
    "postgres": """
insert into a2_events (session_id, idx, event_type, payload, event_id, created_at, lane_ready)
select %(sid)s, i, 't', '{"n":1}'::json, %(sid)s || '/' || i, now(), true
from generate_series(1, %(events)s) as i
""",
    "sqlite": """
insert into a2_events (session_id, idx, event_type, payload, event_id, created_at, lane_ready)
with recursive k(i) as (select 1 union all select i + 1 from k where i < :events)
select :sid, i, 't', '{"n":1}', :sid || '/' || i, :t0 + i, 1 from k
""",
}


@dataclass(frozen=True)
class Target:
    """One database: its engine kind, the URL for a2sql and the one for the bare driver."""

    engine: str  # "sqlite" | "postgres"
    a2sql_url: str
    driver_dsn: str  # a file path for sqlite3, a conninfo URL for psycopg
    folder: Path | None = None  # the SQLite temp folder, removed by the caller


# The URL the workloads connect to when it is not the server's own: the delay proxy's.
_ROUTED: str | None = None


def direct_postgres_url() -> str:
    """The PostgreSQL server's own URL, for setting a database up."""
    return os.environ.get("A2SQL_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def postgres_url() -> str:
    """The URL the workloads connect to: the server's, or the delay proxy's (``--rtt``)."""
    return _ROUTED or direct_postgres_url()


def route_through(url: str | None) -> None:
    """Workloads connect to ``url`` (the delay proxy's) from now on; None: to the server."""
    global _ROUTED
    _ROUTED = url


def prepare(engine: str) -> Target:
    """An empty, migrated database of ``engine`` for one workload."""
    if engine == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="a2sql-bench-"))
        path = folder / "bench.db"
        target = Target("sqlite", f"sqlite:///{path}", str(path), folder)
    else:
        direct = direct_postgres_url()
        ensure_postgres_database(direct)
        with a2sql.create_store(direct, migrate=True):
            pass
        truncate(Target("postgres", direct, direct))
        url = postgres_url()
        return Target("postgres", url, url)
    with a2sql.create_store(target.a2sql_url, migrate=True):
        pass
    truncate(target)
    return target


def ensure_postgres_database(url: str) -> None:
    """Create the database named in ``url`` if the server does not have it yet."""
    import psycopg
    from psycopg import sql

    info = psycopg.conninfo.conninfo_to_dict(url)
    name = str(info.get("dbname", "postgres"))
    admin = psycopg.conninfo.make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone()
        if found is None:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))


def truncate(target: Target) -> None:
    """Empty a2sql's tables."""
    with connect(target) as conn:
        if target.engine == "postgres":
            conn.execute("truncate " + ", ".join(A2SQL_TABLES))
        else:
            for table in A2SQL_TABLES:
                conn.execute(f"delete from {table}")
        conn.commit()


def connect(target: Target) -> Any:
    """A plain driver connection for setup work (not the baseline's)."""
    if target.engine == "postgres":
        import psycopg

        return psycopg.connect(target.driver_dsn)
    conn = sqlite3.connect(target.driver_dsn, timeout=30)
    conn.execute("pragma journal_mode = wal")
    return conn


def commit_latency_ms(target_url: str, samples: int = 30) -> float:
    """Median time of a one-row write transaction on PostgreSQL: the floor of every write.

    It drifts (by 4x on a shared machine); reported beside each workload so
    that figures can be read against it.
    """
    import statistics
    import time

    import psycopg

    with psycopg.connect(target_url, autocommit=True) as conn:
        conn.execute("create table if not exists bench_commit_probe (n int)")
        times = []
        for n in range(samples):
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute("insert into bench_commit_probe values (%s)", (n,))
            times.append(time.perf_counter() - t0)
        conn.execute("truncate bench_commit_probe")
    return round(statistics.median(times) * 1000, 3)


def select_one_ms(url: str, samples: int = 50) -> float:
    """Median time of ``select 1`` on one connection: a round trip to the server."""
    import statistics
    import time

    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("select 1")
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            conn.execute("select 1").fetchone()
            times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1000, 3)


# --- set-based loading ----------------------------------------------------------------

_PG_LOAD = """
insert into a2_events (
    session_id, idx, event_type, payload, event_id, created_at, lane_ready,
    processed_at, processed_by_attempt, returned_event_ids, first_claimed_at,
    last_claimed_at, attempt_count)
select
    %(prefix)s::text || lpad(s::text, 5, '0'),
    i,
    'filler',
    ('{"n":' || i || ',"text":"some filler text"}')::json,
    md5(%(prefix)s::text || s || '/' || i)::uuid::text,
    to_timestamp((%(t0)s + i) / 1000.0),
    i %% %(every)s = 0,
    case when i %% %(every)s = 0 then null else to_timestamp((%(t0)s + i + 1) / 1000.0) end,
    case when i %% %(every)s = 0 then null else 1 end,
    case when i %% %(every)s = 0 then null else '[]' end,
    case when i %% %(every)s = 0 then null else to_timestamp((%(t0)s + i) / 1000.0) end,
    case when i %% %(every)s = 0 then null else to_timestamp((%(t0)s + i) / 1000.0) end,
    case when i %% %(every)s = 0 then 0 else 1 end
from generate_series(1, %(per)s) as i, generate_series(0, %(sessions)s - 1) as s
"""

_SQLITE_LOAD = """
insert into a2_events (
    session_id, idx, event_type, payload, event_id, created_at, lane_ready,
    processed_at, processed_by_attempt, returned_event_ids, first_claimed_at,
    last_claimed_at, attempt_count)
with recursive
    s(n) as (select 0 union all select n + 1 from s where n < :sessions - 1),
    k(i) as (select 1 union all select i + 1 from k where i < :per)
select
    :prefix || printf('%05d', n),
    i,
    'filler',
    '{"n":' || i || ',"text":"some filler text"}',
    lower(hex(randomblob(16))),
    :t0 + i,
    i % :every = 0,
    case when i % :every = 0 then null else :t0 + i + 1 end,
    case when i % :every = 0 then null else 1 end,
    case when i % :every = 0 then null else '[]' end,
    case when i % :every = 0 then null else :t0 + i end,
    case when i % :every = 0 then null else :t0 + i end,
    case when i % :every = 0 then 0 else 1 end
from k, s
"""


def load_events(
    conn: Any,
    engine: str,
    *,
    prefix: str,
    sessions: int,
    per_session: int,
    unprocessed_every: int = 10,
) -> int:
    """Insert ``sessions`` x ``per_session`` events as a2sql writes them, in one statement.

    Sessions are ``prefix + '00000'`` …; events are interleaved across sessions
    in insertion order (as time would interleave them); every
    ``unprocessed_every``-th index of a session is left unprocessed and
    unclaimed, the others were claimed and completed once.
    """
    params = {
        "prefix": prefix,
        "sessions": sessions,
        "per": per_session,
        "every": unprocessed_every,
        "t0": FILLER_T0_MS,
    }
    if engine == "postgres":
        conn.execute(_PG_LOAD, params)
    else:
        conn.execute(_SQLITE_LOAD, params)
    return sessions * per_session


def load_snapshot(conn: Any, engine: str, session_id: str, reducer: str, index: int) -> None:
    """A snapshot row as a2sql's put_snapshot writes it."""
    if engine == "postgres":
        conn.execute(
            "insert into a2_snapshots values (%s, %s, %s, %s::json, %s)",
            (session_id, reducer, index, '{"count":0}', datetime.now(UTC)),
        )
    else:
        conn.execute(
            "insert into a2_snapshots values (?, ?, ?, ?, ?)",
            (session_id, reducer, index, '{"count":0}', FILLER_T0_MS),
        )


def analyze(conn: Any, engine: str) -> None:
    """Planner statistics on PostgreSQL (what autovacuum would soon gather); nothing on SQLite.

    SQLite is left without ``sqlite_stat1``, as a2sql's databases are.
    """
    if engine == "postgres":
        conn.execute("analyze a2_events")
        conn.execute("analyze a2_snapshots")
