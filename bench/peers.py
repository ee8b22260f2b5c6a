"""peers (PostgreSQL): procrastinate and pgqueuer beside a2sql's cycle and batch, same run.

Each peer runs end to end with one worker: enqueue N no-op jobs (one call
per job; pgqueuer batched: one call per 10), then one worker processes
them until the queue is empty. jobs/s = N over enqueue plus processing
time (both are also reported alone); median of rounds. The peers' tables
live in the bench database beside a2sql's and are emptied before each round.

- procrastinate (psycopg 3): ``defer_async`` per job; ``run_worker_async``
  with concurrency 1 and ``wait=False`` (stops when the queue is empty).
- pgqueuer (asyncpg): ``Queries.enqueue``; ``QueueManager.run`` in drain
  mode with ``batch_size`` 1, and 10 (its batched dequeue).

a2sql's (and the baseline's) ``cycle`` and ``batch`` run with one process in
the same rounds (every contender once per round, in turn); a cycle or a
batch event is one job.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from datetime import timedelta
from typing import Any

from bench import databases, workloads
from bench.measure import Stopwatch
from bench.workloads import Params


async def _procrastinate_round(url: str, jobs: int) -> tuple[float, float]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="bench_noop", queue="bench")
    async def noop() -> None:
        return None

    async with app.open_async():
        connector = app.connector
        found = await connector.execute_query_one_async(
            "select to_regclass('procrastinate_jobs') is not null as present"
        )
        if not found["present"]:
            await app.schema_manager.apply_schema_async()
        await connector.execute_query_async("truncate procrastinate_jobs cascade")
        t0 = time.perf_counter()
        for _ in range(jobs):
            await noop.defer_async()
        t1 = time.perf_counter()
        await app.run_worker_async(
            queues=["bench"], concurrency=1, wait=False, install_signal_handlers=False
        )
        t2 = time.perf_counter()
        done = await connector.execute_query_one_async(
            "select count(*) as n from procrastinate_jobs where status = 'succeeded'"
        )
    if done["n"] != jobs:
        raise AssertionError(f"procrastinate processed {done['n']} of {jobs} jobs")
    return t1 - t0, t2 - t1


async def _pgqueuer_round(url: str, jobs: int, batch: int) -> tuple[float, float]:
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    if not await queries.has_table("pgqueuer"):
        await queries.install()
    await queries.clear_queue()
    await queries.clear_queue_log()
    t0 = time.perf_counter()
    if batch == 1:
        for _ in range(jobs):
            await queries.enqueue("bench_noop", None)
    else:
        for _ in range(0, jobs, batch):
            await queries.enqueue(["bench_noop"] * batch, [None] * batch, [0] * batch)
    t1 = time.perf_counter()
    await conn.close()

    worker_conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(worker_conn)))
    processed = 0

    @qm.entrypoint("bench_noop")
    async def noop(job: Job) -> None:
        nonlocal processed
        processed += 1

    await qm.run(
        batch_size=batch,
        mode=QueueExecutionMode.drain,
        dequeue_timeout=timedelta(seconds=1),
        log_aggregation_interval=timedelta(0),
    )
    t2 = time.perf_counter()
    if not worker_conn.is_closed():
        await worker_conn.close()
    if processed != jobs:
        raise AssertionError(f"pgqueuer processed {processed} of {jobs} jobs")
    return t1 - t0, t2 - t1


def _jobs_per_s(t_enqueue: float, t_process: float, jobs: int) -> dict[str, float]:
    return {
        "jobs_per_s": jobs / (t_enqueue + t_process),
        "enqueue_per_s": jobs / t_enqueue,
        "process_per_s": jobs / t_process,
    }


def _summary(name: str, jobs: int, rounds: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"case": name, "jobs": jobs}
    for key in rounds[0]:
        out[key] = round(statistics.median(r[key] for r in rounds), 1)
    out["round_jobs_per_s"] = [round(r["jobs_per_s"], 1) for r in rounds]
    return out


def peers(p: Params) -> dict[str, Any]:
    """a2sql cycle and batch, procrastinate, pgqueuer (1 and batches of 10), round by round.

    Each round runs every contender once, one after the other, so that a
    slow spell of the machine (commit latency here drifts by 4x) falls on
    all of them; the figures are medians over rounds.
    """
    if p.engine != "postgres":
        raise ValueError("peers runs on PostgreSQL only")
    for noisy in ("procrastinate", "pgqueuer", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    watch = Stopwatch()
    rounds = p.rounds or 3
    jobs = p.ops or 500
    url = databases.postgres_url()
    databases.ensure_postgres_database(url)

    seen: dict[str, list[dict[str, float]]] = {}
    sizes: dict[str, int] = {}

    def record(name: str, size: int, figures: dict[str, float]) -> None:
        seen.setdefault(name, []).append(figures)
        sizes[name] = size

    for _ in range(rounds):
        cycle = workloads.cycle(Params("postgres", rounds=1))
        batch = workloads.batch(Params("postgres", rounds=1))
        events = batch["ops"] * workloads.BATCH
        for impl in ("a2sql", "baseline"):
            c = cycle["cases"][0][impl]
            each, together = (case[impl] for case in batch["cases"])
            record(f"{impl}_cycle", cycle["ops"], {"jobs_per_s": c["items_per_s"]})
            record(f"{impl}_batch", events, {"jobs_per_s": each["items_per_s"]})
            record(f"{impl}_batch_one_call", events, {"jobs_per_s": together["items_per_s"]})
        record(
            "procrastinate",
            jobs,
            _jobs_per_s(*asyncio.run(_procrastinate_round(url, jobs)), jobs),
        )
        record(
            "pgqueuer_batch_1", jobs, _jobs_per_s(*asyncio.run(_pgqueuer_round(url, jobs, 1)), jobs)
        )
        record(
            "pgqueuer_batch_10",
            jobs * 4,
            _jobs_per_s(*asyncio.run(_pgqueuer_round(url, jobs * 4, 10)), jobs * 4),
        )
    cases = [_summary(name, sizes[name], figures) for name, figures in seen.items()]
    rate = {case["case"]: case["jobs_per_s"] for case in cases}

    def ratio(a: str, b: str) -> float:
        return round(float(rate[a]) / float(rate[b]), 3)

    ratios = {
        "a2sql_cycle_over_procrastinate": ratio("a2sql_cycle", "procrastinate"),
        "baseline_cycle_over_procrastinate": ratio("baseline_cycle", "procrastinate"),
        "a2sql_cycle_over_pgqueuer_batch_1": ratio("a2sql_cycle", "pgqueuer_batch_1"),
        "a2sql_batch_over_pgqueuer_batch_10": ratio("a2sql_batch", "pgqueuer_batch_10"),
        "baseline_batch_over_pgqueuer_batch_10": ratio("baseline_batch", "pgqueuer_batch_10"),
        "a2sql_batch_one_call_over_pgqueuer_batch_10": ratio(
            "a2sql_batch_one_call", "pgqueuer_batch_10"
        ),
        "baseline_batch_one_call_over_pgqueuer_batch_10": ratio(
            "baseline_batch_one_call", "pgqueuer_batch_10"
        ),
        "a2sql_over_baseline_cycle": ratio("a2sql_cycle", "baseline_cycle"),
        "a2sql_over_baseline_batch": ratio("a2sql_batch", "baseline_batch"),
    }
    return {
        "workload": "peers",
        "engine": "postgres",
        "ops": jobs,
        "rounds": rounds,
        "seconds": watch.seconds(),
        "notes": [
            "jobs/s; ops = jobs per peer round (pgqueuer batched: 4x); a2sql and baseline:"
            " one round of cycle (jobs = cycles) and of batch (jobs = events) per round;"
            " batch_one_call completes the 100 claimed events with one complete_attempts",
        ],
        "cases": cases,
        "ratios": ratios,
    }
