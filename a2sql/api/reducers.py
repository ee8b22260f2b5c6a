"""Folding a session's events into state, with snapshots so the fold stays short."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from a2sql.api.async_store import AsyncOperations
from a2sql.api.store import Operations
from a2sql.core import arguments as validate
from a2sql.core.records import JSON, Event, StateRead

S = TypeVar("S", bound=JSON)
Reducer = Callable[[S, Event], S]
DEFAULT_SNAPSHOT_EVERY = 100


def _fold(
    read: StateRead, reducer: Reducer[S], initial: S, snapshot_every: int
) -> tuple[S, int | None]:
    """The state, and the index to snapshot it at (``None``: not due yet)."""
    state: S = initial if read.snapshot is None else read.snapshot.state  # type: ignore[assignment]
    for event in read.events:
        state = reducer(state, event)
    due = len(read.events) >= snapshot_every
    return state, read.events[-1].index if due else None


def reduce(
    store: Operations,
    session_id: str,
    name: str,
    reducer: Reducer[S],
    initial: S,
    *,
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
) -> S:
    """The session's state under reducer ``name``: the latest snapshot (or ``initial``)
    folded with every event after it by ``reducer(state, event) -> state``.

    When ``snapshot_every`` or more events were folded, the result is stored
    as the new snapshot, so the next read starts there. ``reducer`` must be
    deterministic and its state JSON; give it a new ``name`` when its logic
    changes, as old snapshots hold the old logic's state.
    """
    every = validate.integer(snapshot_every, "snapshot_every", minimum=1)
    state, at = _fold(store.read_state(session_id, name), reducer, initial, every)
    if at is not None:
        store.put_snapshot(session_id, name, at, state)
    return state


async def reduce_async(
    store: AsyncOperations,
    session_id: str,
    name: str,
    reducer: Reducer[S],
    initial: S,
    *,
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
) -> S:
    """``reduce`` on an ``AsyncStore`` (or its ``using(...)``)."""
    every = validate.integer(snapshot_every, "snapshot_every", minimum=1)
    state, at = _fold(await store.read_state(session_id, name), reducer, initial, every)
    if at is not None:
        await store.put_snapshot(session_id, name, at, state)
    return state
