"""``python -m bench --without PIECE``: each execution-layer piece turned off changes how
a store's statements reach PostgreSQL, as its round trips show, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
