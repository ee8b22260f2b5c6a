"""Tailing a session: every event after a start index, then new ones as they commit.

Indexes are gapless and only ever appended, so reading after the last index
yielded never skips or repeats one. Between reads a stream sleeps until a
wake-up (a2sql.notify.wakeups) or its poll interval, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType

from a2sql.core.records import StoredEvent
from a2sql.notify.wakeups import Callback

# Rows held at once: a stream of any length reads page by page.
STREAM_PAGE = 100

# read_page(after_index, limit): the next events of the session, by index.
PageReader = Callable[[int, int], list[StoredEvent]]
AsyncPageReader = Callable[[int, int], Awaitable[list[StoredEvent]]]
# subscribe(callback) -> unsubscribe
Subscribe = Callable[[Callback], Callback]


class _Position:
    """Where a stream stands: the last index it yielded and the page read ahead."""

    def __init__(self, start_after: int) -> None:
        self.last_index = start_after
        self.ahead: deque[StoredEvent] = deque()

    def take(self) -> StoredEvent:
        event = self.ahead.popleft()
        self.last_index = event.index
        return event

    def take_all(self) -> list[StoredEvent]:
        events = list(self.ahead)
        self.ahead.clear()
        if events:
            self.last_index = events[-1].index
        return events


class EventStream(Iterator[StoredEvent]):
    """An iterator over a session's events that waits for new ones until closed.

    ``close()`` (or leaving a ``with`` block) ends the iteration, also from
    another thread. It holds a connection only while it reads a page.
    """

    def __init__(
        self,
        read_page: PageReader,
        subscribe: Subscribe,
        *,
        start_after: int,
        poll_interval: float,
    ) -> None:
        self._read_page = read_page
        self._at = _Position(start_after)
        self._poll_interval = poll_interval
        self._closed = False
        self._wake = threading.Event()
        self._unsubscribe = subscribe(self._wake.set)
        # A stream dropped without close() must not stay subscribed forever.
        self._finalizer = weakref.finalize(self, self._unsubscribe)

    @property
    def last_index(self) -> int:
        """The index of the last event yielded (or ``start_after``)."""
        return self._at.last_index

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> StoredEvent:
        while not self._at.ahead:
            if self._closed:
                raise StopIteration
            self._wake.clear()
            page = self._read_page(self._at.last_index, STREAM_PAGE)
            if page:
                self._at.ahead.extend(page)
            else:
                self._wake.wait(self._poll_interval)
        if self._closed:
            raise StopIteration
        return self._at.take()

    def poll(self) -> list[StoredEvent]:
        """The events available now (at most one page), without waiting."""
        if self._closed:
            return []
        if not self._at.ahead:
            self._at.ahead.extend(self._read_page(self._at.last_index, STREAM_PAGE))
        return self._at.take_all()

    def close(self) -> None:
        """Stop the stream; a ``next()`` waiting in another thread returns promptly."""
        if not self._closed:
            self._closed = True
            self._at.ahead.clear()
            self._finalizer()
            self._wake.set()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncEventStream(AsyncIterator[StoredEvent]):
    """The async iterator of ``AsyncStore.stream``.

    ``aclose()`` (or leaving ``async with``) ends it, and so does cancelling
    the task while it waits in ``__anext__``.
    """

    def __init__(
        self,
        read_page: AsyncPageReader,
        subscribe: Subscribe,
        *,
        start_after: int,
        poll_interval: float,
    ) -> None:
        self._read_page = read_page
        self._at = _Position(start_after)
        self._poll_interval = poll_interval
        self._closed = False
        self._wake = event = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:
            # Called from a committing thread, a listener thread or this loop.
            # It holds the event, not the stream, so a dropped stream is freed.
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
                loop.call_soon_threadsafe(event.set)

        self._finalizer = weakref.finalize(self, subscribe(wake))

    @property
    def last_index(self) -> int:
        """The index of the last event yielded (or ``start_after``)."""
        return self._at.last_index

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> StoredEvent:
        try:
            while not self._at.ahead:
                if self._closed:
                    raise StopAsyncIteration
                self._wake.clear()
                page = await self._read_page(self._at.last_index, STREAM_PAGE)
                if page:
                    self._at.ahead.extend(page)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self._poll_interval)
        except asyncio.CancelledError:
            # Cancelling the task that iterates ends the stream.
            self._close()
            raise
        if self._closed:
            raise StopAsyncIteration
        return self._at.take()

    async def poll(self) -> list[StoredEvent]:
        """The events available now (at most one page), without waiting."""
        if self._closed:
            return []
        if not self._at.ahead:
            self._at.ahead.extend(await self._read_page(self._at.last_index, STREAM_PAGE))
        return self._at.take_all()

    async def aclose(self) -> None:
        """Stop the stream."""
        self._close()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._at.ahead.clear()
            self._finalizer()
            self._wake.set()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
