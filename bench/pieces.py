"""pieces: what each execution-layer piece is worth on PostgreSQL, at round-trip times.

For each RTT (``--rtts``, ms added by the delay proxy; ``direct``: no proxy)
and each workload, ``python -m bench`` runs with every piece on, then with
one piece off at a time (``--without``; ``prepared``: ``--unprepared``), in
turn, ``--repeat`` times; the table gives a2sql's ops/s (median of the
repeats) and each variant against the one with every piece on, with round
trips per op. Workloads: ``cycle``
and ``append`` on ``Store``; ``tasks``: its 8 ``AsyncStore`` tasks' cycles/s.

    python -m bench.pieces [--rtts direct,0.25,1] [--repeat 3] [--rounds 3]
        [--workloads cycle,append,tasks] [--pieces kept,raw]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

# Workload, API, ops per round, the pieces it can go without.
RUNS: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    ("cycle", "sync", 200, ("one-statement", "raw", "kept", "prepared")),
    ("append", "sync", 400, ("one-statement", "raw", "kept", "prepared")),
    # tasks runs both APIs itself: the figure is its 8 AsyncStore tasks'.
    ("tasks", "sync", 400, ("on-loop", "one-statement")),
)


def _run(workload: str, api: str, ops: int, rounds: int, rtt: str, off: str | None) -> Any:
    command = [sys.executable, "-m", "bench", "--engine", "postgres", "--workload", workload]
    command += ["--api", api, "--ops", str(ops), "--rounds", str(rounds), "--json"]
    if rtt != "direct":
        command += ["--rtt", rtt]
    if off == "prepared":  # statements prepared on the server: bench's own switch
        command += ["--unprepared"]
    elif off is not None:
        command += ["--without", off]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _figures(result: Any) -> tuple[float, float | None]:
    """ops/s and round trips per op of a2sql's side (tasks: cycles/s of its 8 tasks)."""
    for case in result["cases"]:
        if case["case"] == "async_8":
            return float(case["cycles_per_s"]), None
    side = result["cases"][0]["a2sql"]
    return float(side["ops_per_s"]), side.get("round_trips_per_op")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rtts", default="direct,0.25,1")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workloads", default="cycle,append,tasks", help="which of cycle, append, tasks"
    )
    parser.add_argument(
        "--pieces", default=None, help="which pieces to turn off (default: each a workload has)"
    )
    args = parser.parse_args()
    chosen = None if args.pieces is None else set(args.pieces.split(","))
    print("| RTT | workload | every piece on | " + "piece off: ops/s, against all on |")
    print("|---|---|---|---|")
    for rtt in args.rtts.split(","):
        for workload, api, ops, pieces in RUNS:
            if workload not in args.workloads.split(","):
                continue
            pieces = tuple(p for p in pieces if chosen is None or p in chosen)
            variants: list[str | None] = [None, *pieces]
            samples: dict[str | None, list[float]] = {v: [] for v in variants}
            trips: dict[str | None, float | None] = {}
            for _ in range(args.repeat):
                for off in variants:  # in turn, so that drift touches all alike
                    ops_s, round_trips = _figures(_run(workload, api, ops, args.rounds, rtt, off))
                    samples[off].append(ops_s)
                    trips[off] = round_trips
            base = statistics.median(samples[None])
            cells = []
            for off in pieces:
                value = statistics.median(samples[off])
                cells.append(f"without {off}: {value:,.0f} ({value / base:.2f}; rt {trips[off]})")
            print(
                f"| {rtt} | {workload} ({api}) | {base:,.0f} (rt {trips[None]}) | "
                + "; ".join(cells)
                + " |",
                flush=True,
            )


if __name__ == "__main__":
    main()
