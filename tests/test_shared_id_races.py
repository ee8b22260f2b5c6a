"""Two sessions racing for the same event ids (SPEC §5, Concurrency): the loser gets
PARTIAL_DUPLICATE_BATCH, never a deadlock reported as STORE_UNAVAILABLE.

Each round two threads, each with a store (and so a connection) of its own, write
batches that share every id, in opposite orders, at the same moment: on PostgreSQL
rows inserted in the batch's order would wait for each other from both ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, Store

ROUNDS = 8
SHARED = 60  # ids per batch: both inserts are under way when they meet


@pytest.fixture
def stores(url: str) -> Iterator[tuple[Store, Store]]:
    with a2sql.create_store(url, migrate=True) as one, a2sql.create_store(url) as two:
        yield one, two


def race(first: Callable[[], object], second: Callable[[], object]) -> list[object]:
    """Run both at once; each one's result, or the A2Error it raised."""
    barrier = threading.Barrier(2)
    results: list[object] = [None, None]

    def run(slot: int, call: Callable[[], object]) -> None:
        barrier.wait()
        try:
            results[slot] = call()
        except A2Error as error:
            results[slot] = error

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def one_won(results: list[object]) -> None:
    """Exactly one call succeeded; the other was refused as a duplicate batch."""
    errors = [r for r in results if isinstance(r, A2Error)]
    assert [e.code for e in errors] == [ErrorCode.PARTIAL_DUPLICATE_BATCH], errors


def shared_ids(round_: int) -> list[str]:
    return [f"r{round_}-{n:03}" for n in range(SHARED)]


def test_appends_sharing_ids_in_opposite_orders_lose_as_duplicates(
    stores: tuple[Store, Store],
) -> None:
    """append: one batch commits, the other is PARTIAL_DUPLICATE_BATCH, every round."""
    one, two = stores
    for round_ in range(ROUNDS):
        ids = shared_ids(round_)
        results = race(
            partial(one.append, f"a{round_}", [NewEvent("t", id=i) for i in ids]),
            partial(two.append, f"b{round_}", [NewEvent("t", id=i) for i in reversed(ids)]),
        )
        one_won(results)
        stored = one.read(f"a{round_}") or one.read(f"b{round_}")
        assert sorted(e.id for e in stored) == ids


def test_completions_returning_shared_ids_in_opposite_orders_lose_as_duplicates(
    stores: tuple[Store, Store],
) -> None:
    """complete_attempt: one completion commits its children, the other is
    PARTIAL_DUPLICATE_BATCH and leaves its event unprocessed, every round."""
    one, two = stores
    for round_ in range(ROUNDS):
        ids = shared_ids(round_)
        attempts = []
        for session in (f"a{round_}", f"b{round_}"):
            one.append(session, [NewEvent("parent")])
            [claimed] = one.claim_available(session, holder="w", ttl_ms=60_000).events
            attempts.append(claimed.attempt_count)
        results = race(
            partial(
                one.complete_attempt,
                f"a{round_}",
                index=1,
                attempt=attempts[0],
                events=[NewEvent("child", id=i, settled=True) for i in ids],
            ),
            partial(
                two.complete_attempt,
                f"b{round_}",
                index=1,
                attempt=attempts[1],
                events=[NewEvent("child", id=i, settled=True) for i in reversed(ids)],
            ),
        )
        one_won(results)
        loser = f"b{round_}" if isinstance(results[1], A2Error) else f"a{round_}"
        [parent] = one.read(loser)
        assert parent.processed_at is None
