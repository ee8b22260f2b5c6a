"""The sync store's own transactions on pooled connections (a2sql.execution.transactions).

It keeps up to ``KEEP_IDLE`` connections checked out between calls, gives
back those idle longer than ``MAX_IDLE_S`` so the pool's checks apply again,
and never uses a forked parent's connections.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, event, text

import a2sql
from a2sql import ClaimRef, NewEvent, Store
from a2sql.execution.transactions import KEEP_IDLE


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


def count_pool_events(store: Store, name: str) -> list[int]:
    """A one-item list counting the pool's ``name`` events (checkout, checkin) from now on."""
    seen = [0]

    def bump(*_args: object) -> None:
        seen[0] += 1

    event.listen(store.engine, name, bump)
    return seen


def test_calls_reuse_one_idle_connection_without_pool_round_trips(store: Store) -> None:
    """100 calls one after another: no checkout from the pool after the first, no checkin."""
    store.append("s", [NewEvent("t", 0)])
    checkouts = count_pool_events(store, "checkout")
    checkins = count_pool_events(store, "checkin")
    for n in range(1, 101):
        store.append("s", [NewEvent("t", n)])
        store.read("s", after_index=n)
    assert (checkouts[0], checkins[0]) == (0, 0)
    assert len(store.read("s")) == 101


def test_a_connection_idle_too_long_goes_back_to_the_pool_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_IDLE_S the kept connection is checked in and a checkout serves the call,
    so the pool's pre-ping, recycle and invalidation apply to it."""
    store.append("s", [NewEvent("t", 0)])
    monkeypatch.setattr(a2sql.execution.transactions, "MAX_IDLE_S", -1.0)
    checkouts = count_pool_events(store, "checkout")
    checkins = count_pool_events(store, "checkin")
    for n in range(1, 4):
        store.append("s", [NewEvent("t", n)])
    assert (checkouts[0], checkins[0]) == (3, 3)


def test_concurrent_threads_keep_at_most_keep_idle(store: Store) -> None:
    """8 threads appending at once: all events stored, gapless; at most KEEP_IDLE kept."""
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for n in range(20):
                store.append("s", [NewEvent("t", [worker, n])])
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [e.index for e in store.read("s")] == list(range(1, 161))
    assert 1 <= store._pooled.idle <= KEEP_IDLE
    assert store.engine.pool.checkedout() == store._pooled.idle  # type: ignore[attr-defined]


def _rolled_back_delete_keeps_events(engine: Engine, store: Store) -> None:
    """The application's own transaction on ``engine``: a rollback undoes its delete."""
    with engine.connect() as connection:
        connection.execute(text("delete from a2_events"))
        connection.rollback()
    assert store.read("s") != []


def test_connections_go_back_to_the_pool_as_they_were_taken(url: str) -> None:
    """A store holds a connection in the driver's autocommit mode on PostgreSQL (it sends
    BEGIN and COMMIT itself). The pool gets it back with the driver's own transactions,
    which a rollback undoes: on an application's engine, after each call, fused or not."""
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        with a2sql.create_store(engine, migrate=True) as store:
            store.append("s", [NewEvent("t", 0)])  # fused on PostgreSQL
            _rolled_back_delete_keeps_events(engine, store)
            store.claim_available("s", holder="w", ttl_ms=60_000)
            store.release_claims("s", holder="w", claims=[ClaimRef(1, 1)])  # the full path
            _rolled_back_delete_keeps_events(engine, store)
    finally:
        engine.dispose()


def _child_appends(store: Store, session: str, count: int, done: mp.Queue[str]) -> None:
    try:
        # SQLAlchemy's advice for a forked child: drop the pool's inherited connections.
        store.engine.dispose(close=False)
        for n in range(count):
            store.append(session, [NewEvent("t", n)])
        done.put("ok")
    except BaseException as error:  # reported to the parent
        done.put(repr(error))


def test_a_forked_child_never_uses_the_parents_idle_connections(store: Store) -> None:
    """Parent and forked child append at the same time through the same Store object:
    both succeed and every event is stored (they would share a connection otherwise)."""
    store.append("parent", [NewEvent("t", "before")])
    assert store._pooled.idle >= 1
    ctx = mp.get_context("fork")
    done: mp.Queue[str] = ctx.Queue()
    child = ctx.Process(target=_child_appends, args=(store, "child", 100, done))
    child.start()
    for n in range(100):
        store.append("parent", [NewEvent("t", n)])
    assert done.get(timeout=60) == "ok"
    child.join(timeout=60)
    assert child.exitcode == 0
    assert len(store.read("parent")) == 101
    assert [e.payload for e in store.read("child")] == list(range(100))
