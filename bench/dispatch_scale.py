"""claim_next at scale: one ``claim_next(limit=16)`` per op, behind 1,000 claims in flight.

Two tables, loaded set-based in a2sql's row format (as ``scale`` loads
its): 10,000 events over 100 sessions, then ``large`` (1,000,000) events
over ``large / 100`` (10,000) sessions: 100 events per session at both
sizes, interleaved across sessions as time would interleave them, every
third one unprocessed and never claimed (a third of the table is
claimable backlog at both sizes), the rest completed once.

Before the rounds another holder takes 1,000 claims (``claim_next(limit=1)``
1,000 times, one hour's lease): the oldest claimable events, as a worker
pool's would be, and they stay in flight throughout. One op is one
``claim_next(holder=..., ttl_ms=60_000, limit=16)``, timed alone; the 16
events it claimed are then released (``release_claims``, not timed), so
that the backlog and the claims in flight stay exactly as they were: the
same session is the oldest free one for every op, and every op claims the
same 16 events again (a new attempt each time).

Checked on every op: ``claimed``, in the session whose oldest free event
is oldest (read from the database before the rounds), its 16 lowest free
indexes, all released again. After each round, from the database: the
other holder's 1,000 claims still held, none left under the measured
holder. Reported: ops/s (median of rounds' ops over their summed
claim_next time), p50/p99, statements per op (over the warm-up), and
large/small of ops/s (target: at least 0.8).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from typing import Any

import a2sql
from a2sql import ClaimRef, Store
from bench import databases
from bench.impl import A2sqlImpl
from bench.measure import Stopwatch, percentile
from bench.workloads import Params, check, default

PREFIX = "c/"
PER_SESSION = 100
UNPROCESSED_EVERY = 3
SMALL = 10_000
IN_FLIGHT = 1_000
IN_FLIGHT_HOLDER = "bench-in-flight"
IN_FLIGHT_TTL_MS = 3_600_000
HOLDER = "bench-claimer"
TTL_MS = 60_000
LIMIT = 16
TARGET = 0.8
ROUND_WARMUP = 20
SMALL_DB_SUFFIX = "_claim_small"

EXPECTED = """
select session_id from a2_events
where lane_ready = {true} and processed_at is null and failed_at is null
    and claim_expires_at is null
order by created_at, session_id limit 1
"""

FREE_INDEXES = """
select idx from a2_events
where session_id = {param} and lane_ready = {true} and processed_at is null
    and failed_at is null and claim_expires_at is null
order by idx limit {limit}
"""

HELD = """
select claim_holder, count(*) from a2_events
where claim_holder is not null and processed_at is null
group by claim_holder
"""


def _sql(engine: str, text: str, **extra: Any) -> str:
    true, param = ("true", "%s") if engine == "postgres" else ("1", "?")
    return text.format(true=true, param=param, **extra)


def _load(target: databases.Target, total: int, store: Store) -> dict[str, Any]:
    """The table of ``total`` events, then the other holder's 1,000 claims."""
    watch = Stopwatch()
    databases.truncate(target)
    sessions = total // PER_SESSION
    with databases.connect(target) as conn:
        loaded = databases.load_events(
            conn,
            target.engine,
            prefix=PREFIX,
            sessions=sessions,
            per_session=PER_SESSION,
            unprocessed_every=UNPROCESSED_EVERY,
        )
        conn.commit()
        databases.analyze(conn, target.engine)
        conn.commit()
    load_seconds = watch.seconds()
    _settle(target)
    for _ in range(IN_FLIGHT):
        taken = store.claim_next(
            holder=IN_FLIGHT_HOLDER, ttl_ms=IN_FLIGHT_TTL_MS, limit=1, prefix=PREFIX
        )
        check(
            taken.outcome == "claimed" and len(taken.events) == 1,
            f"claim_next for the claims in flight gave {taken.outcome} ({len(taken.events)})",
        )
    with databases.connect(target) as conn:
        [(session,)] = conn.execute(_sql(target.engine, EXPECTED)).fetchall()
        free = [
            row[0]
            for row in conn.execute(
                _sql(target.engine, FREE_INDEXES, limit=LIMIT), (session,)
            ).fetchall()
        ]
        conn.rollback()
    check(len(free) == LIMIT, f"the oldest free session {session} has {len(free)} free events")
    return {
        "events": loaded,
        "sessions": sessions,
        "claimable": sessions * (PER_SESSION // UNPROCESSED_EVERY),
        "in_flight": IN_FLIGHT,
        "load_seconds": load_seconds,
        "setup_seconds": watch.seconds(),
        "expected_session": session,
        "expected_indexes": free,
    }


def _settle(target: databases.Target) -> None:
    """Write the load out to the database files and the disk, so that its writeback
    (hundreds of MB at 1M events) does not fall on the measured rounds."""
    if target.engine == "postgres":
        import psycopg

        with psycopg.connect(target.driver_dsn, autocommit=True) as conn:
            conn.execute("checkpoint")
    else:
        with databases.connect(target) as conn:
            conn.execute("pragma wal_checkpoint(truncate)")
    os.sync()


def _claim_op(store: Store, session: str, indexes: list[int], impl: A2sqlImpl | None = None) -> int:
    """One timed claim_next, checked, then its claims released (untimed): ns taken, or
    with ``impl`` (counting), the statements claim_next sent."""
    before = impl.statements if impl is not None else 0
    t0 = time.perf_counter_ns()
    got = store.claim_next(holder=HOLDER, ttl_ms=TTL_MS, limit=LIMIT, prefix=PREFIX)
    elapsed = time.perf_counter_ns() - t0
    if impl is not None:
        elapsed = impl.statements - before
    check(
        got.outcome == "claimed"
        and got.session_id == session
        and [e.index for e in got.events] == indexes,
        f"claim_next gave {got.outcome} in {got.session_id}"
        f" {[e.index for e in got.events]}, expected {session} {indexes}",
    )
    released = store.release_claims(
        session, holder=HOLDER, claims=[ClaimRef(e.index, e.attempt_count) for e in got.events]
    )
    check(
        sorted(released.released) == indexes,
        f"release_claims released {released.released} of {indexes}",
    )
    return elapsed


def _verify(target: databases.Target) -> None:
    with databases.connect(target) as conn:
        held = dict(conn.execute(HELD).fetchall())
        conn.rollback()
    check(
        held == {IN_FLIGHT_HOLDER: IN_FLIGHT},
        f"claims held after the round: {held}, expected {{{IN_FLIGHT_HOLDER!r}: {IN_FLIGHT}}}",
    )


class _Size:
    """One size: its own database, a store on it, the answer every op must get."""

    def __init__(self, name: str, target: databases.Target, total: int) -> None:
        self.name = name
        self.target = target
        self.impl = A2sqlImpl(target.a2sql_url)
        self.setup = _load(target, total, self.impl.store)
        self.session: str = self.setup["expected_session"]
        self.indexes: list[int] = self.setup["expected_indexes"]
        self.rates: list[float] = []
        self.latencies: list[int] = []
        self.statements = 0.0

    def op(self, counted: bool = False) -> int:
        return _claim_op(
            self.impl.store, self.session, self.indexes, self.impl if counted else None
        )

    def warm_up(self, ops: int) -> None:
        """Untimed ops; statements per claim_next counted over them."""
        self.impl.counting(True)
        self.statements = sum(self.op(counted=True) for _ in range(ops)) / ops
        self.impl.counting(False)

    def round(self, ops: int) -> None:
        for _ in range(ROUND_WARMUP):  # back from the other size's round: caches
            self.op()
        took = [self.op() for _ in range(ops)]
        self.rates.append(ops / (sum(took) / 1e9))
        self.latencies.extend(took)
        _verify(self.target)

    def case(self) -> dict[str, Any]:
        latencies = sorted(self.latencies)
        return {
            "case": f"claim_next@{self.name}",
            "events": self.setup["events"],
            "ops_per_s": round(statistics.median(self.rates), 1),
            "p50_ms": round(percentile(latencies, 50) / 1e6, 3),
            "p99_ms": round(percentile(latencies, 99) / 1e6, 3),
            "statements_per_op": round(self.statements, 2),
            "round_ops_per_s": [round(r, 1) for r in self.rates],
        }

    def close(self) -> None:
        self.impl.close()
        databases.truncate(self.target)


def _small_target(engine: str) -> tuple[databases.Target, bool]:
    """A second database for the small table: a SQLite file, or on PostgreSQL the bench
    database's name + ``_claim_small`` on the same server. True: it was created here."""
    if engine == "sqlite":
        return databases.prepare("sqlite"), False
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(databases.postgres_url())
    small = url.set(database=f"{url.database}{SMALL_DB_SUFFIX}")
    text = small.render_as_string(hide_password=False)
    admin = url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute(
            "select 1 from pg_database where datname = %s", (small.database,)
        ).fetchone()
    databases.ensure_postgres_database(text)
    target = databases.Target("postgres", text, text)
    with a2sql.create_store(text, migrate=True):
        pass
    databases.truncate(target)
    return target, found is None


def _drop_database(target: databases.Target) -> None:
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    url = make_url(target.a2sql_url)
    admin = url.set(database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        name = sql.Identifier(str(url.database))
        conn.execute(sql.SQL("drop database if exists {}").format(name))


def claim_next(p: Params) -> dict[str, Any]:
    """claim_next(limit=16) behind 1,000 claims in flight, at 10k and ``large`` events."""
    if p.large < SMALL:
        raise ValueError(f"claim_next: --large must be at least {SMALL}")
    ops = default(p.ops, sqlite=2000, postgres=500, engine=p.engine)
    rounds = p.rounds or 3
    watch = Stopwatch()
    small_target, created = _small_target(p.engine)
    large_target = databases.prepare(p.engine)
    sizes: list[_Size] = []
    try:
        sizes.append(_Size("small", small_target, SMALL))
        sizes.append(_Size("large", large_target, p.large))
        for size in sizes:
            size.warm_up(max(ops // 10, 10))
        for r in range(rounds):
            for size in sizes if r % 2 == 0 else reversed(sizes):
                size.round(ops)
        cases = [size.case() for size in sizes]
        setups = {
            size.name: {k: v for k, v in size.setup.items() if k != "expected_indexes"}
            for size in sizes
        }
    finally:
        for size in sizes:
            size.close()
        for target in (small_target, large_target):
            if target.folder is not None:
                shutil.rmtree(target.folder, ignore_errors=True)
        if created:
            _drop_database(small_target)
    small, large = cases
    ratio = round(large["ops_per_s"] / small["ops_per_s"], 3)
    return {
        "workload": "claim_next",
        "engine": p.engine,
        "ops": ops,
        "rounds": rounds,
        "seconds": watch.seconds(),
        "notes": [
            f"ops = claim_next calls per round (limit={LIMIT}, each claiming {LIMIT} events),"
            f" timed alone; each then released (untimed); {IN_FLIGHT} claims of another"
            " holder in flight throughout",
            "the sizes are two databases side by side, measured round by round in turn",
            "statements_per_op: claim_next's (BEGIN and COMMIT included), over the warm-up",
        ],
        "cases": cases,
        "sizes": setups,
        "large_over_small": {
            "ratio": ratio,
            "p50_ratio": round(small["p50_ms"] / large["p50_ms"], 3),
            "target": TARGET,
            "met": ratio >= TARGET,
        },
    }
