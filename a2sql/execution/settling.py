"""Awaiting a coroutine to its end, whatever happens to the task awaiting it.

A call an ``AsyncStore`` sends whole from the event loop (a2sql.execution.onloop) is, once
sent, the server's to commit or roll back, and psycopg cannot leave a pipeline
midway: a ``CancelledError`` thrown into psycopg while it waits would leave the
connection unusable and the caller not knowing whether the call committed.
Running it in a task of its own, shielded, would keep it whole, at the cost of
two more turns of the event loop per call (a sixth of the call's CPU here).
``Settling`` keeps it whole in the caller's own task instead: the task waits on
a stand-in for each future the coroutine waits on, so cancelling the task
cancels the stand-in and never the coroutine's future; the cancellation is held
back until the coroutine ends, and the caller decides what it means.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from functools import partial
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Settling(Generic[T]):
    """``await Settling(coroutine, on_cancel)``: ``coroutine``'s result, or its error,
    once it has run to its end. A cancellation of the awaiting task meanwhile is held
    back: ``cancelled`` is the first ``CancelledError`` (``None``: there was none) and
    ``cancels`` how many came; ``on_cancel()`` is called at the first."""

    __slots__ = ("_coroutine", "_on_cancel", "cancelled", "cancels")

    def __init__(self, coroutine: Coroutine[Any, Any, T], on_cancel: Callable[[], None]) -> None:
        self._coroutine = coroutine
        self._on_cancel = on_cancel
        self.cancelled: asyncio.CancelledError | None = None
        self.cancels = 0

    def _hold(self, error: asyncio.CancelledError) -> None:
        self.cancels += 1
        if self.cancelled is None:
            self.cancelled = error
            self._on_cancel()

    def __await__(self) -> Generator[Any, None, T]:
        coroutine = self._coroutine
        while True:
            try:
                waited = coroutine.send(None)
            except StopIteration as stop:
                result: T = stop.value
                return result
            if waited is None:  # a bare yield: asyncio.sleep(0)
                try:
                    yield None
                except asyncio.CancelledError as error:
                    self._hold(error)
                continue
            # A future: the coroutine resumes once it is done, as under a task.
            # ``_asyncio_future_blocking`` is asyncio's own flag (undocumented) by which
            # a future yielded from ``await`` asks its task to wait for it; a Task
            # clears it, and so must whatever steps a coroutine in a task's stead.
            # The public way, a task of its own and ``asyncio.shield``, costs two more
            # turns of the loop per call. Pinned by tests/internals/test_async_onloop.py
            # (the settling tests), which fail if asyncio changes it.
            waited._asyncio_future_blocking = False
            while not waited.done():
                stand_in = waited.get_loop().create_future()
                waited.add_done_callback(partial(_resolve, stand_in))
                try:
                    yield from stand_in
                except asyncio.CancelledError as error:
                    self._hold(error)


def _resolve(stand_in: asyncio.Future[None], _waited: object) -> None:
    if not stand_in.done():
        stand_in.set_result(None)
