"""A connection of an asyncio engine opened whole, whatever happens to the task that asked.

psycopg's connecting, cancelled once the server has the session ready but before
the client has read so, leaves the half-made connection to the garbage collector:
its session stays open on the server until then (a cancellation storm left a few
so after each run). A connection is therefore opened in a task of its own: the
caller cancelled meanwhile gets ``CancelledError`` at once, and the connection,
once open, is closed, not pooled (whether SQLAlchemy set it up whole is unknown).
Every checkout from the pool goes so, not only those that open a connection: the
pool may reconnect a connection invalidated there, and which one it hands out is not
known beforehand. (An ``AsyncStore``'s hot writes take the connections it keeps
between calls, without the pool.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextlib import suppress
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from a2sql.backends import backend_of

# Runs a coroutine in a task of its own, and returns the task.
Later = Callable[[Coroutine[Any, Any, Any]], "asyncio.Future[Any]"]


async def opened(engine: AsyncEngine, later: Later = asyncio.ensure_future) -> AsyncConnection:
    """``await engine.connect()``, run whole in ``later``'s task (one its owner's close
    waits for): if the caller is cancelled meanwhile, the connection is closed once
    open, in another of ``later``'s tasks."""
    if not backend_of(engine).capabilities.network_connections:
        return await engine.connect()
    opening = later(engine.connect().start())
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(partial(_unwanted, later))
        raise


def _unwanted(later: Later, opening: asyncio.Future[AsyncConnection]) -> None:
    if opening.cancelled() or opening.exception() is not None:
        return
    later(invalidated(opening.result()))


async def invalidated(connection: AsyncConnection) -> None:
    """A connection left in an unknown state back to the pool, closed."""
    with suppress(Exception):
        await connection.invalidate()
    await connection.close()
