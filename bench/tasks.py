"""``--workload tasks``: what asyncio buys, in one process.

The cycle of ``--workload cycle`` (append 1, claim it, complete it returning
1 settled child) on sessions of its own, run by: one ``Store`` loop; one
``AsyncStore`` task; and 8 ``AsyncStore`` tasks of one store on 8 sessions.
Rounds alternate between the three; the figures are cycles/s (median of
rounds) and each against the one sync loop. On PostgreSQL concurrency is
what the event loop is for; SQLite has one writer, so 8 tasks can at best
match one.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import a2sql
from a2sql import NewEvent
from bench import databases
from bench.impl import take_pieces_off
from bench.measure import Stopwatch
from bench.workloads import Params, default

TASKS = 8


def _child(session: str, index: int) -> list[NewEvent]:
    return [NewEvent("child", {"ok": True}, id=f"{session}#{index}", settled=True)]


def _sync_cycles(store: a2sql.Store, session: str, count: int) -> None:
    for n in range(count):
        store.append(session, [NewEvent("job", {"n": n})])
        [event] = store.claim_available(session, holder="w", ttl_ms=60_000).events
        done = store.complete_attempt(
            session, index=event.index, attempt=event.attempt_count, events=_child(session, n)
        )
        assert done.outcome == "completed", done


async def _async_cycles(store: a2sql.AsyncStore, session: str, count: int) -> None:
    for n in range(count):
        await store.append(session, [NewEvent("job", {"n": n})])
        [event] = (await store.claim_available(session, holder="w", ttl_ms=60_000)).events
        done = await store.complete_attempt(
            session, index=event.index, attempt=event.attempt_count, events=_child(session, n)
        )
        assert done.outcome == "completed", done


def tasks(p: Params) -> dict[str, Any]:
    """One sync loop, one async task, 8 async tasks: cycles/s."""
    ops = default(p.ops, sqlite=1000, postgres=200, engine=p.engine)
    rounds = p.rounds or 5
    watch = Stopwatch()
    target = databases.prepare(p.engine)
    rates: dict[str, list[float]] = {"sync_1": [], "async_1": [], f"async_{TASKS}": []}
    try:
        with a2sql.create_store(target.a2sql_url, migrate=False) as store:
            take_pieces_off(store)  # --without
            asyncio.run(_measure(store, target.a2sql_url, ops, rounds, rates))
    finally:
        if target.folder is not None:
            import shutil

            shutil.rmtree(target.folder, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    one = medians["sync_1"]
    cases = [
        {"case": name, "cycles_per_s": round(rate, 1), "vs_sync_1": round(rate / one, 3)}
        for name, rate in medians.items()
    ]
    return {
        "workload": "tasks",
        "engine": p.engine,
        "ops": ops,
        "rounds": rounds,
        "seconds": watch.seconds(),
        "notes": [f"ops = cycles per round, shared by the {TASKS} tasks"],
        "cases": cases,
    }


async def _measure(
    store: a2sql.Store, url: str, ops: int, rounds: int, rates: dict[str, list[float]]
) -> None:
    async with a2sql.create_async_store(url, migrate=False) as astore:
        take_pieces_off(astore)  # --without
        # Warm-up: connections opened, statements prepared, on every path.
        _sync_cycles(store, "warm-sync", 20)
        await asyncio.gather(*(_async_cycles(astore, f"warm-{n}", 5) for n in range(TASKS)))
        for r in range(rounds):
            began = time.perf_counter()
            _sync_cycles(store, f"sync-{r}", ops)
            rates["sync_1"].append(ops / (time.perf_counter() - began))
            began = time.perf_counter()
            await _async_cycles(astore, f"async-{r}", ops)
            rates["async_1"].append(ops / (time.perf_counter() - began))
            began = time.perf_counter()
            share = ops // TASKS
            await asyncio.gather(
                *(_async_cycles(astore, f"tasks-{r}-{n}", share) for n in range(TASKS))
            )
            rates[f"async_{TASKS}"].append(share * TASKS / (time.perf_counter() - began))
