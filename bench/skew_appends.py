"""Appends to one PostgreSQL session from two processes whose clocks are MS apart.

``python -m bench.skew_appends [--skew MS] [--appends N]``: each process opens a
store with writer ``i``'s clock (bench/skew.py) and appends N events, one call
each, to the same session; its round trips are counted from libpq's trace
(bench/round_trips.py). Prints the round trips per append of each process and
how many adjacent events of the session have a ``created_at`` earlier than the
event before them (docs/contract.md: times never go backwards in a session).
Database: ``A2SQL_BENCH_POSTGRES_URL`` (bench/databases.py).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import uuid

import psycopg

import a2sql
from a2sql import NewEvent
from a2sql.execution.engines import resolve_url
from bench.databases import DEFAULT_POSTGRES_URL
from bench.round_trips import Counter
from bench.skew import clock_for, count_backwards


def _appender(job: tuple[str, int, str, int, float]) -> float:
    """One process's appends: its round trips per append."""
    url, writer, session, appends, skew_ms = job
    counter = Counter()
    engine = counter.engine(url)
    try:
        clock = clock_for(writer, skew_ms)
        with a2sql.create_store(engine, migrate=False, clock=clock) as store:
            store.append(session, [NewEvent("warm", writer)])  # the connection's first questions
            before = counter.round_trips
            for n in range(appends):
                store.append(session, [NewEvent("t", n)])
            return (counter.round_trips - before) / appends
    finally:
        engine.dispose()
        counter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skew", type=float, default=20.0, help="ms between the two clocks")
    parser.add_argument("--appends", type=int, default=600, help="appends per process")
    arguments = parser.parse_args()
    url = os.environ.get("A2SQL_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    a2sql.create_store(url, migrate=True).close()
    session = f"skew-appends-{uuid.uuid4().hex[:12]}"
    jobs = [(url, writer, session, arguments.appends, arguments.skew) for writer in (0, 1)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        per_append = pool.map(_appender, jobs)
    dsn = resolve_url(url).set(drivername="postgresql")
    with psycopg.connect(dsn.render_as_string(hide_password=False)) as connection:
        backwards = count_backwards(connection, session)
        connection.execute("delete from a2_events where session_id = %s", (session,))
    shown = ", ".join(f"{trips:.3f}" for trips in per_append)
    print(
        f"--skew {arguments.skew:g}: round trips per append {shown}; "
        f"adjacent events whose created_at goes back: {backwards}"
    )


if __name__ == "__main__":
    main()
