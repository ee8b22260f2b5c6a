"""bench/async_ratio.py runs: both stores do the cycles it times (its figures are the
benchmark's business, not the test's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import a2sql
from bench.async_ratio import measure


def test_both_stores_run_every_cycle(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ratio.db'}"
    sync_s, async_s = asyncio.run(measure(url, rounds=2, block=3))
    assert sync_s > 0 and async_s > 0
    store = a2sql.create_store(url)
    try:
        for session_id in ("sync", "async"):
            events = store.read(session_id)
            # 50 warm-up cycles and 2 blocks of 3: each a work event and its child.
            assert len(events) == 2 * (50 + 2 * 3)
            assert all(event.processed_at is not None for event in events)
    finally:
        store.close()
