"""Run the conformance suite through AsyncStore: a blocking view of its coroutines.

The adapter owns an event loop in a thread of its own and forwards each
method to the AsyncStore there, so the very same tests drive both facades.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy import Executable

import a2sql
from a2sql import AsyncEventStream, AsyncStore, StoredEvent

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wrap() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _Forward:
    """Every coroutine method of the wrapped object, run to completion on the loop."""

    def __init__(self, loop: _Loop, target: Any) -> None:
        self._loop = loop
        self._target = target

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if isinstance(result, Coroutine):
                return self._loop.run(result)
            return result

        return call


class BlockingStream:
    """``AsyncEventStream`` as the sync ``EventStream`` interface."""

    def __init__(self, loop: _Loop, stream: AsyncEventStream) -> None:
        self._loop = loop
        self._stream = stream

    @property
    def last_index(self) -> int:
        return self._stream.last_index

    def __iter__(self) -> BlockingStream:
        return self

    def __next__(self) -> StoredEvent:
        try:
            return self._loop.run(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def poll(self) -> list[StoredEvent]:
        return self._loop.run(self._stream.poll())

    def close(self) -> None:
        self._loop.run(self._stream.aclose())

    def __enter__(self) -> BlockingStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class BlockingAsyncStore(_Forward):
    """An AsyncStore that answers like a Store: what the conformance tests call."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        loop = _Loop()

        async def open_store() -> AsyncStore:
            store = a2sql.create_async_store(url, **kwargs)
            await store.ensure_schema()
            return store

        try:
            store = loop.run(open_store())
        except BaseException:
            loop.stop()
            raise
        super().__init__(loop, store)
        self.async_store = store
        self.presence = _Forward(loop, store.presence)
        self.inspect = _Forward(loop, store.inspect)

    def stream(self, session_id: str, **kwargs: Any) -> BlockingStream:
        async def start() -> AsyncEventStream:
            return self.async_store.stream(session_id, **kwargs)

        return BlockingStream(self._loop, self._loop.run(start()))

    def execute_sql(self, statement: Executable) -> None:
        """Run a statement in a transaction of the store's engine (tests that forge states)."""

        async def run() -> None:
            async with self.async_store.engine.begin() as connection:
                await connection.execute(statement)

        self._loop.run(run())

    def close(self) -> None:
        try:
            self._loop.run(self.async_store.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> BlockingAsyncStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def execute_sql(store: Any, statement: Executable) -> None:
    """Run a statement on the database under ``store``, whichever facade it is."""
    if isinstance(store, BlockingAsyncStore):
        store.execute_sql(statement)
        return
    with store.engine.begin() as connection:
        connection.execute(statement)
