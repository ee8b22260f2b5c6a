"""contention: several processes running the cycle at once, a2sql and baseline interleaved.

Configurations: 1, 4 and 8 processes on distinct sessions (one each), and 4
processes on one shared session. On the shared session a process appends
its event, then claims whatever is claimable (maybe another process's
event, maybe nothing) and completes what it claimed. Total ops/s is every
process's cycles over the wall time of the round (first start to last end,
all processes released by one barrier); scaling is ops/s over the 1-process
figure. After the runs the table is checked: every session gap-free, every
appended event completed exactly once by attempt 1, one child per event.

With ``--skew MS`` each process's a2sql store gets a clock of its own, spread
by bench/skew.py's rule (process i: 0 if even, -MS if odd); the baseline takes
no clock and keeps the system's. Every case reports, per side, the adjacent
event pairs of its sessions whose ``created_at`` goes backwards.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import re
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

from bench import databases
from bench import impl as impl_module
from bench.impl import Impl, open_impls
from bench.measure import Stopwatch, count_statements, percentile
from bench.skew import clock_for, count_backwards
from bench.workloads import CHILD_TYPE, Params, check, cycle_op, default, payload

CONFIGS = (("distinct", 1), ("distinct", 4), ("distinct", 8), ("shared", 4))
BARRIER_TIMEOUT_S = 300
WARMUP = 5


def _label(mode: str, procs: int) -> str:
    return f"{mode}{procs}"


def _session(impl: str, mode: str, procs: int, worker: int) -> str:
    base = f"{impl}/ct-{_label(mode, procs)}"
    return f"{base}-shared" if mode == "shared" else f"{base}-{worker}"


def shared_cycle_op(impl: Impl, session_id: str) -> Callable[[int], None]:
    """Append 1 to the shared session, claim what is claimable, complete each."""

    def op(i: int) -> None:
        impl.append(session_id, [payload(i)])
        for index, attempt in impl.claim(session_id):
            child = (f"{session_id}#{index}", CHILD_TYPE, {"ok": True}, True)
            check(
                impl.complete(session_id, index, attempt, [child]),
                f"{impl.name}: complete_attempt({index}, {attempt}) on the shared session "
                "was superseded",
            )

    return op


def _worker(*args: Any) -> None:
    """A process's entry: ``_work`` (with ``--api async``, in a greenlet inside an event
    loop of its own, where bench.impl's AsyncStore calls are awaited)."""
    if impl_module.API == "async":
        from sqlalchemy.util import greenlet_spawn

        asyncio.run(greenlet_spawn(_work, *args))
    else:
        _work(*args)


def _work(
    engine: str,
    a2sql_url: str,
    dsn: str,
    mode: str,
    procs: int,
    worker: int,
    ops: int,
    rounds: int,
    barrier: Any,
    results: Any,
    skew_ms: float | None = None,
) -> None:
    """One process: warm up on a private session, then the rounds on the measured one."""
    try:
        impls = open_impls(engine, a2sql_url, dsn, clock=clock_for(worker, skew_ms))
        measured: dict[str, Callable[[int], None]] = {}
        counted: dict[str, tuple[int, int]] = {}
        for impl in impls:
            warm = cycle_op(impl, f"{impl.name}/warm-{_label(mode, procs)}-{worker}")
            counted[impl.name] = count_statements(impl, warm, WARMUP)
            sid = _session(impl.name, mode, procs, worker)
            make = shared_cycle_op if mode == "shared" else cycle_op
            measured[impl.name] = make(impl, sid)
        out = []
        for r in range(rounds):
            order = impls if r % 2 == 0 else list(reversed(impls))
            for impl in order:
                op = measured[impl.name]
                barrier.wait(BARRIER_TIMEOUT_S)
                latencies = []
                clock = time.monotonic_ns
                began = clock()
                for i in range(r * ops, (r + 1) * ops):
                    t0 = clock()
                    op(i)
                    latencies.append(clock() - t0)
                ended = clock()
                out.append((r, impl.name, began, ended, latencies))
        for impl in impls:
            impl.close()
        results.put(("ok", worker, (out, counted)))
    except BaseException:
        barrier.abort()
        results.put(("error", worker, traceback.format_exc()))


def _run_config(
    engine: str,
    target: databases.Target,
    mode: str,
    procs: int,
    ops: int,
    rounds: int,
    skew_ms: float | None = None,
) -> dict[str, Any]:
    ctx = mp.get_context("fork")  # the parent holds no connection or thread here
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_worker,
            args=(
                engine,
                target.a2sql_url,
                target.driver_dsn,
                mode,
                procs,
                w,
                ops,
                rounds,
                barrier,
                results,
                skew_ms,
            ),
        )
        for w in range(procs)
    ]
    for process in workers:
        process.start()
    outs: list[tuple[int, Any]] = []
    errors: list[tuple[int, Any]] = []
    for _ in workers:
        status, worker, data = results.get(timeout=BARRIER_TIMEOUT_S * 2)
        (outs if status == "ok" else errors).append((worker, data))
    for process in workers:
        process.join()
    if errors:
        raise RuntimeError(
            f"contention {mode}{procs}: worker {errors[0][0]} failed:\n{errors[0][1]}"
        )
    summary: dict[str, Any] = {"case": _label(mode, procs), "processes": procs}
    for name in ("a2sql", "baseline"):
        rates = []
        latencies: list[int] = []
        statements = counted_ops = 0
        trips: int | None = 0
        for r in range(rounds):
            rows = [row for _, (out, _) in outs for row in out if row[0] == r and row[1] == name]
            wall = (max(row[3] for row in rows) - min(row[2] for row in rows)) / 1e9
            rates.append(ops * procs / wall)
            for row in rows:
                latencies.extend(row[4])
        for _, (_, counted) in outs:  # each worker's warm-up count
            worker_statements, worker_trips, worker_ops = counted[name]
            statements += worker_statements
            counted_ops += worker_ops
            trips = None if trips is None or worker_trips is None else trips + worker_trips
        latencies.sort()
        summary[name] = {
            "ops_per_s": round(statistics.median(rates), 1),
            "p50_ms": round(percentile(latencies, 50) / 1e6, 3),
            "p99_ms": round(percentile(latencies, 99) / 1e6, 3),
            "statements_per_op": round(statements / counted_ops, 2),
            "round_trips_per_op": None if trips is None else round(trips / counted_ops, 2),
            "round_ops_per_s": [round(x, 1) for x in rates],
        }
    summary["ratio"] = round(summary["a2sql"]["ops_per_s"] / summary["baseline"]["ops_per_s"], 3)
    return summary


VERIFY = """
select session_id, count(*), max(idx),
    sum(case when event_type = 'bench.event' then 1 else 0 end),
    sum(case when event_type = 'bench.event' and processed_at is not null
        and processed_by_attempt = 1 and attempt_count = 1 and claim_holder is null
        then 1 else 0 end),
    sum(case when event_type = 'bench.child' then 1 else 0 end)
from a2_events where session_id like '%/ct-%' group by session_id order by session_id
"""


def verify(target: databases.Target, ops: int, rounds: int) -> list[dict[str, Any]]:
    """Every measured session: gap-free, each event completed once by attempt 1, one child each."""
    problems = []
    seen = 0
    with databases.connect(target) as conn:
        for sid, count, last, parents, done, children in conn.execute(VERIFY).fetchall():
            seen += 1
            shared = sid.endswith("-shared")
            procs = int(re.findall(r"\d+", sid.split("/ct-")[1])[0])
            expected = ops * rounds * (procs if shared else 1)
            if not (
                count == last and parents == expected and done == parents and children == parents
            ):
                problems.append(
                    {
                        "session": sid,
                        "rows": count,
                        "last_index": last,
                        "events": parents,
                        "expected_events": expected,
                        "completed_once": done,
                        "children": children,
                    }
                )
    return [{"sessions_checked": seen, "problems": problems}]


def backwards(target: databases.Target) -> list[dict[str, Any]]:
    """Per case and side: adjacent event pairs of the measured sessions whose
    ``created_at`` goes backwards (warm-up sessions left out)."""
    rows = []
    with databases.connect(target) as conn:
        for mode, procs in CONFIGS:
            label = _label(mode, procs)
            rows.append(
                {
                    "case": label,
                    **{
                        name: count_backwards(conn, f"{name}/ct-{label}-%")
                        for name in ("a2sql", "baseline")
                    },
                }
            )
    return rows


def contention(p: Params) -> dict[str, Any]:
    """1, 4 and 8 processes on distinct sessions, 4 on one shared session."""
    ops = default(p.ops, sqlite=300, postgres=60, engine=p.engine)
    rounds = p.rounds or 3
    watch = Stopwatch()
    target = databases.prepare(p.engine)
    try:
        cases = [
            _run_config(p.engine, target, mode, n, ops, rounds, p.skew_ms) for mode, n in CONFIGS
        ]
        checks = verify(target, ops, rounds)
        went_backwards = backwards(target)
    finally:
        if target.folder is not None:
            import shutil

            shutil.rmtree(target.folder, ignore_errors=True)
    one = cases[0]
    scaling = [
        {
            "case": case["case"],
            **{
                name: round(case[name]["ops_per_s"] / one[name]["ops_per_s"], 3)
                for name in ("a2sql", "baseline")
            },
        }
        for case in cases
    ]
    notes = [f"ops = cycles per process per round; {mp.cpu_count()} CPUs"]
    if p.engine == "sqlite":
        notes.append("SQLite has one writer per file: processes queue on its lock")
    if p.skew_ms:
        notes.append(
            f"skew {p.skew_ms} ms: a2sql's store in process i has the system clock"
            f" (i even) or -{p.skew_ms} ms (i odd); the baseline keeps the system clock"
        )
    notes.append("backwards: adjacent event pairs whose created_at goes backwards")
    return {
        "workload": "contention",
        "engine": p.engine,
        "ops": ops,
        "rounds": rounds,
        "skew_ms": p.skew_ms,
        "seconds": watch.seconds(),
        "notes": notes,
        "cases": cases,
        "scaling": scaling,
        "backwards": went_backwards,
        "checks": checks,
    }
