"""async_ratio: an ``AsyncStore`` against a ``Store`` on one SQLite file, in one process.

Both stores run the `cycle` workload's loop (append 1, claim it, complete it
returning 1 settled child), each on a session of its own, in alternating
blocks of cycles on one asyncio loop; the CPU time of each block
(``time.process_time``) is summed per store. Alternating blocks in one
process keeps the machine's drift out of the ratio, which separate runs of
``bench --api async`` and ``--api sync`` do not. The database lives on
``/dev/shm`` where there is one, so the disk is not what is measured.

    python -m bench.async_ratio [--rounds 40] [--block 200]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import a2sql
from a2sql import NewEvent

HOLDER = "bench"
TTL_MS = 60_000


def _child(session_id: str, index: int, i: int) -> NewEvent:
    return NewEvent("child", {"n": i}, id=f"{session_id}#{index}", settled=True)


def _sync_cycles(store: a2sql.Store, session_id: str, count: int) -> None:
    for i in range(count):
        store.append(session_id, [NewEvent("work", {"i": i})])
        [event] = store.claim_available(session_id, holder=HOLDER, ttl_ms=TTL_MS).events
        store.complete_attempt(
            session_id,
            index=event.index,
            attempt=event.attempt_count,
            events=[_child(session_id, event.index, i)],
        )


async def _async_cycles(store: a2sql.AsyncStore, session_id: str, count: int) -> None:
    for i in range(count):
        await store.append(session_id, [NewEvent("work", {"i": i})])
        claimed = await store.claim_available(session_id, holder=HOLDER, ttl_ms=TTL_MS)
        [event] = claimed.events
        await store.complete_attempt(
            session_id,
            index=event.index,
            attempt=event.attempt_count,
            events=[_child(session_id, event.index, i)],
        )


async def measure(url: str, rounds: int, block: int) -> tuple[float, float]:
    """CPU seconds per cycle of the ``Store`` and of the ``AsyncStore``."""
    store = a2sql.create_store(url)
    try:
        async with a2sql.create_async_store(url) as async_store:
            _sync_cycles(store, "sync", 50)  # warm both: caches, pools, the schema check
            await _async_cycles(async_store, "async", 50)
            sync_s = async_s = 0.0
            for _ in range(rounds):
                started = time.process_time()
                _sync_cycles(store, "sync", block)
                sync_s += time.process_time() - started
                started = time.process_time()
                await _async_cycles(async_store, "async", block)
                async_s += time.process_time() - started
    finally:
        store.close()
    cycles = rounds * block
    return sync_s / cycles, async_s / cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=40, help="blocks per store")
    parser.add_argument("--block", type=int, default=200, help="cycles per block")
    args = parser.parse_args()
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else None, prefix="a2sql-ratio-"))
    try:
        sync_s, async_s = asyncio.run(
            measure(f"sqlite:///{folder / 'ratio.db'}", args.rounds, args.block)
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"Store {sync_s * 1e6:.1f} µs/cycle, AsyncStore {async_s * 1e6:.1f} µs/cycle "
        f"(CPU), AsyncStore / Store speed {sync_s / async_s:.3f}"
    )


if __name__ == "__main__":
    main()
