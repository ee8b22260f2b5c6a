"""What the operator's bulk operations cost: prune and copy, per engine.

    python -m bench.operations [--sessions 10000] [--events 5] [--json]

For each engine (SQLite, a fresh file; PostgreSQL, ``A2SQL_BENCH_POSTGRES_URL``
or ``postgresql://postgres@127.0.0.1/a2sql_bench``, tables truncated):

- ``prune``: ``--sessions`` settled sessions of ``--events`` events each,
  every tenth with a snapshot, appended a week back (one transaction), then
  ``Store.prune`` called until it returns 0 sessions: sessions deleted per
  second, each in a transaction of its own.
- ``copy``: the same sessions written again, then ``a2sql copy``'s work
  (``a2sql.api.copying``) from that database to a fresh SQLite file: sessions
  and events copied per second, each session read in one transaction and
  written in one.

Figures are from one run; run it twice before trusting a difference.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import a2sql
from a2sql import NewEvent, Store
from a2sql.api import copying as transfer
from a2sql.testing import FakeClock
from bench.databases import prepare


def fill(store: Store, sessions: int, events: int) -> None:
    with store.begin() as connection:
        view = store.using(connection)
        for n in range(sessions):
            sid = f"s/{n:06}"
            view.append(sid, [NewEvent("e", {"n": n, "k": k}, settled=True) for k in range(events)])
            if n % 10 == 0:
                view.put_snapshot(sid, "r", events, {"n": n})


def measure(engine: str, sessions: int, events: int) -> dict[str, object]:
    target = prepare(engine)
    now = datetime.now(UTC)
    clock = FakeClock(now - timedelta(days=7))
    with a2sql.create_store(target.a2sql_url, clock=clock) as store:
        fill(store, sessions, events)
        clock.set(now)
        started = time.perf_counter()
        pruned = 0
        while (step := store.prune(settled_before=now - timedelta(days=1))).sessions:
            pruned += step.sessions
        prune_s = time.perf_counter() - started
        assert pruned == sessions, pruned

        fill(store, sessions, events)
        with tempfile.TemporaryDirectory() as folder:
            destination_url = f"sqlite:///{Path(folder) / 'copy.db'}"
            with a2sql.create_store(destination_url, migrate=True) as destination:
                started = time.perf_counter()
                ids = [s.session_id for s in transfer.source_sessions(store, "")]
                copied, copied_events, _ = transfer.copy_sessions(store, destination, ids)
                copy_s = time.perf_counter() - started
                assert copied == sessions, copied
    return {
        "engine": engine,
        "sessions": sessions,
        "events_per_session": events,
        "prune_sessions_per_s": round(sessions / prune_s),
        "copy_sessions_per_s": round(copied / copy_s),
        "copy_events_per_s": round(copied_events / copy_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--engine", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    engines = ["sqlite", "postgres"] if args.engine == "both" else [args.engine]
    for engine in engines:
        result = measure(engine, args.sessions, args.events)
        if args.json:
            print(json.dumps(result))
        else:
            print(
                f"{engine:8}  prune {result['prune_sessions_per_s']:>7} sessions/s   "
                f"copy to SQLite {result['copy_sessions_per_s']:>6} sessions/s, "
                f"{result['copy_events_per_s']:>7} events/s"
            )


if __name__ == "__main__":
    main()
