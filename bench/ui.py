"""The web UI's screens on a big database: how long each takes, and what each reads.

``python -m bench.ui --url URL [--repeat 20] [--plans] [--json]``: serves
``a2sql ui --url URL`` (a real server, in its own process, on a free port) and
times ``--repeat`` requests of every screen, in turns, over HTTP: the overview,
sessions (all, by prefix, by each state, a later page), a session's timeline, dead
letters, in flight, ``/metrics``. Prints the median, 95th percentile and the slowest
in ms per screen, against the 300 ms each should stay under. Fill the database
first with ``python -m bench.ui_data --url URL`` (100,000 sessions, 1,000,000
events).

``--plans``: also explains every statement each screen issues and prints each read
of ``a2_events`` in the plans (the same check as tests/ui/test_plans.py, but on the
real table sizes, with the planner's own choices): an index seek or a walk of a
partial index of events still to do, never a scan of the table.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any
from urllib.parse import quote

from sqlalchemy import event

import a2sql

# Each screen should answer within this many ms (issue 39).
TARGET_MS = 300.0

# The partial indexes (a2sql.sql.schema): each holds only events still to do (or, for
# a2_events_waiting, waits and signals), so a walk of one is bounded by that work.
PARTIAL = {
    "a2_events_unprocessed",
    "a2_events_lane_pending",
    "a2_events_dispatch_ready",
    "a2_events_claim_expiry",
    "a2_events_dispatch_free",
    "a2_events_dispatch_due",
    "a2_events_waiting",
}


def pages(store: a2sql.Store) -> dict[str, str]:
    """Every screen, by name, with sessions of the database at hand for the ones that
    need one: the longest-looking dead-letter session's timeline, a second page."""
    first = store.inspect.list_sessions(limit=50)
    dead = store.inspect.list_dead_letters(limit=1).events
    timeline = dead[0].session_id if dead else first.sessions[0].session_id
    prefix = first.sessions[0].session_id.split("/")[0] + "/"
    screens = {
        "overview": "/",
        "sessions": "/sessions",
        "sessions by prefix": f"/sessions?prefix={quote(prefix)}",
        "sessions, next page": f"/sessions?cursor={quote(first.cursor or '')}",
    }
    for state in ("dead_letters", "blocked", "claimed", "waiting"):
        screens[f"sessions: {state}"] = f"/sessions?state={state}"
    screens.update(
        {
            "timeline": f"/session?id={quote(timeline)}",
            "dead letters": "/dead-letters",
            "in flight": "/in-flight",
            "metrics": "/metrics",
        }
    )
    return screens


def statements_by_page(store: a2sql.Store, screens: dict[str, str]) -> dict[str, list[Any]]:
    """The SELECTs each screen issues, with their parameters (the UI in this process)."""
    from starlette.testclient import TestClient

    import a2sql.ui

    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        client = TestClient(a2sql.ui.app(store))
        found = {}
        for name, path in screens.items():
            start = len(seen)
            answer = client.get(path)
            if answer.status_code != 200:
                raise RuntimeError(f"{path}: {answer.status_code}")
            found[name] = seen[start:]
        return found
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def plan_reads(
    store: a2sql.Store, statement: str, parameters: Any, *, seqscan: bool = True
) -> list[tuple[str, bool]]:
    """How the plan of ``statement`` reads ``a2_events``: each read described, and
    whether it reads only what it seeks (``True``) or all of the table or of an index
    over every event (``False``). ``seqscan=False``: PostgreSQL plans with sequential
    scans off, so that what remains scanning has no index to go by."""
    if store.engine.dialect.name == "postgresql":
        return _postgres_reads(store, statement, parameters, seqscan)
    return _sqlite_reads(store, statement, parameters)


def _postgres_reads(
    store: a2sql.Store, statement: str, parameters: Any, seqscan: bool
) -> list[tuple[str, bool]]:
    with store.engine.connect() as connection:
        if not seqscan:
            connection.exec_driver_sql("SET enable_seqscan = off")
        [[plan]] = connection.exec_driver_sql(
            f"EXPLAIN (FORMAT JSON) {statement}", parameters
        ).fetchall()
    reads: list[tuple[str, bool]] = []

    def walk(node: dict[str, Any]) -> None:
        index = node.get("Index Name")
        if node.get("Relation Name") == "a2_events" or (index or "").startswith("a2_events"):
            kind = node["Node Type"]
            if kind == "Seq Scan":
                reads.append(("Seq Scan of a2_events", False))
            elif index is not None:
                cond = node.get("Index Cond")
                bounded = index in PARTIAL or cond is not None
                reads.append((f"{kind} of {index}" + (f" ({cond})" if cond else ""), bounded))
        for child in node.get("Plans", []):
            walk(child)

    walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    return reads


# "SCAN a2_events" (or an alias of it) reads every row, unless it walks a partial index.
_SQLITE_READ = re.compile(
    r"^(SCAN|SEARCH) (a2_events|behind)\b(?: USING (?:COVERING |INTEGER PRIMARY KEY )?INDEX (\w+))?"
)


def _sqlite_reads(store: a2sql.Store, statement: str, parameters: Any) -> list[tuple[str, bool]]:
    with store.engine.connect() as connection:
        details = [
            str(row[-1])
            for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
        ]
    reads = []
    for detail in details:
        found = _SQLITE_READ.match(detail)
        if found:
            reads.append((detail, found.group(1) == "SEARCH" or found.group(3) in PARTIAL))
    return reads


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as answer:
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{url}: {answer.status}")
    return (time.perf_counter() - start) * 1000


def time_screens(url: str, screens: dict[str, str], repeat: int) -> dict[str, list[float]]:
    """``repeat`` timings in ms of every screen, over HTTP from ``a2sql ui --url url``
    served in a process of its own (stopped at the end), the screens taken in turns."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "a2sql.cli", "ui", "--url", url, "--port", str(port)],
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _get(base + "/static/a2sql.css")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("a2sql ui did not start") from None
                time.sleep(0.2)
        for path in screens.values():  # warm: templates compiled, statements prepared
            _get(base + path)
        timings: dict[str, list[float]] = {name: [] for name in screens}
        for _ in range(repeat):
            for name, path in screens.items():
                timings[name].append(_get(base + path))
        return timings
    finally:
        server.terminate()
        server.wait(timeout=30)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--plans", action="store_true", help="print each screen's reads")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with a2sql.create_store(args.url) as store:
        screens = pages(store)
        totals = store.inspect.overview(bound=1_000_000)
        plans = {}
        if args.plans:
            plans = {
                name: [
                    read
                    for statement, parameters in statements
                    for read in plan_reads(store, statement, parameters)
                ]
                for name, statements in statements_by_page(store, screens).items()
            }
    timings = time_screens(args.url, screens, args.repeat)
    rows = {
        name: {
            "path": screens[name],
            "median_ms": statistics.median(values),
            "p95_ms": _p95(values),
            "max_ms": max(values),
        }
        for name, values in timings.items()
    }
    if args.json:
        print(json.dumps({"screens": rows, "plans": plans}, indent=2, default=str))
        return
    print(
        f"{args.url}: ready {totals.ready:,}, claimed {totals.claimed:,}, waiting "
        f"{totals.waiting:,}, scheduled {totals.scheduled:,}, dead letters "
        f"{totals.dead_letters:,}; {args.repeat} requests of each screen"
    )
    print(f"{'screen':24} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    for name, row in rows.items():
        flag = "" if row["p95_ms"] < TARGET_MS else f"  over {TARGET_MS:.0f} ms"
        print(f"{name:24} {row['median_ms']:10.1f} {row['p95_ms']:8.1f} {row['max_ms']:8.1f}{flag}")
    for name, reads in plans.items():
        print(f"\n{name}:")
        for described, bounded in reads:
            print(f"  {'ok  ' if bounded else 'SCAN'} {described}")


if __name__ == "__main__":
    main()
