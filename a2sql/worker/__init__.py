"""Workers: claim events across sessions, run a handler on each, complete or fail them.

``Worker`` runs synchronous handlers on a ``Store``, ``AsyncWorker`` coroutine
handlers on an ``AsyncStore``; a handler returns the events it caused, or an
``Outcome`` (events and the application's writes, committed together);
``Backoff`` is how long failed events wait; ``HandlerTimeout`` is what a
handler running past ``timeout_s`` fails with; ``Schedule`` is an event appended
for each slot of a period or cron expression by the workers that run it.
"""

from a2sql.worker.aio import AsyncAttempt, AsyncHandler, AsyncWorker
from a2sql.worker.outcome import AsyncWrite, HandlerTimeout, Outcome, Write
from a2sql.worker.policy import Backoff
from a2sql.worker.schedules import Schedule
from a2sql.worker.threaded import Attempt, Handler, Worker

__all__ = [
    "AsyncAttempt",
    "AsyncHandler",
    "AsyncWorker",
    "AsyncWrite",
    "Attempt",
    "Backoff",
    "Handler",
    "HandlerTimeout",
    "Outcome",
    "Schedule",
    "Worker",
    "Write",
]
