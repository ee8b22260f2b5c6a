"""dispatch: worker processes draining many sessions through ``claim_next``; peers beside.

Each round loads the work first (not timed): ``sessions`` sessions of 4
events each under ``d/``, set-based in a2sql's row format (all unprocessed,
never claimed). Then N worker processes (N = 1 and 4; ``multiprocessing``
spawn) each open their own store from the URL, warm up on a private
session (one claim_next, one completion) and wait on a barrier. The timer
starts when the barrier lets them go; each runs ``Worker(store, noop,
prefix="d/", batch=16, ...).run(until_idle=True)``. events/s = events over
the time until the last process's ``run`` returned; ``exited_events_per_s``
over the time until the last process exited (closing the store and
interpreter teardown included, which are reported apart: ``close_s``,
``exit_s``).

After every round the database is asked, not the workers: every event
under ``d/`` is processed by attempt 1 (claimed once, never failed, claim
cleared), no row was added, and the workers' outcomes are one
``completed`` per event. A wrong answer raises ``WrongResult``.

PostgreSQL also runs, in the same rounds and in turn with a2sql (the order
reversed every other round), the peers' own workers on as many no-op jobs,
enqueued in bulk before the timer, with the same processes and barrier:

- procrastinate: ``run_worker_async(concurrency=1, wait=False)`` per process
  (its default concurrency; ``wait=False`` returns when no job is left);
  checked: every job ``succeeded`` and the task ran once per job.
- pgqueuer: ``QueueManager.run(mode=drain)`` per process with its default
  ``batch_size`` (10); checked: the queue is empty, its log has one
  ``successful`` row per job and the entrypoint ran once per job.

SQLite runs a2sql alone (the peers are PostgreSQL queues).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing as mp
import shutil
import statistics
import threading
import time
import traceback
from collections import Counter
from datetime import timedelta
from typing import Any

from bench import databases
from bench.measure import Stopwatch
from bench.workloads import Params, check, default

PREFIX = "d/"
EVENTS_PER_SESSION = 4
BATCH = 16
TTL_MS = 30_000
# How long an idle worker sleeps before claim_next again while other workers'
# claims are in flight (the worker's default is 1 s; see the README).
POLL_INTERVAL_S = 0.1
PROCESSES = (1, 4)
BARRIER_TIMEOUT_S = 300
QUEUE = "bench_dispatch"
TASK = "bench_dispatch_noop"
PEERS = ("procrastinate", "pgqueuer")
PGQUEUER_BATCH = 10  # QueueManager.run's default batch_size


# --- the worker processes ----------------------------------------------------------------


def noop_handler(_attempt: Any) -> None:
    """The handler: nothing to do, no event returned."""
    return None


def _a2sql_child(url: str, worker: int, barrier: Any, poll_interval: float) -> dict[str, Any]:
    import a2sql
    from a2sql.worker import Worker

    store = a2sql.create_store(url, migrate=False)
    closed = False
    try:
        # Warm up off the measured prefix: pool connection, statements compiled.
        warm = f"warm/{worker}/"
        store.append(f"{warm}s", [a2sql.NewEvent("bench.warm", {"n": worker})])
        Worker(store, noop_handler, prefix=warm, batch=BATCH, ttl_ms=TTL_MS).run(until_idle=True)
        runner = Worker(
            store,
            noop_handler,
            prefix=PREFIX,
            batch=BATCH,
            ttl_ms=TTL_MS,
            poll_interval=poll_interval,
        )
        barrier.wait(BARRIER_TIMEOUT_S)
        began = time.monotonic()
        runner.run(until_idle=True)
        ended = time.monotonic()
        store.close()
        closed = True
        return {
            "began": began,
            "ended": ended,
            "close_s": time.monotonic() - ended,
            "outcomes": dict(runner.outcomes),
        }
    finally:
        if not closed:
            store.close()


async def _procrastinate_child(url: str, barrier: Any) -> dict[str, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    ran = 0

    @app.task(name=TASK, queue=QUEUE)
    async def noop() -> None:
        nonlocal ran
        ran += 1

    async with app.open_async():
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT_S)
        began = time.monotonic()
        await app.run_worker_async(
            queues=[QUEUE], concurrency=1, wait=False, install_signal_handlers=False
        )
        ended = time.monotonic()
    closed = time.monotonic()
    return {"began": began, "ended": ended, "close_s": closed - ended, "outcomes": {"ran": ran}}


async def _pgqueuer_child(url: str, barrier: Any) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import Queries, QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    ran = 0

    @qm.entrypoint(TASK)
    async def noop(_job: Job) -> None:
        nonlocal ran
        ran += 1

    await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT_S)
    began = time.monotonic()
    await qm.run(
        batch_size=PGQUEUER_BATCH,
        mode=QueueExecutionMode.drain,
        dequeue_timeout=timedelta(seconds=1),
        log_aggregation_interval=timedelta(0),
    )
    ended = time.monotonic()
    if not conn.is_closed():
        await conn.close()
    closed = time.monotonic()
    return {"began": began, "ended": ended, "close_s": closed - ended, "outcomes": {"ran": ran}}


def _child(
    kind: str, url: str, worker: int, barrier: Any, results: Any, poll_interval: float
) -> None:
    """One worker process: open, warm up, wait on the barrier, drain; report."""
    try:
        for noisy in ("procrastinate", "pgqueuer", "asyncio"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        if kind == "a2sql":
            out = _a2sql_child(url, worker, barrier, poll_interval)
        elif kind == "procrastinate":
            out = asyncio.run(_procrastinate_child(url, barrier))
        else:
            out = asyncio.run(_pgqueuer_child(url, barrier))
        results.put(("ok", worker, out))
    except BaseException:
        barrier.abort()
        results.put(("error", worker, traceback.format_exc()))


def _run_processes(
    kind: str, url: str, procs: int, poll_interval: float = POLL_INTERVAL_S
) -> dict[str, Any]:
    """Start ``procs`` processes, release them together: the time until the last one's
    worker returned (``done_s``), and until the last one exited (``exited_s``)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_child, args=(kind, url, w, barrier, results, poll_interval), name=f"{kind}-{w}"
        )
        for w in range(procs)
    ]
    for process in workers:
        process.start()
    # A child that failed before the start breaks the barrier: its report says why.
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(BARRIER_TIMEOUT_S)
    t0 = time.monotonic()
    reports = [results.get(timeout=BARRIER_TIMEOUT_S * 2) for _ in workers]
    for process in workers:
        process.join()
    exited = time.monotonic() - t0
    errors = [(w, data) for status, w, data in reports if status != "ok"]
    if errors:
        raise RuntimeError(
            f"dispatch {kind} x{procs}: worker {errors[0][0]} failed:\n{errors[0][1]}"
        )
    outs = [data for _, _, data in reports]
    outcomes: Counter[str] = Counter()
    for out in outs:
        outcomes.update(out["outcomes"])
    # CLOCK_MONOTONIC is one clock for every process of the machine.
    start = min(t0, *(out["began"] for out in outs))
    return {
        "done_s": max(out["ended"] for out in outs) - start,
        "exited_s": exited + (t0 - start),
        "close_s": max(out["close_s"] for out in outs),
        "outcomes": dict(outcomes),
    }


# --- loading and checking ------------------------------------------------------------------


def _load_a2sql(target: databases.Target, sessions: int) -> int:
    databases.truncate(target)
    with databases.connect(target) as conn:
        events = databases.load_events(
            conn,
            target.engine,
            prefix=PREFIX,
            sessions=sessions,
            per_session=EVENTS_PER_SESSION,
            unprocessed_every=1,
        )
        conn.commit()
        databases.analyze(conn, target.engine)
        conn.commit()
    return events


VERIFY_A2SQL = """
select count(*),
    sum(case when processed_at is not null and processed_by_attempt = 1
        and attempt_count = 1 and failure_count = 0 and failed_at is null
        and claim_holder is null then 1 else 0 end)
from a2_events where session_id >= 'd/' and session_id < 'd0'
"""


def _verify_a2sql(target: databases.Target, events: int, outcomes: dict[str, int]) -> None:
    with databases.connect(target) as conn:
        rows, once = conn.execute(VERIFY_A2SQL).fetchone()
    check(
        rows == events and once == events,
        f"a2sql: {rows} rows under {PREFIX!r} (expected {events}),"
        f" {once} processed exactly once by attempt 1",
    )
    check(
        outcomes == {"completed": events},
        f"a2sql: the workers' outcomes {outcomes}, expected {{'completed': {events}}}",
    )


async def _load_procrastinate(url: str, jobs: int) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name=TASK, queue=QUEUE)
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
        await noop.batch_defer_async(*({} for _ in range(jobs)))


def _verify_procrastinate(url: str, jobs: int, outcomes: dict[str, int]) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "select count(*), count(*) filter (where status = 'succeeded') from procrastinate_jobs"
        ).fetchone()
    rows, succeeded = row if row else (0, 0)
    check(
        rows == jobs and succeeded == jobs and outcomes.get("ran") == jobs,
        f"procrastinate: {succeeded} of {rows} jobs succeeded (expected {jobs}),"
        f" the task ran {outcomes.get('ran')} times",
    )


async def _load_pgqueuer(url: str, jobs: int) -> None:
    import asyncpg
    from pgqueuer import Queries
    from pgqueuer.db import AsyncpgDriver

    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        if not await queries.has_table("pgqueuer"):
            await queries.install()
        await queries.clear_queue()
        await queries.clear_queue_log()
        chunk = 1000
        for start in range(0, jobs, chunk):
            n = min(chunk, jobs - start)
            await queries.enqueue([TASK] * n, [None] * n, [0] * n)
    finally:
        await conn.close()


def _verify_pgqueuer(url: str, jobs: int, outcomes: dict[str, int]) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        left = conn.execute("select count(*) from pgqueuer").fetchone()
        logged = conn.execute(
            "select count(*), count(distinct job_id) from pgqueuer_log"
            " where status = 'successful' and entrypoint = %s",
            (TASK,),
        ).fetchone()
    queued = left[0] if left else -1
    successful, distinct = logged if logged else (0, 0)
    check(
        queued == 0 and successful == jobs and distinct == jobs and outcomes.get("ran") == jobs,
        f"pgqueuer: {queued} jobs left, {successful} logged successful ({distinct} distinct,"
        f" expected {jobs}), the entrypoint ran {outcomes.get('ran')} times",
    )


def _one_round(
    kind: str,
    target: databases.Target,
    sessions: int,
    procs: int,
    poll_interval: float = POLL_INTERVAL_S,
) -> dict[str, Any]:
    """Load, run ``procs`` processes of ``kind``, check from the database."""
    url = target.a2sql_url
    events = sessions * EVENTS_PER_SESSION
    if kind == "a2sql":
        _load_a2sql(target, sessions)
    elif kind == "procrastinate":
        asyncio.run(_load_procrastinate(url, events))
    else:
        asyncio.run(_load_pgqueuer(url, events))
    run = _run_processes(kind, url, procs, poll_interval)
    if kind == "a2sql":
        _verify_a2sql(target, events, run["outcomes"])
    elif kind == "procrastinate":
        _verify_procrastinate(url, events, run["outcomes"])
    else:
        _verify_pgqueuer(url, events, run["outcomes"])
    return {
        "events_per_s": events / run["done_s"],
        "exited_events_per_s": events / run["exited_s"],
        "done_s": run["done_s"],
        "exit_s": run["exited_s"] - run["done_s"],
        "close_s": run["close_s"],
    }


# --- the workload ---------------------------------------------------------------------------


def _case(kind: str, procs: int, events: int, rounds: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "case": f"{kind}_{procs}",
        "processes": procs,
        "events": events,
        "events_per_s": round(statistics.median(r["events_per_s"] for r in rounds), 1),
        "round_events_per_s": [round(r["events_per_s"], 1) for r in rounds],
        "exited_events_per_s": round(
            statistics.median(r["exited_events_per_s"] for r in rounds), 1
        ),
        # Median seconds after the last worker returned: closing (the store or the
        # peer's connections, in each process; the slowest) and until all exited.
        "close_s": round(statistics.median(r["close_s"] for r in rounds), 3),
        "exit_s": round(statistics.median(r["exit_s"] for r in rounds), 3),
    }


TARGETS = (
    # (name, numerator case, denominator case, target)
    ("a2sql_1_over_procrastinate_1", "a2sql_1", "procrastinate_1", 1.0),
    ("a2sql_4_over_procrastinate_4", "a2sql_4", "procrastinate_4", 1.0),
    ("a2sql_4_over_a2sql_1", "a2sql_4", "a2sql_1", 1.6),
    ("a2sql_1_over_pgqueuer_1", "a2sql_1", "pgqueuer_1", None),
    ("a2sql_4_over_pgqueuer_4", "a2sql_4", "pgqueuer_4", None),
    ("procrastinate_4_over_procrastinate_1", "procrastinate_4", "procrastinate_1", None),
    ("pgqueuer_4_over_pgqueuer_1", "pgqueuer_4", "pgqueuer_1", None),
)


def dispatch(p: Params) -> dict[str, Any]:
    """a2sql's Worker in 1 and 4 processes over many sessions; peers beside on PostgreSQL."""
    sessions = default(p.ops, sqlite=2000, postgres=500, engine=p.engine)
    rounds = p.rounds or 3
    events = sessions * EVENTS_PER_SESSION
    watch = Stopwatch()
    kinds = ("a2sql", *PEERS) if p.engine == "postgres" else ("a2sql",)
    target = databases.prepare(p.engine)
    seen: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for r in range(rounds):
            for procs in PROCESSES:
                order = kinds if r % 2 == 0 else tuple(reversed(kinds))
                for kind in order:
                    seen.setdefault((kind, procs), []).append(
                        _one_round(kind, target, sessions, procs)
                    )
        databases.truncate(target)
    finally:
        if target.folder is not None:
            shutil.rmtree(target.folder, ignore_errors=True)
    cases = [
        _case(kind, procs, events, seen[(kind, procs)]) for kind in kinds for procs in PROCESSES
    ]
    rate = {case["case"]: case["events_per_s"] for case in cases}
    exited = {case["case"]: case["exited_events_per_s"] for case in cases}
    ratios = []
    for name, top, bottom, goal in TARGETS:
        if top not in rate or bottom not in rate:
            continue
        value = round(rate[top] / rate[bottom], 3)
        row: dict[str, Any] = {
            "ratio": name,
            "value": value,
            "to_exit": round(exited[top] / exited[bottom], 3),
        }
        if goal is not None and p.engine == "postgres":  # the targets are PostgreSQL's
            row["target"] = goal
            row["met"] = value >= goal
        ratios.append(row)
    notes = [
        f"ops = sessions per round ({EVENTS_PER_SESSION} events each: {events} events or jobs"
        f" per run); events/s: events over the time from the barrier to the last worker's"
        f" return (run(), run_worker_async(), QueueManager.run()); exited_events_per_s and"
        f" ratios' to_exit: to the last process's exit instead (closing and interpreter"
        f" teardown included)",
        f"a2sql Worker(batch={BATCH}, ttl_ms={TTL_MS}, poll_interval={POLL_INTERVAL_S}),"
        f" no-op handler; {mp.cpu_count()} CPUs",
    ]
    if p.engine == "postgres":
        notes.append(
            "procrastinate: run_worker_async(concurrency=1, wait=False) per process;"
            f" pgqueuer: QueueManager.run(mode=drain, batch_size={PGQUEUER_BATCH}) per process"
        )
    else:
        notes.append("SQLite has one writer per file: processes queue on its lock")
    return {
        "workload": "dispatch",
        "engine": p.engine,
        "ops": sessions,
        "rounds": rounds,
        "seconds": watch.seconds(),
        "notes": notes,
        "cases": cases,
        "ratios": ratios,
        "checks": [
            {
                "verified": "every round, from the database: each event processed once by"
                " attempt 1 (each job succeeded once), no row added, outcomes add up"
            }
        ],
    }
