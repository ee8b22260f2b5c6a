"""Transactions a2sql runs itself on pooled driver connections: the sync store's path.

A transaction through SQLAlchemy's ``Connection`` costs ~35 µs of Python
here (connection, transaction and event objects), and a checkout from the
pool and back ~10 µs more, against a few µs for BEGIN and COMMIT on SQLite.
``PooledTransactions`` keeps a few connections checked out between a store's
transactions and runs each on one: BEGIN where the driver leaves it to us,
the body, COMMIT; ROLLBACK when the body raises. Driver errors are wrapped
and lost connections invalidated as SQLAlchemy does (``driver.Tx``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from a2sql.config import sqlite_begin
from a2sql.driver import Tx, raise_wrapped

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


# Bumped in every forked child: connections kept before a fork are the parent's.
_forks = 0


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)


class _Kept(NamedTuple):
    """An idle connection with its transaction cursor, and when it went idle."""

    pooled: PoolProxiedConnection
    tx: Tx
    since: float


class PooledTransactions:
    """Runs transactions on connections of ``engine``'s pool, keeping a few between them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # The statement that opens a transaction, by read_only: SQLite's
        # driver leaves it to a2sql, psycopg opens one before the first statement.
        sqlite = engine.dialect.name == "sqlite"
        self._begin = {
            read_only: sqlite_begin(read_only=read_only) if sqlite else None
            for read_only in (False, True)
        }
        # On SQLite, COMMIT as a statement: the driver's statement cache keeps
        # it prepared, where sqlite3's commit() prepares it anew each time.
        self._commit = "COMMIT" if sqlite else None
        self._idle: list[_Kept] = []
        self._forks = _forks
        self._abandoned: list[_Kept] = []
        self._closed = False

    @property
    def idle(self) -> int:
        """Connections kept checked out for the next transactions, unused right now."""
        return len(self._idle)

    def run(self, body: Callable[[Tx, C, A], T], context: C, call: A, *, read_only: bool) -> T:
        """``body(tx, context, call)`` in one transaction: committed if it returns, rolled
        back if it raises. (Its arguments are passed on rather than bound in a closure:
        this runs for every call.)"""
        pooled, tx = self._take()
        try:
            begin = self._begin[read_only]
            if begin is not None:
                tx.execute(begin, ())
            result = body(tx, context, call)
            if self._commit is not None:
                tx.execute(self._commit, ())
            else:
                tx.commit()
            return result
        except BaseException:
            tx.rollback()
            raise
        finally:
            self._give_back(pooled, tx)

    def close(self) -> None:
        """Give every idle connection back to the pool; later ones go straight back too."""
        self._closed = True
        self._drop_idle()

    def _take(self) -> tuple[PoolProxiedConnection, Tx]:
        if self._forks != _forks:
            # A forked child: the idle connections are the parent's, in use
            # there. Closing them, or letting SQLAlchemy's garbage collection
            # of unreturned connections close them, would end the parent's
            # sessions; they are set aside, untouched, for the child's life.
            self._abandoned = self._idle
            self._idle = []
            self._forks = _forks
        now = time.monotonic()
        while self._idle:
            try:
                kept = self._idle.pop()
            except IndexError:  # another thread took the last one
                break
            if now - kept.since <= MAX_IDLE_S:
                return kept.pooled, kept.tx
            _release(kept.pooled, kept.tx)
        dialect = self._engine.dialect
        try:
            pooled = self._engine.raw_connection()
        except Exception as error:
            # Engine.connect() wraps a failure to connect; raw_connection() does not.
            raise_wrapped(error, dialect, None, None, lost=True)
        try:
            return pooled, Tx(dialect, pooled=pooled, pool=self._engine.pool)
        except Exception as error:  # no cursor: the connection is gone, likely the idle ones too
            pooled.invalidate(error)
            pooled.close()
            self._drop_idle()
            raise_wrapped(error, dialect, None, None, lost=True)

    def _give_back(self, pooled: PoolProxiedConnection, tx: Tx) -> None:
        if not pooled.is_valid:
            # Lost: the idle ones are likely as dead (a server restart, say).
            _release(pooled, tx)
            self._drop_idle()
        elif self._closed or len(self._idle) >= KEEP_IDLE:
            _release(pooled, tx)
        else:
            self._idle.append(_Kept(pooled, tx, time.monotonic()))

    def _drop_idle(self) -> None:
        while self._idle:
            try:
                kept = self._idle.pop()
            except IndexError:
                return
            _release(kept.pooled, kept.tx)


def _release(pooled: PoolProxiedConnection, tx: Tx) -> None:
    """Close the cursor and give the connection back to the pool."""
    tx.close()
    pooled.close()
