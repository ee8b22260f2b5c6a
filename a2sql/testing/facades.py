"""The ways a program reaches a store, each answering as a ``Store`` does, so that the very
same tests (the conformance suite, a2sql.testing.conformance) drive every one of them.

- ``sync``: ``Store`` as ``create_store`` opens it.
- ``async``: ``AsyncStore`` through ``BlockingAsyncStore``, which owns an event loop
  in a thread of its own and runs each coroutine to completion there.
- ``observed``: ``Store`` on an engine with a ``before_cursor_execute`` listener, so
  that its transactions run through SQLAlchemy ``Connection``s instead of on the
  driver's cursor (as under OpenTelemetry's SQLAlchemy instrumentation).
- ``async_observed``: ``AsyncStore`` whose engine has such a listener (attached to
  ``engine.sync_engine``, where SQLAlchemy's asyncio engine keeps its events), so
  that its calls run statement by statement on the asyncio engine.
- ``using``: ``Store``'s operations through ``store.using(connection)``, each in a
  transaction of its own that ``store.begin()`` opens and commits (``ThroughUsing``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar, cast

from sqlalchemy import Engine, Executable, event

import a2sql
from a2sql import AsyncEventStream, AsyncStore, Clock, Operations, Store, StoredEvent

T = TypeVar("T")

FACADES = ("sync", "async", "observed", "async_observed", "using")


def _ignore_statement(*_args: Any) -> None:
    pass


def observe(engine: Engine) -> None:
    """Attach a listener that does nothing to ``engine``: what a tracer does, which is
    enough for a2sql to run its statements through ``Connection``s."""
    event.listen(engine, "before_cursor_execute", _ignore_statement)


def open_through(facade: str, url: str, **kwargs: Any) -> Store:
    """A store on ``url`` through ``facade`` (one of ``FACADES``), opened with
    ``create_store``'s (or ``create_async_store``'s) keywords. Typed as ``Store``: every
    facade answers its calls."""
    if facade in ("async", "async_observed"):
        blocking = BlockingAsyncStore(url, **kwargs)
        if facade == "async_observed":
            observe(blocking.async_store.engine.sync_engine)
        return cast(Store, blocking)
    if facade not in FACADES:
        raise ValueError(f"facade must be one of {', '.join(FACADES)}, not {facade!r}")
    store = a2sql.create_store(url, **kwargs)
    if facade == "observed":
        observe(store.engine)
    if facade == "using":
        return cast(Store, ThroughUsing(store))
    return store


def execute_sql(store: Any, statement: Executable) -> None:
    """Run ``statement`` in a transaction of its own on the database under ``store``, around
    a2sql (to forge a state no operation makes), whichever facade ``store`` is."""
    if isinstance(store, BlockingAsyncStore):
        store.execute_sql(statement)
        return
    engine: Engine = store.engine
    with engine.begin() as connection:
        connection.execute(statement)


# --- AsyncStore, blocking ---------------------------------------------------------------


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
    """Every coroutine method of the wrapped object, run to completion on the loop; its
    other attributes as they are."""

    def __init__(self, loop: _Loop, target: Any) -> None:
        self._loop = loop
        self._target = target

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._target, name)
        if not callable(found):
            return found
        method: Callable[..., Any] = found

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
    """An ``AsyncStore`` that answers like a ``Store``: what the conformance tests call.
    Opening it checks the schema (``ensure_schema``), so that what ``create_async_store``
    would refuse at the first operation is refused here."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        loop = _Loop()

        async def open_store() -> AsyncStore:
            store = a2sql.create_async_store(url, **kwargs)
            try:
                await store.ensure_schema()
            except BaseException:
                await store.close()
                raise
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
        self._closed = False

    @property
    def engine(self) -> Any:
        """The ``AsyncStore``'s asyncio engine."""
        return self.async_store.engine

    @property
    def clock(self) -> Clock:
        return self.async_store.clock

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
        """Close the ``AsyncStore`` and stop the loop; again: nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self.async_store.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> BlockingAsyncStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- Store, through using() ------------------------------------------------------------

# The operations ``store.using(connection)`` answers: ``Operations``' public methods.
USING_OPERATIONS = frozenset(
    name
    for name in dir(Operations)
    if not name.startswith("_") and callable(getattr(Operations, name))
)


class ThroughUsing:
    """A ``Store`` whose every operation runs through ``store.using(connection)``, in a
    transaction of its own: ``store.begin()`` opens it for that one call and commits it
    after (or rolls it back if the call raises). What is not an operation of
    ``using`` (``stream``, ``watch``) is not here: an ``AttributeError`` says so."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.presence = _UsingPart(self, "presence")
        self.inspect = _UsingPart(self, "inspect")

    @property
    def engine(self) -> Engine:
        return self.store.engine

    @property
    def clock(self) -> Clock:
        return self.store.clock

    @contextmanager
    def _using(self) -> Iterator[a2sql.UsingConnection]:
        with self.store.begin() as connection:
            yield self.store.using(connection)

    def run(self, call: Callable[[a2sql.UsingConnection], T]) -> T:
        """``call(store.using(connection))`` in a transaction of its own, committed."""
        with self._using() as using:
            return call(using)

    def __getattr__(self, name: str) -> Any:
        if name not in USING_OPERATIONS:
            raise AttributeError(
                f"{name!r} is not an operation of store.using(connection) (the facade "
                "'using' runs only those): a test that needs it does not apply to 'using'"
            )

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.run(lambda using: getattr(using, name)(*args, **kwargs))

        return call

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> ThroughUsing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _UsingPart:
    """``store.presence`` or ``store.inspect``, each call through ``using``."""

    def __init__(self, owner: ThroughUsing, part: str) -> None:
        self._owner = owner
        self._part = part

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._owner.run(
                lambda using: getattr(getattr(using, self._part), name)(*args, **kwargs)
            )

        return call


__all__ = [
    "FACADES",
    "BlockingAsyncStore",
    "BlockingStream",
    "ThroughUsing",
    "execute_sql",
    "observe",
    "open_through",
]
