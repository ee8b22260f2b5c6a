"""Commit-to-delivery latency of a live stream on PostgreSQL (issue 4).

    python -m bench.stream_latency [--url URL] [--events 1000] [--gap-ms 2] [--json]

One process appends ``--events`` events one by one (one ``append`` = one
transaction) to a fresh session, ``--gap-ms`` apart; this process tails the
session with ``Store.stream`` (in a thread) and then, on another session,
with ``AsyncStore.stream`` (on an event loop), both at the default poll
interval. The appender is another process, so nothing wakes the stream but
LISTEN/NOTIFY (or, failing that, the poll).

What is measured, per event (all times ``time.time()``, one host, one clock):

- ``after_commit``: delivery minus the time the appender read right after
  ``append()`` returned. The commit happened before that, so this slightly
  *under*-states commit-to-delivery (by the commit acknowledgement's trip
  back to the appender); a delivery can even come first (negative values,
  counted as ``early``).
- ``from_start``: delivery minus the time the appender read right before
  calling ``append()`` (carried in the payload). This *over*-states it by
  the whole append transaction.

The true commit-to-delivery latency lies between the two. "Delivery" is the
moment ``next()`` / ``__anext__()`` returned the event to the consumer.
Nothing else runs on the database meanwhile (beyond what the machine does).

URL: ``--url``, else ``A2SQL_DATABASE_URL``, else
``postgresql://postgres@127.0.0.1/a2sql_bench``; the database is created if
missing (through the server's ``postgres`` database) and migrated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from typing import Any

import a2sql
from a2sql import NewEvent, StoredEvent
from a2sql.backends import backend_named
from a2sql.execution.engines import resolve_url
from bench.databases import ensure_postgres_database

DEFAULT_URL = "postgresql://postgres@127.0.0.1/a2sql_bench"
# Time for a stream to read the empty session and its listener to LISTEN.
SETTLE_S = 1.0
# No run may hang: a stream that stops delivering ends the run after this.
STALL_S = 30.0


def ensure_database(url: str) -> str:
    """Create the database of ``url`` if the server has none of that name; return the URL."""
    target = resolve_url(url)
    ensure_postgres_database(target.set(drivername="postgresql").render_as_string(False))
    return target.render_as_string(hide_password=False)


# --- the appender (another process) -----------------------------------------------


def append_events(
    url: str,
    session_id: str,
    count: int,
    gap_s: float,
    ready: EventType,
    go: EventType,
    out: Any,
) -> None:
    """Append ``count`` single events; send back when each ``append()`` returned."""
    with a2sql.create_store(url) as store:
        ready.set()
        go.wait()
        returned: list[float] = []
        for i in range(count):
            started = time.time()
            store.append(session_id, [NewEvent("tick", {"i": i, "started": started})])
            returned.append(time.time())
            if gap_s:
                time.sleep(gap_s)
        out.put(returned)


# --- the readers --------------------------------------------------------------------


@dataclass
class Delivery:
    index: int
    payload: Any
    at: float


def _record(deliveries: list[Delivery], event: StoredEvent) -> None:
    deliveries.append(Delivery(event.index, event.payload, time.time()))


def read_sync(url: str, session_id: str, count: int, started: threading.Event) -> list[Delivery]:
    """Tail the session with ``Store.stream`` until ``count`` events arrived (or it stalls)."""
    deliveries: list[Delivery] = []
    with a2sql.create_store(url) as store, store.stream(session_id) as stream:
        done = threading.Event()

        def consume() -> None:
            for event in stream:
                _record(deliveries, event)
                if len(deliveries) >= count:
                    break
            done.set()

        threading.Thread(target=consume, daemon=True).start()
        started.set()
        seen = -1
        while not done.wait(STALL_S):
            if len(deliveries) == seen:
                break  # nothing for STALL_S: give up
            seen = len(deliveries)
    return deliveries


def read_async(url: str, session_id: str, count: int, started: threading.Event) -> list[Delivery]:
    """Tail the session with ``AsyncStore.stream`` until ``count`` events arrived."""

    async def run() -> list[Delivery]:
        deliveries: list[Delivery] = []
        async with a2sql.create_async_store(url) as store:
            stream = store.stream(session_id)
            try:
                started.set()
                while len(deliveries) < count:
                    event = await asyncio.wait_for(stream.__anext__(), STALL_S)
                    _record(deliveries, event)
            except TimeoutError:
                pass
            finally:
                await stream.aclose()
        return deliveries

    return asyncio.run(run())


READERS = {"sync": read_sync, "async": read_async}


# --- one run ------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _ms(value: float) -> float:
    return round(value * 1000, 3)


def measure(url: str, mode: str, count: int, gap_s: float) -> dict[str, Any]:
    """Run one appender process against one stream; the latency figures of ``mode``."""
    session_id = f"latency-{mode}-{uuid.uuid4().hex[:8]}"
    spawn = multiprocessing.get_context("spawn")
    ready, go, out = spawn.Event(), spawn.Event(), spawn.Queue()
    appender = spawn.Process(
        target=append_events, args=(url, session_id, count, gap_s, ready, go, out)
    )
    appender.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the appender process did not start")
        started = threading.Event()
        result: dict[str, list[Delivery]] = {}
        reader = threading.Thread(
            target=lambda: result.setdefault("d", READERS[mode](url, session_id, count, started))
        )
        reader.start()
        started.wait(60)
        time.sleep(SETTLE_S)
        go.set()
        returned: list[float] = out.get(timeout=STALL_S + count)
        reader.join()
        appender.join(timeout=30)
    finally:
        if appender.is_alive():
            appender.kill()
    deliveries = result.get("d", [])
    if [d.index for d in deliveries] != list(range(1, count + 1)):
        raise RuntimeError(f"{mode}: {len(deliveries)} of {count} events, or out of order")
    after_commit = [d.at - returned[d.payload["i"]] for d in deliveries]
    from_start = [d.at - d.payload["started"] for d in deliveries]
    append_s = [returned[d.payload["i"]] - d.payload["started"] for d in deliveries]
    return {
        "events": len(deliveries),
        "after_commit_median_ms": _ms(statistics.median(after_commit)),
        "after_commit_p99_ms": _ms(percentile(after_commit, 99)),
        "after_commit_max_ms": _ms(max(after_commit)),
        "early": sum(1 for value in after_commit if value < 0),
        "from_start_median_ms": _ms(statistics.median(from_start)),
        "from_start_p99_ms": _ms(percentile(from_start, 99)),
        "append_median_ms": _ms(statistics.median(append_s)),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default=os.environ.get("A2SQL_DATABASE_URL") or DEFAULT_URL)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--gap-ms", type=float, default=2.0, help="pause between appends")
    parser.add_argument("--modes", default="sync,async", help="sync, async or both")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    url = ensure_database(args.url)
    if resolve_url(url).get_backend_name() != "postgresql":
        parser.error("this benchmark measures LISTEN/NOTIFY: it needs a PostgreSQL URL")
    a2sql.create_store(url, migrate=True).close()
    poll_ms = _ms(backend_named("postgresql").stream_poll_interval)
    results = {
        mode: measure(url, mode, args.events, args.gap_ms / 1000) for mode in args.modes.split(",")
    }
    shown_url = resolve_url(url).render_as_string(hide_password=True)
    if args.json:
        print(
            json.dumps(
                {
                    "url": shown_url,
                    "events": args.events,
                    "gap_ms": args.gap_ms,
                    "poll_interval_ms": poll_ms,
                    "results": results,
                }
            )
        )
        return
    print(
        f"{shown_url}: {args.events} events appended one by one from another process, "
        f"{args.gap_ms:g} ms apart; fallback poll interval {poll_ms:g} ms"
    )
    print("commit-to-delivery in ms: after append() returned (lower bound) .. from its start")
    print(f"{'stream':8} {'median':>16} {'p99':>16} {'max':>8} {'early':>6} {'append':>7}")
    for mode, r in results.items():
        median = f"{r['after_commit_median_ms']:.2f} .. {r['from_start_median_ms']:.2f}"
        p99 = f"{r['after_commit_p99_ms']:.2f} .. {r['from_start_p99_ms']:.2f}"
        print(
            f"{mode:8} {median:>16} {p99:>16} {r['after_commit_max_ms']:8.2f} "
            f"{r['early']:6d} {r['append_median_ms']:7.2f}"
        )


if __name__ == "__main__":
    main()
