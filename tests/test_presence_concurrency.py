"""presence.set and presence.read from several connections at once (SPEC §3 presence).

Writers and readers of one namespace, each a thread with a store of its own,
for a few seconds: no call may fail (on PostgreSQL a sweep and an upsert, or
two writers, taking rows in different orders deadlock), and what is read
afterwards is what the last writes left.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime

import a2sql
from a2sql import A2Error

WRITERS = 3
READERS = 2
DURATION_S = 3.0
PARTICIPANTS = ("p0", "p1")
FIELDS = tuple(f"f{n}" for n in range(8))


def write(url: str, seed: int, stop: threading.Event, errors: list[A2Error]) -> int:
    """Random fields of shared participants: values with short lifetimes (so that
    reads find expired rows to sweep) and deletions, in random order."""
    rng = random.Random(seed)
    writes = 0
    with a2sql.create_store(url) as store:
        while not stop.is_set():
            fields = rng.sample(FIELDS, rng.randint(1, len(FIELDS)))
            values = {f: (None if rng.random() < 0.3 else writes) for f in fields}
            try:
                store.presence.set(
                    "ns",
                    rng.choice(PARTICIPANTS),
                    values,
                    at=datetime.now(UTC),
                    seen=writes,
                    ttl_ms=rng.choice((1, 5, 60_000)),
                )
            except A2Error as error:
                errors.append(error)
            writes += 1
    return writes


def read(url: str, stop: threading.Event, errors: list[A2Error]) -> None:
    with a2sql.create_store(url) as store:
        while not stop.is_set():
            try:
                store.presence.read("ns")
            except A2Error as error:
                errors.append(error)


def test_writers_and_readers_of_one_namespace_never_fail(url: str) -> None:
    """presence: 3 writers and 2 readers of shared participants run without an error."""
    a2sql.create_store(url, migrate=True).close()
    stop = threading.Event()
    errors: list[A2Error] = []
    writes: list[int] = []
    threads = [
        threading.Thread(target=lambda n=n: writes.append(write(url, n, stop, errors)))
        for n in range(WRITERS)
    ] + [threading.Thread(target=read, args=(url, stop, errors)) for _ in range(READERS)]
    for thread in threads:
        thread.start()
    time.sleep(DURATION_S)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(writes) == WRITERS and min(writes) > 0
