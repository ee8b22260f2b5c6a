"""The sync store's own transactions: on kept driver connections, or on a ``Connection``.

While nothing observes the engine (``a2sql.execution.raw.observed``), a
transaction runs on a pooled driver connection's cursor, and ``Store`` keeps
a few of those checked out between transactions: checking one out of the
pool and back costs more than a whole transaction's BEGIN and COMMIT on
SQLite (the pool's checkout, and its reset on return), and a held
connection keeps what each transaction would otherwise set up again
(``a2sql.execution.raw.KeptConnection``). Otherwise the
transaction runs on a new SQLAlchemy ``Connection`` from the engine, exactly
as an application's would: listeners, logging and pool events see it all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from sqlalchemy import Engine

from a2sql.backends import backend_of
from a2sql.backends.sqlite_file import DatabaseFile
from a2sql.execution import forks
from a2sql.execution.raw import KeptConnection, RawTransaction, can_run_directly, observed
from a2sql.sql.executor import ConnectionExecutor, Transaction

T = TypeVar("T")
C = TypeVar("C")
A = TypeVar("A")

# Idle connections a store keeps on an engine of its own; more concurrent
# calls check out more and give the extra back to the pool. On the
# application's engine a store keeps none: that pool is shared with the
# application and any other store on it, and what one store keeps idle
# another cannot have.
KEEP_IDLE = 4
# A connection idle longer than this goes back to the pool before its next
# use, so the pool's own checks (pre-ping, recycle, invalidation after a
# failure seen elsewhere) apply to it again.
MAX_IDLE_S = 1.0


class _Kept(NamedTuple):
    """An idle driver connection, and when it went idle."""

    held: KeptConnection
    since: float


class TransactionRunner:
    """Runs ``Store``'s transactions on ``engine``, keeping a few connections between them."""

    def __init__(
        self,
        engine: Engine,
        *,
        lock_timeout_ms: int,
        database_file: DatabaseFile | None,
        keep_idle: int = KEEP_IDLE,
    ) -> None:
        self._engine = engine
        self._keep_idle = keep_idle
        self._lock_timeout_ms = lock_timeout_ms
        self._file = database_file
        self._backend = backend_of(engine)
        self._sends_begin = self._backend.direct_begins_itself
        self._direct = can_run_directly(engine)
        self._idle: list[_Kept] = []
        self._forks = forks.generation()
        self._abandoned: list[_Kept] = []
        self._closed = False

    @property
    def idle(self) -> int:
        """Connections kept checked out for the next transactions, unused right now."""
        return len(self._idle)

    def run(
        self, body: Callable[[Transaction, C, A], T], context: C, call: A, *, read_only: bool
    ) -> T:
        """``body(transaction, context, call)`` in one transaction: committed if it returns,
        rolled back if it raises. (Its arguments are passed on rather than bound in a
        closure: this runs for every call.)

        On a SQLite file, the file is checked after the transaction: what was read from,
        or written to, a file deleted meanwhile is not reported. And before it when no
        connection is kept idle: a new connection to a missing file would start an
        empty database there."""
        database_file = self._file
        if database_file is None:
            return self._run(body, context, call, read_only=read_only)
        if not self._idle:
            database_file.check()
        result = self._run(body, context, call, read_only=read_only)
        database_file.check()
        return result

    @property
    def direct(self) -> bool:
        """Whether the next transaction runs on the driver's cursor (``RawTransaction``)
        rather than through a ``Connection``: the driver has a direct path and nothing
        observes the engine."""
        return self._direct and not observed(self._engine)

    def _run(
        self, body: Callable[[Transaction, C, A], T], context: C, call: A, *, read_only: bool
    ) -> T:
        if self.direct:
            held = self._take()
            try:
                return self._run_direct(held, body, context, call, read_only=read_only)
            finally:
                self._give_back(held)
        backend = self._backend
        with backend.own_connection(self._engine.connect()) as connection, connection.begin():
            backend.begin_own(
                connection, read_only=read_only, busy_timeout_ms=self._lock_timeout_ms
            )
            return body(ConnectionExecutor(connection), context, call)

    def _run_direct(
        self,
        held: KeptConnection,
        body: Callable[[Transaction, C, A], T],
        context: C,
        call: A,
        *,
        read_only: bool,
    ) -> T:
        tx = RawTransaction(self._engine, held)
        self._backend.prepare_driver_connection(
            held.pooled.info, tx.scalar, busy_timeout_ms=self._lock_timeout_ms
        )
        tx.begin(read_only=read_only)
        try:
            result = body(tx, context, call)
            tx.commit()
        except BaseException:
            tx.rollback()
            raise
        return result

    def close(self) -> None:
        """Give every idle connection back to the pool; later ones go straight back too."""
        self._closed = True
        self._drop_idle()

    def _take(self) -> KeptConnection:
        if self._forks != forks.generation():
            # A forked child: the idle connections are the parent's, in use
            # there. Closing them, or letting SQLAlchemy's garbage collection
            # of unreturned connections close them, would end the parent's
            # sessions; they are set aside, untouched, for the child's life.
            self._abandoned = self._idle
            self._idle = []
            self._forks = forks.generation()
        now = time.monotonic()
        while self._idle:
            try:
                kept = self._idle.pop()
            except IndexError:  # another thread took the last one
                break
            if now - kept.since <= MAX_IDLE_S:
                return kept.held
            kept.held.release()
        error_class = self._engine.dialect.loaded_dbapi.Error
        try:
            pooled = self._engine.raw_connection()
        except error_class as error:
            # Engine.connect() wraps a failure to connect; raw_connection() does not.
            raise RawTransaction.wrap(self._engine, error, None, None, lost=True) from error
        try:
            return KeptConnection(pooled, sends_begin=self._sends_begin)
        except error_class as error:  # lost since the pool's check
            pooled.invalidate(error)
            pooled.close()
            raise RawTransaction.wrap(self._engine, error, None, None, lost=True) from error

    def _give_back(self, held: KeptConnection) -> None:
        if not held.pooled.is_valid:
            # Lost: the idle ones are likely as dead (a server restart, say).
            held.release()
            self._drop_idle()
        elif self._closed or len(self._idle) >= self._keep_idle:
            held.release()
        else:
            self._idle.append(_Kept(held, time.monotonic()))

    def _drop_idle(self) -> None:
        while self._idle:
            try:
                kept = self._idle.pop()
            except IndexError:
                return
            kept.held.release()
