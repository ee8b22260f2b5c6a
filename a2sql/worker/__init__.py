"""Workers: claim events across sessions, run a handler on each, complete or fail them.

``Worker`` runs synchronous handlers on a ``Store``, ``AsyncWorker`` coroutine
handlers on an ``AsyncStore``; ``Backoff`` is how long failed events wait.
"""

from a2sql.worker.aio import AsyncAttempt, AsyncHandler, AsyncWorker
from a2sql.worker.policy import Backoff
from a2sql.worker.threaded import Attempt, Handler, Worker

__all__ = ["AsyncAttempt", "AsyncHandler", "AsyncWorker", "Attempt", "Backoff", "Handler", "Worker"]
