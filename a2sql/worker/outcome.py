"""What a handler may return besides a list of events: ``Outcome``, compute then commit;
and ``HandlerTimeout``, the error a handler that ran too long fails with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from a2sql.core.records import NewEvent

#: ``Outcome.write`` for a ``Worker``: the app's writes on the completion's connection.
Write: TypeAlias = Callable[[Connection], Any]
#: ``Outcome.write`` for an ``AsyncWorker``: a coroutine function over its ``AsyncConnection``.
AsyncWrite: TypeAlias = Callable[[AsyncConnection], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """A handler's result, computed outside any transaction, and what to commit with it.

    The handler does the slow part (the model call, the tool) with no
    transaction open and returns ``Outcome(events=[...], write=fn)``. The
    worker then opens one short transaction, calls ``write(connection)`` for
    the application's own writes, completes the attempt with ``events`` in
    the same transaction and commits: the writes and the completion commit
    together or not at all. If the attempt was superseded meanwhile (its
    claim lost), the writes are rolled back and never retried; if the
    commit's reply is lost, the event is read back before anything runs
    again, so ``write`` runs again only when its transaction did not commit.
    ``write`` must not commit or roll back itself; a ``write`` that raises
    fails the attempt, like a handler that raises.

    For an ``AsyncWorker``, ``write`` is a coroutine function over an
    ``AsyncConnection`` (a plain function's return value is awaited if it
    is awaitable).
    """

    events: Sequence[NewEvent] = field(default=())
    write: Write | AsyncWrite | None = None


class HandlerTimeout(TimeoutError):
    """A handler ran longer than the worker's ``timeout_s``: its attempt is failed with
    this error (counted toward ``max_failures``, retried after the backoff), and
    whatever the handler returns late is never submitted."""


def timeout_error(timeout_s: float) -> HandlerTimeout:
    return HandlerTimeout(f"the handler ran longer than timeout_s={timeout_s:g}")


#: What a handler may return: the events it caused, an ``Outcome``, or ``None``.
Returned: TypeAlias = Sequence[NewEvent] | Outcome | None
