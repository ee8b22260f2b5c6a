"""One way for the UI to call a ``Store`` or an ``AsyncStore``: awaited either way.

A ``Store``'s calls block, so they run in Starlette's thread pool; an
``AsyncStore``'s are awaited on the server's loop.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool

from a2sql.api.async_store import AsyncStore
from a2sql.api.store import Store
from a2sql.api.stream import EventStream
from a2sql.core.records import StoredEvent

T = TypeVar("T")


class StoreCalls:
    """The store the UI reads and acts on, its calls awaited whatever its kind."""

    def __init__(self, store: Store | AsyncStore) -> None:
        if not isinstance(store, (Store, AsyncStore)):
            raise TypeError(f"a2sql.ui.app needs a Store or an AsyncStore, not {type(store)!r}")
        self.store = store

    @property
    def is_async(self) -> bool:
        """Whether the store is an ``AsyncStore``."""
        return isinstance(self.store, AsyncStore)

    async def __call__(self, method: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``method`` (a bound method of the store, its ``inspect`` or ``presence``)
        called with the arguments, and its result."""
        if inspect.iscoroutinefunction(method):
            return await method(*args, **kwargs)
        return await run_in_threadpool(method, *args, **kwargs)

    async def follow(self, session_id: str, after: int) -> AsyncIterator[StoredEvent]:
        """The session's events after ``after``, then new ones as they are appended,
        until the consumer stops (a closed page ends the server's response)."""
        if isinstance(self.store, AsyncStore):
            async with self.store.stream(session_id, start_after=after) as events:
                async for event in events:
                    yield event
            return
        # A Store's stream waits in a thread. When the page goes away the server
        # cancels this generator: the wait is abandoned at once (not awaited
        # until the next event), and closing the stream wakes and ends the thread.
        stream: EventStream = self.store.stream(session_id, start_after=after)
        try:
            while True:
                found = await anyio.to_thread.run_sync(
                    _next_or_none, stream, abandon_on_cancel=True
                )
                if found is None:
                    return
                yield found
        finally:
            stream.close()


def _next_or_none(stream: EventStream) -> StoredEvent | None:
    return next(stream, None)
