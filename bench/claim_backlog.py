"""A limited claim in a backlog the planner's statistics never saw, at several sizes.

    python -m bench.claim_backlog [--engine sqlite|postgres|both]
        [--backlogs 1000,5000,15000,20000] [--ops 50] [--json]

For each engine and each backlog N, on a fresh table (SQLite: a new file;
PostgreSQL: ``A2SQL_BENCH_POSTGRES_URL`` or
``postgresql://postgres@127.0.0.1/a2sql_bench``, tables truncated, autovacuum
off on a2_events for the run and reset after it):

- 20,000 events over 200 sessions, one in a hundred pending, the rest
  completed, then ``ANALYZE`` (PostgreSQL; SQLite keeps no statistics): the
  statistics of a table where nearly everything is processed;
- N pending events appended to one session in one statement, and no
  ``ANALYZE`` after: a burst into one session before autovacuum's next look;
- timed, ``--ops`` times each (after 5 untimed): ``claim_available(limit=16)``
  on that session, and ``claim_next(limit=16)`` under its prefix; the 16 events
  are released after each (not timed), so every op claims the same 16 again.

Reported per N: p50 and mean ms of each call, and on PostgreSQL the planner's
row estimate for the session's dispatchable events against the N there are,
and ``commit_ms`` (a one-row write transaction, bench.databases), the floor of
each call. Run it on two checkouts to compare before and after a change: a
claim whose cost follows its limit stays flat as N grows. With autovacuum off,
each op leaves dead versions of the 16 rows it claimed and released, which
later ops step over: figures creep up with ``--ops``, alike at every N.
Figures are from one run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from typing import Any

import a2sql
from a2sql import ClaimRef, Store
from bench import databases
from bench.workloads import check

SESSION = "burst/0"
PREFIX = "burst/"
LIMIT = 16
TTL_MS = 60_000
HOLDER = "bench-claimer"
WARM_UP = 5
SESSIONS = 200
PER_SESSION = 100
PENDING_EVERY = 100

_ESTIMATE = """
explain (format json) select idx from a2_events
where session_id = %s and lane_ready and processed_at is null and failed_at is null
"""


def _load(target: databases.Target, backlog: int) -> None:
    databases.truncate(target)
    postgres = target.engine == "postgres"
    with databases.connect(target) as conn:
        if postgres:
            conn.execute("alter table a2_events set (autovacuum_enabled = off)")
        databases.load_events(
            conn,
            target.engine,
            prefix="s/",
            sessions=SESSIONS,
            per_session=PER_SESSION,
            unprocessed_every=PENDING_EVERY,
        )
        conn.commit()
        databases.analyze(conn, target.engine)
        conn.commit()
        params = {"sid": SESSION, "events": backlog, "t0": databases.FILLER_T0_MS}
        conn.execute(databases.BURST[target.engine], params)
        conn.commit()


def _estimate(target: databases.Target) -> float | None:
    """The planner's rows for the session's dispatchable events (PostgreSQL)."""
    if target.engine != "postgres":
        return None
    with databases.connect(target) as conn:
        [(plan,)] = conn.execute(_ESTIMATE, (SESSION,)).fetchall()
        conn.rollback()
    return float(plan[0]["Plan"]["Plan Rows"])


def _released(store: Store, claimed: list[Any]) -> None:
    check(
        [e.index for e in claimed] == list(range(1, LIMIT + 1)),
        f"claimed {[e.index for e in claimed]}, expected the lowest {LIMIT}",
    )
    claims = [ClaimRef(e.index, e.attempt_count) for e in claimed]
    released = store.release_claims(SESSION, holder=HOLDER, claims=claims)
    check(len(released.released) == LIMIT, f"released {released.released}")


def _claim_available(store: Store) -> int:
    t0 = time.perf_counter_ns()
    got = store.claim_available(SESSION, holder=HOLDER, ttl_ms=TTL_MS, limit=LIMIT)
    elapsed = time.perf_counter_ns() - t0
    check(got.outcome == "claimed", f"claim_available gave {got.outcome}")
    _released(store, got.events)
    return elapsed


def _claim_next(store: Store) -> int:
    t0 = time.perf_counter_ns()
    got = store.claim_next(holder=HOLDER, ttl_ms=TTL_MS, limit=LIMIT, prefix=PREFIX)
    elapsed = time.perf_counter_ns() - t0
    check(got.session_id == SESSION, f"claim_next gave {got.outcome} in {got.session_id}")
    _released(store, got.events)
    return elapsed


def _times(store: Store, op: Any, ops: int) -> dict[str, float]:
    for _ in range(WARM_UP):
        op(store)
    took = sorted(op(store) for _ in range(ops))
    return {
        "p50_ms": round(statistics.median(took) / 1e6, 3),
        "mean_ms": round(statistics.fmean(took) / 1e6, 3),
    }


def measure(engine: str, backlogs: list[int], ops: int) -> dict[str, Any]:
    target = databases.prepare(engine)
    cases = []
    try:
        for backlog in backlogs:
            _load(target, backlog)
            with a2sql.create_store(target.a2sql_url) as store:
                cases.append(
                    {
                        "backlog": backlog,
                        "planner_rows": _estimate(target),
                        "claim_available": _times(store, _claim_available, ops),
                        "claim_next": _times(store, _claim_next, ops),
                    }
                )
    finally:
        if engine == "postgres":
            with databases.connect(target) as conn:
                conn.execute("alter table a2_events reset (autovacuum_enabled)")
                conn.commit()
        databases.truncate(target)
        if target.folder is not None:
            shutil.rmtree(target.folder, ignore_errors=True)
    commit_ms = databases.commit_latency_ms(target.a2sql_url) if engine == "postgres" else None
    return {
        "workload": "claim_backlog",
        "engine": engine,
        "ops": ops,
        "commit_ms": commit_ms,
        "cases": cases,
    }


def _print(result: dict[str, Any]) -> None:
    commit = "" if result["commit_ms"] is None else f", commit_ms {result['commit_ms']}"
    print(f"\n{result['engine']}: limit={LIMIT}, {result['ops']} ops per call and backlog{commit}")
    header = ("backlog", "planner rows", "claim_available p50/mean", "claim_next p50/mean")
    print("{:>8} {:>13} {:>25} {:>21}".format(*header))
    for case in result["cases"]:
        available, following = case["claim_available"], case["claim_next"]
        rows = "-" if case["planner_rows"] is None else f"{case['planner_rows']:.0f}"
        print(
            f"{case['backlog']:>8} {rows:>13}"
            f" {available['p50_ms']:>12.3f} / {available['mean_ms']:<10.3f}"
            f" {following['p50_ms']:>9.3f} / {following['mean_ms']:<9.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--backlogs", default="1000,5000,15000,20000")
    parser.add_argument("--ops", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    backlogs = [int(n) for n in args.backlogs.split(",")]
    engines = ("sqlite", "postgres") if args.engine == "both" else (args.engine,)
    for engine in engines:
        result = measure(engine, backlogs, args.ops)
        if args.json:
            print(json.dumps(result))
        else:
            _print(result)


if __name__ == "__main__":
    main()
