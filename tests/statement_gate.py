"""A gate that suspends one statement of an ``AsyncStore``'s asyncio engine inside its
transaction, for tests that cancel a call midway."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.util import await_only

from a2sql import AsyncStore
from a2sql.execution.transactions import KEEP_IDLE

DEADLINE_S = 20


class StatementGate:
    """Suspends the next statement ``matches`` accepts (lower-cased SQL) while ``armed``,
    until cancelled (PostgreSQL interrupts a cancelled call's statement) or ``remove()``
    (on SQLite a cancelled call's statements run to their end, then roll back)."""

    def __init__(
        self, store: AsyncStore, matches: Callable[[str], bool], *, armed: bool = True
    ) -> None:
        self.armed = armed
        self.reached = asyncio.Event()
        self._matches = matches
        self._engine = store.engine.sync_engine
        self._held: asyncio.Future[None] | None = None
        event.listen(self._engine, "before_cursor_execute", self._hook)

    def _hook(self, *args: Any) -> None:
        if self.armed and self._matches(str(args[2]).lower()):
            self.armed = False
            self.reached.set()
            self._held = asyncio.get_running_loop().create_future()
            await_only(self._held)

    def remove(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._hook)
        if self._held is not None and not self._held.done():
            self._held.set_result(None)


def checked_out(store: AsyncStore) -> int:
    """Connections of the asyncio engine's pool in use: checked out, less those the store
    keeps idle between the calls it sends from the loop (a2sql.execution.onloop)."""
    on_loop = store._on_loop
    idle = 0 if on_loop is None else on_loop.idle
    assert idle <= KEEP_IDLE
    return int(store.engine.sync_engine.pool.checkedout()) - idle


async def connections_back(store: AsyncStore, checked_out_before: int) -> None:
    """Until ``checked_out_before`` connections of the asyncio engine's pool are in use
    again (boundedly): a cancelled call's connection returns once it has rolled back."""
    deadline = time.monotonic() + DEADLINE_S
    while checked_out(store) != checked_out_before and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert checked_out(store) == checked_out_before
