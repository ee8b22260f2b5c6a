"""How a plan runs: in a transaction of a2sql's own, or in a savepoint of the caller's.

Every path runs the same body (``run_in_transaction``): the session's lock,
then the plan. A plan with a one-statement form (a2sql.backends.postgresql.one_statement)
is sent whole where the transaction can be (``sends_whole``): BEGIN, the
session's lock, the statement, COMMIT, in one round trip; its full path runs
only when the statement answers ``None`` (a replay, a stale attempt, an id
taken), in a transaction of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Executable
from sqlalchemy.exc import DBAPIError

from a2sql.core.errors import is_event_id_collision
from a2sql.execution.callers import check_connection, refusal
from a2sql.execution.raw import Params
from a2sql.plans.kinds import Context, OneStatement, Plan
from a2sql.sql.executor import ConnectionExecutor, Transaction

T = TypeVar("T")


def run_in_transaction(connection: Transaction, ctx: Context, call: Plan[T]) -> T:
    """The body of every transaction of a2sql's own, sync or async: lock the session, then
    run."""
    if call.one_statement is not None and connection.sends_whole:
        return _sent_whole(connection, ctx, call)
    _lock(connection, ctx, call)
    return _run_locked(connection, call)


def _lock(connection: Transaction, ctx: Context, call: Plan[Any]) -> None:
    if call.lock_session is not None:
        ctx.backend.lock_session(
            connection,
            call.lock_session,
            announce=call.added_events is not None,
            lock_timeout_ms=ctx.lock_timeout_ms,
        )


def _sent_whole(connection: Transaction, ctx: Context, call: Plan[T]) -> T:
    """A call with a fused statement (a2sql.backends.postgresql.one_statement), its lock
    and statement sent at once: one round trip, and one transaction unless the caller
    decides the commit. When the statement wrote nothing, the full path after the lock:
    in the same transaction if it is still open, else in the next one."""
    assert call.one_statement is not None
    commit = not connection.commits_later
    lock, then = lock_statements(ctx, call, commits=commit)
    fused = call.one_statement()
    with collisions(fused):
        rows = connection.pipeline(lock, (fused.statement, fused.params), commit=commit, then=then)
    result = fused.answer(rows)
    if result is not None:
        return result
    if commit:  # over, having written nothing
        _lock(connection, ctx, call)
    return call.run(connection)


def lock_statements(
    ctx: Context, call: Plan[Any], *, commits: bool
) -> tuple[tuple[Executable, Params], tuple[Executable, Params] | None]:
    """The statement that takes ``call``'s session lock, and the one that wakes streams
    of its session, or ``None``.

    ``commits``: the transaction is sent whole with its COMMIT, and a call that adds
    events wakes streams with the second statement, sent with it to run after the
    commit (a2sql.backends.postgresql), whether or not the call wrote: a stream woken for
    nothing reads nothing new. Otherwise the lock statement itself notifies, and
    the second is ``None``."""
    session = call.lock_session
    assert session is not None
    adds = call.added_events is not None
    then = ctx.backend.announcement(session) if adds and commits else None
    lock = ctx.backend.own_lock(
        session, announce=adds and not commits, lock_timeout_ms=ctx.lock_timeout_ms
    )
    return lock, then


def _run_locked(connection: Transaction, call: Plan[T]) -> T:
    """The call, the session's lock taken: its fused statement first when it has one."""
    if call.one_statement is not None:
        fused = call.one_statement()
        with collisions(fused):
            result = fused.answer(connection.rows(fused.statement, fused.params))
        if result is not None:
            return result
    return call.run(connection)


@contextmanager
def collisions(fused: OneStatement[Any]) -> Iterator[None]:
    """A hit on the unique event id index as the fused call's own error, if it has one."""
    try:
        yield
    except DBAPIError as error:
        if fused.collided is None or not is_event_id_collision(error):
            raise
        raise fused.collided(error) from None


def run_own_transaction(connection: Connection, ctx: Context, call: Plan[T]) -> T:
    """``run_in_transaction`` in a transaction a2sql began itself with ``connection.begin()``."""
    ctx.backend.begin_own(connection, read_only=call.read_only, busy_timeout_ms=ctx.lock_timeout_ms)
    return run_in_transaction(ConnectionExecutor(connection), ctx, call)


def run_in_savepoint(connection: Connection, ctx: Context, call: Plan[T]) -> T:
    """The call in a savepoint of the caller's transaction on ``connection``.

    The caller's transaction is neither committed nor rolled back; an error
    rolls back to the savepoint, so the caller's transaction stays usable.
    """
    check_connection(connection, ctx.backend)
    tx = ConnectionExecutor(connection)
    try:
        if not call.read_only:
            ctx.backend.hold_write_lock(connection, busy_timeout_ms=ctx.lock_timeout_ms)
        with connection.begin_nested():
            if call.lock_session is not None:
                # The caller's own lock timeout applies; the lock statement
                # checks the transaction's isolation level.
                ctx.backend.lock_session(
                    tx,
                    call.lock_session,
                    announce=call.added_events is not None,
                    lock_timeout_ms=None,
                )
            elif not call.read_only:
                ctx.backend.check_isolation(tx)
            return _run_locked(tx, call)
    except DBAPIError as error:
        refused = refusal(error)
        if refused is None:
            raise
        raise refused from error
