"""claim_next and claim_available past many held events: scheduled runs and waits.

``python -m bench.held_events --engine sqlite|postgres [--scheduled N] [--waiting N]
[--cycles N] [--rounds R]``: times a cycle (append one event to a ready session,
claim it, complete it) through ``claim_next`` and through ``claim_available``, on an
empty table, then with N events scheduled for tomorrow and N waiting for a signal
without a timeout in other sessions, older than the work (so that a walk of the
claimable events in age order would meet them first); rounds alternate between
the two tables' states by moving the held events out of and back into the table.
Prints µs per cycle for each and the ratio held/empty (SPEC §7: within 1.2).
SQLite: a file in a temporary folder; PostgreSQL: ``A2SQL_BENCH_POSTGRES_URL``
(bench/databases.py), ANALYZEd after each move.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import text

import a2sql
from a2sql import NewEvent, Store
from bench.databases import DEFAULT_POSTGRES_URL

READY = "held-bench/ready"
# Every session this benchmark writes: ids from 'held-bench/' up to, not including, 'held-bench0'.
DELETE_BENCH_ROWS = text(
    "delete from a2_events where session_id >= 'held-bench/' and session_id < 'held-bench0'"
)


def _cycle_next(store: Store) -> None:
    store.append(READY, [NewEvent("job")])
    found = store.claim_next(holder="w", ttl_ms=30_000)
    assert found.outcome == "claimed" and found.session_id == READY, found
    [event] = found.events
    store.complete_attempt(READY, index=event.index, attempt=event.attempt_count, events=[])


def _cycle_available(store: Store) -> None:
    store.append(READY, [NewEvent("job")])
    [event] = store.claim_available(READY, holder="w", ttl_ms=30_000).events
    store.complete_attempt(READY, index=event.index, attempt=event.attempt_count, events=[])


def _timed(store: Store, cycle: Callable[[Store], None], cycles: int) -> float:
    start = time.perf_counter()
    for _ in range(cycles):
        cycle(store)
    return (time.perf_counter() - start) / cycles * 1e6


def _hold(store: Store, scheduled: int, waiting: int) -> None:
    """Append the held events, in batches of 1,000 per session, then make them older
    than anything claimable."""
    later = store.clock.now() + timedelta(days=1)
    for start in range(0, scheduled, 1000):
        count = min(1000, scheduled - start)
        batch = [NewEvent("later", available_at=later) for _ in range(count)]
        store.append(f"held-bench/scheduled/{start}", batch)
    for start in range(0, waiting, 1000):
        count = min(1000, waiting - start)
        store.append(f"held-bench/waiting/{start}", [NewEvent("w", wake_on="go")] * count)
    postgres = store.engine.dialect.name == "postgresql"
    older = "created_at - interval '30 days'" if postgres else "created_at - 2592000000"
    with store.engine.begin() as connection:
        connection.exec_driver_sql(
            f"update a2_events set created_at = {older} where session_id <> '{READY}'"
        )


def _set_aside(store: Store, back: bool) -> None:
    """Move the held events out of a2_events (``back``: into it again), and ANALYZE."""
    postgres = store.engine.dialect.name == "postgresql"
    with store.engine.begin() as connection:
        if back:
            connection.exec_driver_sql("insert into a2_events select * from held_bench_aside")
            connection.exec_driver_sql("delete from held_bench_aside")
        else:
            connection.exec_driver_sql(
                "insert into held_bench_aside select * from a2_events"
                f" where session_id <> '{READY}'"
            )
            connection.exec_driver_sql(f"delete from a2_events where session_id <> '{READY}'")
        connection.exec_driver_sql("analyze a2_events" if postgres else "analyze")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--scheduled", type=int, default=100_000)
    parser.add_argument("--waiting", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=500, help="cycles per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    if arguments.engine == "postgres":
        url = os.environ.get("A2SQL_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    else:
        url = f"sqlite:///{tempfile.mkdtemp(prefix='a2sql-held-')}/held.db"
    with a2sql.create_store(url, migrate=True) as store:
        with store.engine.begin() as connection:
            connection.execute(DELETE_BENCH_ROWS)
            connection.exec_driver_sql("drop table if exists held_bench_aside")
            connection.exec_driver_sql(
                "create table held_bench_aside as select * from a2_events where false"
                if store.engine.dialect.name == "postgresql"
                else "create table held_bench_aside as select * from a2_events where 0"
            )
        _hold(store, arguments.scheduled, arguments.waiting)
        figures: dict[str, dict[str, list[float]]] = {
            name: {"empty": [], "held": []} for name in ("claim_next", "claim_available")
        }
        try:
            for _ in range(arguments.rounds):
                for state in ("held", "empty"):
                    _set_aside(store, back=state == "held")
                    for name, cycle in (
                        ("claim_next", _cycle_next),
                        ("claim_available", _cycle_available),
                    ):
                        _timed(store, cycle, 20)  # warm
                        figures[name][state].append(_timed(store, cycle, arguments.cycles))
        finally:
            with store.engine.begin() as connection:
                connection.execute(DELETE_BENCH_ROWS)
                connection.exec_driver_sql("drop table if exists held_bench_aside")
        if store.engine.dialect.name == "postgresql":
            # The moves leave ~2 x 110,000 dead rows: vacuumed now, not left to slow the
            # next benchmark on this database.
            with store.engine.connect().execution_options(
                isolation_level="AUTOCOMMIT"
            ) as connection:
                connection.exec_driver_sql("vacuum analyze a2_events")
    result = {
        "engine": arguments.engine,
        "scheduled": arguments.scheduled,
        "waiting": arguments.waiting,
    }
    for name, states in figures.items():
        empty, held = statistics.median(states["empty"]), statistics.median(states["held"])
        result[name] = {
            "empty_us": round(empty, 1),
            "held_us": round(held, 1),
            "ratio": round(held / empty, 3),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
