"""Tailing a session: yield every event after a start index, then new ones as they commit."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from a2sql.records import StoredEvent

if TYPE_CHECKING:
    from a2sql.store import Store

# Rows held at once: a stream of any length reads page by page.
STREAM_PAGE = 100


class EventStream(Iterator[StoredEvent]):
    """An iterator over a session's events that polls for new ones until closed.

    Indexes are gapless and only ever appended, so reading after the last
    index yielded never skips or repeats one. ``close()`` (or leaving a
    ``with`` block) ends the iteration, also from another thread.
    """

    def __init__(
        self, store: Store, session_id: str, *, start_after: int, poll_interval: float
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._last_index = start_after
        self._poll_interval = poll_interval
        self._buffer: deque[StoredEvent] = deque()
        self._closed = threading.Event()

    @property
    def last_index(self) -> int:
        """The index of the last event yielded (or ``start_after``)."""
        return self._last_index

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> StoredEvent:
        while not self._buffer:
            if self._closed.is_set():
                raise StopIteration
            page = self._store._read_page(self._session_id, self._last_index, STREAM_PAGE)
            if page:
                self._buffer.extend(page)
            else:
                self._closed.wait(self._poll_interval)
        if self._closed.is_set():
            self._buffer.clear()
            raise StopIteration
        event = self._buffer.popleft()
        self._last_index = event.index
        return event

    def poll(self) -> list[StoredEvent]:
        """The events available now, without waiting (at most one page)."""
        if self._closed.is_set():
            return []
        if not self._buffer:
            self._buffer.extend(
                self._store._read_page(self._session_id, self._last_index, STREAM_PAGE)
            )
        events = list(self._buffer)
        self._buffer.clear()
        if events:
            self._last_index = events[-1].index
        return events

    def close(self) -> None:
        """Stop the stream; a ``next()`` waiting in another thread returns promptly."""
        self._closed.set()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
