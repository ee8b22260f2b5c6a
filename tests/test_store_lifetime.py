"""What a store holds is released when it is: closed, or dropped and collected."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

from sqlalchemy import QueuePool, create_engine

import a2sql
from a2sql import NewEvent


def listeners() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "a2sql-listen")


def test_a_dropped_postgres_store_with_an_open_stream_stops_its_listener(
    postgres_url: str,
) -> None:
    """Stores dropped without close(), their streams open, are collected with their
    listener threads and connections: before, each kept two server connections forever
    and about fifty exhausted max_connections."""
    before = listeners()

    def open_and_drop() -> None:
        store = a2sql.create_store(postgres_url, migrate=True)
        store.append("s", [NewEvent("t")])
        stream = iter(store.stream("s", poll_interval=0.05))
        next(stream)  # started: the listener runs
        deadline = time.monotonic() + 10
        while listeners() == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listeners() > before

    for _ in range(3):
        open_and_drop()
    gc.collect()
    deadline = time.monotonic() + 10
    while listeners() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert listeners() == before, "a dropped store kept its listener"


def test_stores_sharing_an_application_engine_keep_none_of_its_pool(tmp_path: Path) -> None:
    """Four stores on one engine whose pool has a single connection: each call gets it,
    because no store keeps it idle between calls (before, the first store kept it and
    the others failed with STORE_UNAVAILABLE once the pool timed out)."""
    engine = create_engine(
        f"sqlite:///{tmp_path / 'shared.db'}",
        poolclass=QueuePool,
        pool_size=1,
        max_overflow=0,
        pool_timeout=1,
    )
    try:
        a2sql.create_store(f"sqlite:///{tmp_path / 'shared.db'}").close()
        stores = [a2sql.create_store(engine) for _ in range(4)]
        for round_ in range(3):
            for number, store in enumerate(stores):
                store.append(f"s{number}", [NewEvent("t", round_)])
                assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        assert [len(stores[0].read(f"s{n}")) for n in range(4)] == [3, 3, 3, 3]
        for store in stores:
            store.close()
    finally:
        engine.dispose()
