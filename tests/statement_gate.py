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


async def connections_back(store: AsyncStore, checked_out_before: int) -> None:
    """Until the asyncio engine's pool has ``checked_out_before`` connections out again
    (boundedly): a cancelled call's connection returns once it has rolled back."""
    pool = store.engine.sync_engine.pool
    deadline = time.monotonic() + DEADLINE_S
    while pool.checkedout() != checked_out_before and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert pool.checkedout() == checked_out_before
