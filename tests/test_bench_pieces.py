"""``python -m bench --without PIECE``: each execution-layer piece turned off changes how
a store's statements reach PostgreSQL, as its round trips show, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import event

import a2sql
from a2sql import NewEvent
from bench import impl
from bench.round_trips import Counter


@pytest.fixture
def every_piece_on_after() -> Iterator[None]:
    yield
    impl.without_pieces(frozenset())


def _appends(url: str, pieces: frozenset[str]) -> tuple[float, list[int]]:
    """Round trips per append of one event (20 of them), with ``pieces`` off, on a store
    counted as bench counts; and the indexes the appends got."""
    impl.without_pieces(pieces)
    counter = Counter()
    store = a2sql.create_store(counter.engine(url), migrate=False)
    impl.take_pieces_off(store)
    try:
        store.append("warm", [NewEvent("t")])
        before = counter.round_trips
        indexes = [store.append(str(pieces), [NewEvent("t")]).events[0].index for _ in range(20)]
        return (counter.round_trips - before) / 20, indexes
    finally:
        store.close()


def test_each_piece_off_costs_round_trips_and_changes_nothing_else(
    migrated_postgres_url: str, every_piece_on_after: None
) -> None:
    on, indexes = _appends(migrated_postgres_url, frozenset())
    assert on == pytest.approx(1.0, abs=0.1)  # the lock tried and the insert, at once
    for piece in ("one-statement", "raw"):
        off, same = _appends(migrated_postgres_url, frozenset({piece}))
        assert off >= 3, piece  # BEGIN and the lock, the statements, COMMIT
        assert same == indexes == list(range(1, 21))
    again, _ = _appends(migrated_postgres_url, frozenset())
    assert again == pytest.approx(1.0, abs=0.1)  # back on


def test_without_kept_connections_each_transaction_checks_one_out_of_the_pool(
    migrated_postgres_url: str, every_piece_on_after: None
) -> None:
    """``--without kept``: a pool checkout per transaction, where a store opened from a
    URL otherwise keeps its connections between them; the same appends."""
    checkouts: dict[str, int] = {}
    counted: list[object] = []
    for piece in ("on", "kept"):
        impl.without_pieces(frozenset({piece} - {"on"}))
        store = a2sql.create_store(migrated_postgres_url, migrate=False)
        event.listen(store.engine.pool, "checkout", lambda *args: counted.append(args))
        impl.take_pieces_off(store)
        try:
            store.append("warm", [NewEvent("t")])
            before = len(counted)
            indexes = [store.append(piece, [NewEvent("t")]).events[0].index for _ in range(20)]
            checkouts[piece] = len(counted) - before
            assert indexes == list(range(1, 21))
        finally:
            store.close()
    assert checkouts == {"on": 0, "kept": 20}
