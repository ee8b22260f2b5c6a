"""How an ``AsyncStore`` runs its own transactions: whole, on the sync path, one hand-off
per operation rather than one per statement.

Through SQLAlchemy's asyncio engine every statement crosses between the event
loop and the driver (aiosqlite's thread, or psycopg's async mode through a
greenlet), and a cycle has a dozen. An ``AsyncStore`` opened from a URL also
has a sync engine of the same database and runs each operation there, with
``Store``'s code:

- SQLite: on the event loop's own thread, without waiting for a lock (its
  busy timeout is 0). A transaction of a few statements on a local file
  takes tens of microseconds, less than a hand-off to a thread and back;
  WAL readers never wait. Each call first lets the loop turn once (other
  tasks, due timers, signal handlers run), as a hand-off would. Only a write
  that finds another writer holding the lock is handed to a thread of its
  own, where it waits as ``Store``'s would: writers are one at a time
  anyway, so one thread serves them.
- PostgreSQL: in a thread per call from a small pool, while the loop runs
  other tasks: concurrency is what the loop is for. (The hot writes go from
  the loop itself, in one round trip each, where they can: a2sql.execution.onloop.)

A call cancelled while its thread runs it either commits nothing or, when
its commit had already begun, completes: ``CancelledError`` always means
nothing was committed. The caller gets ``CancelledError`` at once; on
PostgreSQL the statement running is cancelled on the server (a lock wait
ends), on SQLite the statements run to their end; then the transaction
rolls back.

The asyncio engine still serves ``using()``, ``begin()``, streams and the
schema check, and any operation while something would watch its statements
(an event listener on it, SQL logging, OpenTelemetry's instrumentation):
what they see stays what the application gave a2sql.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from a2sql.backends.sqlite_file import DatabaseFile
from a2sql.core.errors import closed_store
from a2sql.execution.running import run_in_transaction
from a2sql.execution.transactions import KEEP_IDLE, TransactionRunner
from a2sql.plans.kinds import Context, Plan
from a2sql.sql.executor import Transaction

T = TypeVar("T")

# Threads for PostgreSQL calls, each on a connection of the sync engine's pool
# (5 + 10 by default): more would only wait for a connection.
POSTGRES_THREADS = 15


class Abandoned(Exception):
    """Raised in a handed-off transaction whose caller was cancelled: it rolls back."""


class Job:
    """One call run apart from its caller (in a thread, or an asyncio task of its own),
    and the one decision the call and its cancelled caller race for: roll back
    (``abandon``) or commit (``commit``), whichever comes first."""

    __slots__ = ("_abandoned", "_committing", "_driver", "_lock", "call")

    def __init__(self, call: Plan[Any]) -> None:
        self.call = call
        self._lock = threading.Lock()
        self._abandoned = False
        self._committing = False
        # The PostgreSQL connection while the call's statements run on it.
        self._driver: Any = None

    def abandon(self) -> bool:
        """The caller was cancelled: whether the transaction will now roll back (``False``:
        its commit has begun, and the call completes)."""
        with self._lock:
            if not self._committing:
                self._abandoned = True
            return self._abandoned

    def commit(self) -> bool:
        """The statements have run: whether the transaction may commit."""
        with self._lock:
            if not self._abandoned:
                self._committing = True
            return self._committing

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def running_on(self, driver: Any) -> None:
        """The call's statements run on ``driver`` from now on (``None``: no longer)."""
        with self._lock:
            self._driver = driver

    def interrupt(self) -> None:
        """Cancel the statement the abandoned call is running, a lock wait say, so that it
        rolls back now rather than when the wait ends. Holding the lock, the call's
        thread cannot give the connection back (to a call this would cancel) meanwhile."""
        with self._lock:
            if self._driver is not None:
                with suppress(Exception):  # a lost connection: nothing to cancel
                    self._driver.cancel_safe()


def _unless_abandoned(transaction: Transaction, ctx: Context, job: Job) -> Any:
    # The commit is decided here, after the statements: a pipeline leaves the
    # transaction open (a2sql.backends.postgresql.one_statement).
    transaction.commits_later = True
    job.running_on(transaction.driver_connection)
    try:
        result = run_in_transaction(transaction, ctx, job.call)
    finally:
        job.running_on(None)
    if not job.commit():
        raise Abandoned
    return result


def _retrieve_outcome(future: asyncio.Future[Any]) -> None:
    """A done callback for a call nobody awaits any more: its error is not logged as
    never retrieved."""
    if not future.cancelled():
        future.exception()


async def decided(
    job: Job, running: asyncio.Future[T], abandon: Callable[[], Awaitable[None]]
) -> T:
    """The result of ``running``, which runs ``job``'s call apart from its caller.

    Cancelled, the caller races the call for ``job``'s one decision. Before the
    commit began, the call rolls back: ``abandon`` hastens that (a statement
    cancelled on the server, say), then ``CancelledError`` is raised. After, the
    call completes and its result is returned, as a task ``asyncio.wait_for``
    cancels returns its result when it finishes anyway; the cancellation came too
    late and is taken back (``Task.uncancel``).
    """
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        if job.abandon():
            # It raises Abandoned, which nobody awaits.
            running.add_done_callback(_retrieve_outcome)
            await abandon()
            raise
    task = asyncio.current_task()
    while True:
        if task is not None:
            task.uncancel()
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            pass


def _busy(error: OperationalError) -> bool:
    return getattr(error.orig, "sqlite_errorname", None) == "SQLITE_BUSY"


class ThreadRunner:
    """An ``AsyncStore``'s own transactions on ``engine``, a sync engine of its database."""

    def __init__(self, engine: Engine, ctx: Context, database_file: DatabaseFile | None) -> None:
        self.engine = engine
        # One writer at a time (SQLite): calls run inline, on the loop's thread,
        # and only a write that finds the lock held goes to the one thread.
        one_writer = ctx.backend.capabilities.one_writer
        self._cancellable = ctx.backend.capabilities.cancellable_statements
        self._waiting = TransactionRunner(
            engine,
            lock_timeout_ms=ctx.lock_timeout_ms,
            database_file=database_file,
            keep_idle=1 if one_writer else KEEP_IDLE,
        )
        self._inline = (
            TransactionRunner(engine, lock_timeout_ms=0, database_file=database_file, keep_idle=1)
            if one_writer
            else None
        )
        self._closed = False
        self._executor = ThreadPoolExecutor(
            max_workers=1 if one_writer else POSTGRES_THREADS, thread_name_prefix="a2sql-async"
        )
        # The calls handed to the threads that have not ended (nor given their
        # connection back).
        self._handed: set[Future[Any]] = set()

    async def run(self, ctx: Context, call: Plan[T]) -> T:
        """``call`` in one transaction: committed, or rolled back and raised."""
        if self._inline is not None:
            # Run inline, the call would never suspend: a task looping on the
            # store would starve the loop's other tasks, its timers and its
            # signal handlers. One turn of the loop first, before anything runs,
            # so that a cancellation there still means nothing was committed.
            await asyncio.sleep(0)
            try:
                return self._inline.run(run_in_transaction, ctx, call, read_only=call.read_only)
            except OperationalError as error:
                # Another writer holds the lock (or the switch to WAL): nothing
                # ran but BEGIN, rolled back. Wait for it in the thread.
                if not _busy(error):
                    raise
        job = Job(call)
        try:
            handed = self._executor.submit(self._in_thread, ctx, job)
        except RuntimeError:  # the executor was shut down: the store closed meanwhile
            raise closed_store() from None
        self._handed.add(handed)
        handed.add_done_callback(self._handed.discard)
        return await decided(job, asyncio.wrap_future(handed), partial(self._abandoned, job))

    async def _abandoned(self, job: Job) -> None:
        if self._cancellable:
            # Sending a cancel request takes a connection to the server: not on
            # the loop's thread, nor on a busy pool's.
            threading.Thread(target=job.interrupt, name="a2sql-cancel").start()

    def _in_thread(self, ctx: Context, job: Job) -> Any:
        if self._closed:
            raise closed_store()
        if job.abandoned:  # cancelled while queued
            raise Abandoned
        return self._waiting.run(_unless_abandoned, ctx, job, read_only=job.call.read_only)

    def stop(self) -> None:
        """Hand no more calls to the threads: those still queued fail with
        ``STORE_CLOSED``; those running finish."""
        self._closed = True
        self._executor.shutdown(wait=False)

    def close(self, *, wait: bool = True) -> None:
        """``stop``, then give back the connections kept and dispose of the engine, once
        the calls running have given theirs back (given back to an engine disposed of,
        a connection stays open until collected): at once if none runs, else in a
        thread of its own that waits for them, as a call may be waiting for a lock.
        ``wait=False`` (a store collected, perhaps in one of these threads): at once."""
        self.stop()
        if wait and self._handed:
            threading.Thread(target=self._release, name="a2sql-close").start()
        else:
            self._release(wait=False)

    def _release(self, *, wait: bool = True) -> None:
        self._executor.shutdown(wait=wait)
        self._waiting.close()
        if self._inline is not None:
            self._inline.close()
        self.engine.dispose()
