"""A2Session.get_items on a conversation of 10 items and on one of 10,000 (issue 40).

``python -m bench.agents_session [--engine sqlite|postgres|both] [--api sync|async]
[--rounds R] [--json]``: times ``A2Session.get_items`` (the OpenAI Agents SDK's
session on a2sql, a2sql.integrations.openai_agents) on conversations whose logs hold
10 and 10,000 items, each read by a session made for the call (as a server makes
one per request) and by one kept between calls. The reads:

- ``limit=10``: the newest 10 items, as the SDK reads with a session limit
  (``SessionSettings(limit=10)``): all of the small conversation, the last 10 of
  the large one, so both return 10 items;
- ``all, cleared``: ``get_items()`` where the last ``clear_session()`` left 10 items
  (a long log, a short conversation: what an app that clears or compacts reads),
  10 items again;
- ``all``: ``get_items()``, every item: 10 against 10,000, which cannot cost the same.

For each, the median µs per call over ``--rounds`` rounds (the two sizes
interleaved, in alternating order) and the ratio 10,000/10. Items are the SDK's
shapes, about 200 characters of JSON each. SQLite: a file in a temporary folder;
PostgreSQL: ``A2SQL_BENCH_POSTGRES_URL`` (bench/databases.py), in sessions of its own
(``agents-bench/...``), deleted before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import a2sql
from a2sql import AsyncStore, Store
from a2sql.integrations.openai_agents import A2Session
from bench.databases import direct_postgres_url, ensure_postgres_database

SMALL, LARGE = 10, 10_000
LIMIT = 10
SIZES = {"small": SMALL, "large": LARGE}


def _item(n: int) -> dict[str, Any]:
    if n % 2:
        return {
            "id": f"msg_{n:06}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"A{n} " + "x" * 60, "annotations": []}],
        }
    return {"role": "user", "content": f"Question number {n}: " + "y" * 80}


async def _fill(store: Store | AsyncStore, sid: str, items: int, *, cleared: bool) -> None:
    session = A2Session(sid, store)
    for start in range(0, items, 500):
        await session.add_items([_item(n) for n in range(start, min(items, start + 500))])
    if cleared:
        await session.clear_session()
        await session.add_items([_item(n) for n in range(SMALL)])


async def _per_call(call: Callable[[], Awaitable[object]], calls: int) -> float:
    for _ in range(3):  # warm
        await call()
    start = time.perf_counter()
    for _ in range(calls):
        await call()
    return (time.perf_counter() - start) / calls * 1e6


def _delete(store: Store, prefix: str) -> None:
    page = store.inspect.list_sessions(prefix=prefix, limit=1000)
    for summary in page.sessions:
        store.delete_session(summary.session_id)


async def _measure(url: str, api: str, rounds: int) -> dict[str, Any]:
    prefix = "agents-bench/"
    with a2sql.create_store(url, migrate=True) as sync_store:
        _delete(sync_store, prefix)
        astore = a2sql.create_async_store(url) if api == "async" else None
        store: Store | AsyncStore = astore if astore is not None else sync_store
        try:
            for name, size in SIZES.items():
                await _fill(store, f"{prefix}{name}", size, cleared=False)
                await _fill(store, f"{prefix}{name}-cleared", size, cleared=True)
            if sync_store.engine.dialect.name == "postgresql":
                with sync_store.engine.begin() as connection:
                    connection.exec_driver_sql("analyze a2_events")
            kept = {
                name: A2Session(f"{prefix}{name}", store)
                for name in [*SIZES, *(f"{n}-cleared" for n in SIZES)]
            }

            def fresh(sid: str, limit: int | None) -> Callable[[], Awaitable[object]]:
                return lambda: A2Session(sid, store).get_items(limit)

            reads: dict[str, Callable[[str], Callable[[], Awaitable[object]]]] = {
                "limit=10, fresh session": lambda n: fresh(f"{prefix}{n}", LIMIT),
                "limit=10, kept session": lambda n: lambda: kept[n].get_items(LIMIT),
                "all, cleared, fresh session": lambda n: fresh(f"{prefix}{n}-cleared", None),
                "all, fresh session": lambda n: fresh(f"{prefix}{n}", None),
            }
            # Each read returns what the conversation holds: checked before timing.
            for name, size in SIZES.items():
                assert len(await reads["limit=10, fresh session"](name)()) == min(LIMIT, size)
                assert len(await reads["all, cleared, fresh session"](name)()) == SMALL
                assert len(await reads["all, fresh session"](name)()) == size
            times: dict[str, dict[str, list[float]]] = {
                read: {name: [] for name in SIZES} for read in reads
            }
            for round_ in range(rounds):
                order = list(SIZES) if round_ % 2 == 0 else list(reversed(SIZES))
                for read, make in reads.items():
                    for name in order:
                        calls = 10 if read == "all, fresh session" and name == "large" else 200
                        times[read][name].append(await _per_call(make(name), calls))
        finally:
            if astore is not None:
                await astore.close()
            _delete(sync_store, prefix)
    figures: dict[str, Any] = {}
    for read, by_size in times.items():
        small, large = (statistics.median(by_size[name]) for name in SIZES)
        figures[read] = {
            "small_us": round(small, 1),
            "large_us": round(large, 1),
            "ratio": round(large / small, 2),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--api", choices=["sync", "async"], default="sync")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    engines = ["sqlite", "postgres"] if arguments.engine == "both" else [arguments.engine]
    for engine in engines:
        folder: Path | None = None
        if engine == "postgres":
            url = direct_postgres_url()
            ensure_postgres_database(url)
        else:
            folder = Path(tempfile.mkdtemp(prefix="a2sql-agents-bench-"))
            url = f"sqlite:///{folder / 'bench.db'}"
        try:
            figures = asyncio.run(_measure(url, arguments.api, arguments.rounds))
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        if arguments.json:
            print(json.dumps({"engine": engine, "api": arguments.api, **figures}))
            continue
        print(f"{engine}, {'Store' if arguments.api == 'sync' else 'AsyncStore'}:")
        print(f"  {'read':30} {'10 items':>12} {'10,000 items':>14} {'ratio':>7}")
        for read, figure in figures.items():
            print(
                f"  {read:30} {figure['small_us']:>10.0f}µs {figure['large_us']:>12.0f}µs"
                f" {figure['ratio']:>7.2f}"
            )


if __name__ == "__main__":
    main()
