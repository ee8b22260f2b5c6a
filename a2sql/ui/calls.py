"""One way for the UI to call a ``Store`` or an ``AsyncStore``: awaited either way.

A ``Store``'s calls block, so they run in Starlette's thread pool; an
``AsyncStore``'s are awaited on the server's loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from a2sql.api.async_store import AsyncStore
from a2sql.api.store import Store


class StoreCalls:
    """The store the UI reads and acts on, its calls awaited whatever its kind."""

    def __init__(self, store: Store | AsyncStore) -> None:
        if not isinstance(store, (Store, AsyncStore)):
            raise TypeError(f"a2sql.ui.app needs a Store or an AsyncStore, not {type(store)!r}")
        self.store = store

    async def __call__(self, method: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``method`` (a bound method of the store, its ``inspect`` or ``presence``)
        called with the arguments, and its result."""
        if inspect.iscoroutinefunction(method):
            return await method(*args, **kwargs)
        return await run_in_threadpool(method, *args, **kwargs)
