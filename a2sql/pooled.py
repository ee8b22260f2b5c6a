"""The sync store's own transactions, on a few SQLAlchemy ``Connection``s kept between them.

Checking a connection out of the pool and back costs more than a whole
transaction's BEGIN and COMMIT on SQLite (the pool's checkout, and its reset
on return). ``PooledTransactions`` keeps a few ``Connection``s open between a
store's transactions and runs each transaction on one: ``begin()``, the body,
commit, or rollback when the body raises. Everything goes through the
``Connection``, so the engine's listeners see a2sql's transactions as any
other: ``begin``, ``commit``, ``rollback``, and every statement in between;
on SQLite, while nothing observes the engine, the transaction runs on the
connection's driver cursor instead (``a2sql.direct``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from sqlalchemy import Connection, Engine

from a2sql import forks
from a2sql.begin import begin_own, is_prepared
from a2sql.direct import DirectTransaction, can_run_directly, observed
from a2sql.execute import Transaction

T = TypeVar("T")
C = TypeVar("C")
A = TypeVar("A")

# Idle connections a store keeps; more concurrent calls check out more and
# give the extra back to the pool.
KEEP_IDLE = 4
# A connection idle longer than this goes back to the pool before its next
# use, so the pool's own checks (pre-ping, recycle, invalidation after a
# failure seen elsewhere) apply to it again.
MAX_IDLE_S = 1.0


class _Kept(NamedTuple):
    """An idle connection, and when it went idle."""

    connection: Connection
    since: float


class PooledTransactions:
    """Runs transactions on connections of ``engine``'s pool, keeping a few between them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
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
        """``body(connection, context, call)`` in one transaction: committed if it returns,
        rolled back if it raises. (Its arguments are passed on rather than bound in a
        closure: this runs for every call.)"""
        connection = self._take()
        try:
            # SQLite's pragmas are set through the Connection, once per connection.
            if (
                self._direct
                and (is_prepared(connection) or not self._sqlite)
                and not observed(self._engine)
            ):
                return _run_direct(
                    self._engine, connection, body, context, call, read_only=read_only
                )
            with connection.begin():
                if self._sqlite:
                    begin_own(connection, read_only=read_only)
                return body(connection, context, call)
        finally:
            self._give_back(connection)

    def close(self) -> None:
        """Give every idle connection back to the pool; later ones go straight back too."""
        self._closed = True
        self._drop_idle()

    def _take(self) -> Connection:
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
                return kept.connection
            kept.connection.close()
        return self._engine.connect()

    def _give_back(self, connection: Connection) -> None:
        if connection.invalidated:
            # Lost: the idle ones are likely as dead (a server restart, say).
            connection.close()
            self._drop_idle()
        elif self._closed or len(self._idle) >= KEEP_IDLE:
            connection.close()
        else:
            self._idle.append(_Kept(connection, time.monotonic()))

    def _drop_idle(self) -> None:
        while self._idle:
            try:
                kept = self._idle.pop()
            except IndexError:
                return
            kept.connection.close()


def _run_direct(
    engine: Engine,
    connection: Connection,
    body: Callable[[Transaction, C, A], T],
    context: C,
    call: A,
    *,
    read_only: bool,
) -> T:
    """``PooledTransactions.run``'s transaction on the connection's driver cursor."""
    tx = DirectTransaction(engine, connection)
    try:
        tx.begin(read_only=read_only)
        try:
            result = body(tx, context, call)
            tx.commit()
        except BaseException:
            tx.rollback()
            raise
        return result
    finally:
        tx.close()
