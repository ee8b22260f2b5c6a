"""``python -m bench --engine sqlite|postgres --workload NAME [--ops N] [--rounds R] [--json]
[--traced] [--rtt MS] [--without PIECE] [--skew MS]``.

Workloads: append, cycle, batch, contention, scale, memory, peers, dispatch, claim_next,
or all.
Prints a table per workload, or with ``--json`` one JSON object per workload
(one line each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import platform
import sqlite3
import sys
from collections.abc import Callable, Iterator
from typing import Any

from bench.impl import PIECES
from bench.workloads import Params

WORKLOADS = (
    "append",
    "cycle",
    "idle",
    "batch",
    "contention",
    "scale",
    "memory",
    "peers",
    "dispatch",
    "claim_next",
    "tasks",
)


# Workloads that choose their API themselves (the worker, the peers' own
# loops, memory per mode, tasks both): --api async leaves them out.
OWN_API = ("memory", "peers", "dispatch", "tasks")


def _run(name: str, params: Params, *, in_loop: bool) -> dict[str, Any]:
    """Run a workload; ``in_loop``: in a greenlet inside a running event loop, where
    bench.impl's AsyncStore calls are awaited."""
    if not in_loop:
        return _runner(name)(params)
    from sqlalchemy.util import greenlet_spawn

    return asyncio.run(greenlet_spawn(_runner(name), params))


def _runner(name: str) -> Callable[[Params], dict[str, Any]]:
    if name == "contention":
        from bench.contention import contention

        return contention
    if name == "memory":
        from bench.memory import memory

        return memory
    if name == "peers":
        from bench.peers import peers

        return peers
    if name == "dispatch":
        from bench.dispatch import dispatch

        return dispatch
    if name == "tasks":
        from bench.tasks import tasks

        return tasks
    if name == "claim_next":
        from bench.dispatch_scale import claim_next

        return claim_next
    from bench import workloads

    runner: Callable[[Params], dict[str, Any]] = getattr(workloads, name)
    return runner


def environment(engine: str) -> dict[str, Any]:
    """Machine and versions, for the record."""
    import os

    import sqlalchemy

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlalchemy": sqlalchemy.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    if engine == "sqlite":
        info["sqlite"] = sqlite3.sqlite_version
    else:
        import psycopg

        from bench.databases import ensure_postgres_database, postgres_url

        info["psycopg"] = psycopg.__version__
        ensure_postgres_database(postgres_url())
        with psycopg.connect(postgres_url()) as conn:
            row = conn.execute("show server_version").fetchone()
            info["postgresql"] = row[0] if row else "?"
    return info


def _commit_probe(engine: str) -> float | None:
    """PostgreSQL's commit latency right now (None on SQLite)."""
    if engine != "postgres":
        return None
    from bench.databases import commit_latency_ms, postgres_url

    return commit_latency_ms(postgres_url())


# --- the table --------------------------------------------------------------------------


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def _trips(summary: dict[str, Any]) -> str:
    trips = summary.get("round_trips_per_op")
    return f"{trips:>6.1f}" if trips is not None else f"{'-':>6}"


def _case_line(case: dict[str, Any]) -> str:
    a2, base = case["a2sql"], case["baseline"]
    items = ""
    if a2.get("items_per_s", a2["ops_per_s"]) != a2["ops_per_s"]:
        items = f"  items/s {_fmt_rate(a2['items_per_s'])} vs {_fmt_rate(base['items_per_s'])}"
    line = (
        f"  {case['case']:<28} {_fmt_rate(a2['ops_per_s']):>9} {_fmt_rate(base['ops_per_s']):>9}"
        f" {case['ratio']:>6.2f}  {a2['p50_ms']:>7.3f} {a2['p99_ms']:>7.3f}"
        f"  {base['p50_ms']:>7.3f} {base['p99_ms']:>7.3f}"
        f"  {a2['statements_per_op']:>6.1f} {base['statements_per_op']:>6.1f}"
        f" {_trips(a2)} {_trips(base)}{items}"
    )
    if "floor" in case:
        floor = case["floor"]
        line += (
            f"\n  {'  against the floor':<28} {'':>9} {_fmt_rate(floor['ops_per_s']):>9}"
            f" {case['floor_ratio']:>6.2f}  {'':>7} {'':>7}"
            f"  {floor['p50_ms']:>7.3f} {floor['p99_ms']:>7.3f}"
            f"  {'':>6} {floor['statements_per_op']:>6.1f} {'':>6} {_trips(floor)}"
        )
    return line


HEADER = (
    f"  {'case':<28} {'a2sql/s':>9} {'base/s':>9} {'ratio':>6}  {'a2 p50':>7} {'a2 p99':>7}"
    f"  {'bl p50':>7} {'bl p99':>7}  {'a2 st':>6} {'bl st':>6} {'a2 rt':>6} {'bl rt':>6}"
)


def print_table(result: dict[str, Any]) -> None:
    """A human-readable rendering of one workload's result."""
    params = " ".join(
        f"{k}={result[k]}" for k in ("ops", "rounds", "processes") if result.get(k) is not None
    )
    print(f"== {result['workload']} on {result['engine']}: {params} ({result['seconds']} s)")
    for note in result.get("notes", []):
        print(f"  note: {note}")
    if "rtt_ms" in result:
        trip = result["select_1_ms"]
        print(
            f"  note: rtt {result['rtt_ms']} ms added by the delay proxy to every round trip;"
            f" select 1 (median ms): {trip['direct']} direct, {trip['proxied']} through it"
        )
    comparisons = [c for c in result["cases"] if "a2sql" in c and "baseline" in c]
    if comparisons:
        print(HEADER)
        print("  (ops/s: median of rounds; latency in ms per op; st: statements per op,")
        print("   BEGIN and COMMIT included; rt: round trips per op, PostgreSQL;")
        print("   ratio: a2sql/baseline ops/s; 'against the floor': the one-round-trip-")
        print("   per-transaction floor in the baseline's columns, ratio a2sql/floor)")
        for case in comparisons:
            print(_case_line(case))
    for case in result["cases"]:
        if case not in comparisons:
            print("  " + "  ".join(f"{k}={v}" for k, v in case.items()))
    if "commit_ms" in result:
        probe = result["commit_ms"]
        print(
            f"  commit latency (1-row write txn, median ms): {probe['before']} before,"
            f" {probe['after']} after"
        )
    keys = ("sizes", "large_over_small", "scaling", "backwards", "peers", "ratios", "checks")
    for key in keys:
        if key in result:
            value = result[key]
            rows = value if isinstance(value, list) else [value]
            print(f"  {key}:")
            for row in rows:
                print("    " + json.dumps(row))
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--engine", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--workload", choices=(*WORKLOADS, "all"), required=True)
    parser.add_argument("--ops", type=int, help="operations per round (default: per workload)")
    parser.add_argument("--rounds", type=int, help="measured rounds (default: per workload)")
    parser.add_argument(
        "--large",
        type=int,
        default=1_000_000,
        help="scale and claim_next: events in the large table",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per workload")
    parser.add_argument(
        "--traced",
        action="store_true",
        help="instrument a2sql's engine with OpenTelemetry (dev extra) to measure its cost",
    )
    parser.add_argument(
        "--unprepared",
        action="store_true",
        help="PostgreSQL: a2sql and the baseline prepare no statement on the server (as "
        "behind a transaction pooler); against a run without it, what preparation is worth",
    )
    parser.add_argument(
        "--api",
        choices=("sync", "async"),
        default="sync",
        help="a2sql's side through Store (sync) or AsyncStore (async): in-process "
        "workloads and contention; memory, peers and dispatch run their own",
    )
    parser.add_argument(
        "--rtt",
        type=float,
        metavar="MS",
        help="PostgreSQL: every connection of the workloads goes through a proxy adding MS "
        "milliseconds to each round trip (bench/delay_proxy.py); 0: through the proxy, "
        "nothing added",
    )
    parser.add_argument(
        "--without",
        action="append",
        choices=PIECES,
        default=[],
        metavar="PIECE",
        help="an execution-layer piece turned off, to judge what it is worth (repeatable): "
        + ", ".join(PIECES)
        + " (bench/impl.py)",
    )
    parser.add_argument(
        "--skew",
        type=float,
        metavar="MS",
        help="contention: each process's a2sql store gets a clock of its own, 0 or -MS ms "
        "from the system's by turns (bench/skew.py); the baseline keeps the system clock",
    )
    args = parser.parse_args(argv)
    if args.skew is not None and args.skew < 0:
        parser.error("--skew must be 0 or more")
    if args.rtt is not None and args.engine != "postgres":
        parser.error("--rtt needs --engine postgres (it delays a TCP connection to a server)")
    if args.rtt is not None and args.rtt < 0:
        parser.error("--rtt must be 0 or more")
    if args.api == "async":
        from bench import impl

        impl.API = "async"
    if args.unprepared:
        from bench import impl

        impl.UNPREPARED = True
    if args.traced:
        from bench import impl

        impl.TRACED = True
    if args.without:
        from bench import impl

        impl.without_pieces(frozenset(args.without))
    logging.basicConfig(level=logging.WARNING)

    params = Params(
        engine=args.engine, ops=args.ops, rounds=args.rounds, large=args.large, skew_ms=args.skew
    )
    names = WORKLOADS if args.workload == "all" else (args.workload,)
    env = environment(args.engine)
    if not args.json:
        print("environment: " + json.dumps(env))
    with contextlib.ExitStack() as stack:
        rtt = None
        if args.rtt is not None:
            rtt = stack.enter_context(_delayed(args.rtt))
        return _run_all(args, parser, params, names, env, rtt)


@contextlib.contextmanager
def _delayed(rtt_ms: float) -> Iterator[dict[str, Any]]:
    """The workloads' connections through the delay proxy; what a round trip takes."""
    from bench import databases
    from bench.delay_proxy import delayed

    direct = databases.direct_postgres_url()
    with delayed(direct, rtt_ms) as proxied:
        databases.route_through(proxied)
        try:
            yield {
                "rtt_ms": rtt_ms,
                "select_1_ms": {
                    "direct": databases.select_one_ms(direct),
                    "proxied": databases.select_one_ms(proxied),
                },
            }
        finally:
            databases.route_through(None)


def _run_all(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    params: Params,
    names: tuple[str, ...],
    env: dict[str, Any],
    rtt: dict[str, Any] | None,
) -> int:
    failed = False
    for name in names:
        if args.api == "async" and name in OWN_API:
            if not args.json:
                print(f"== {name}: skipped (--api async: it runs its own)\n")
            continue
        if name == "peers" and args.engine != "postgres":
            if args.workload == "peers":
                parser.error("peers runs on PostgreSQL only (--engine postgres)")
            if not args.json:
                print("== peers: skipped (PostgreSQL only)\n")
            continue
        probe_before = _commit_probe(args.engine)
        try:
            result = _run(name, params, in_loop=args.api == "async" and name != "contention")
            result["api"] = args.api
            if probe_before is not None:
                result["commit_ms"] = {"before": probe_before, "after": _commit_probe(args.engine)}
            if rtt is not None:
                result.update(rtt)
        except Exception as error:  # report and go on with the next workload
            failed = True
            result = {
                "workload": name,
                "engine": args.engine,
                "error": f"{type(error).__name__}: {error}",
            }
            if rtt is not None:
                result.update(rtt)
            if not args.json:
                print(f"== {name} on {args.engine}: FAILED: {result['error']}\n")
                continue
        result["environment"] = env
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print_table(result)
            sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
