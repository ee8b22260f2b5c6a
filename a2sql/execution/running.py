"""How a plan runs: in a transaction of a2sql's own, or in a savepoint of the caller's.

Every path runs the same body (``run_in_transaction``): the session's lock,
then the plan. A plan with a one-statement form (a2sql.backends.postgresql.one_statement) is
first sent whole with its lock only tried, and when that wrote nothing, again
after the lock; a session found contended goes straight the way after the
lock for a while.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar, cast

from sqlalchemy import Connection, Executable
from sqlalchemy.exc import DBAPIError

from a2sql.core.errors import is_event_id_collision
from a2sql.execution.callers import check_connection, refusal
from a2sql.execution.pooler import unprepared_behind_pooler
from a2sql.execution.raw import Params
from a2sql.plans.kinds import Context, OneStatement, Plan
from a2sql.sql.executor import AnyRow, ConnectionExecutor, Transaction

T = TypeVar("T")


def run_in_transaction(connection: Transaction, ctx: Context, call: Plan[T]) -> T:
    """The body of every transaction of a2sql's own, sync or async: lock the session, then
    run."""
    if call.one_statement is not None:
        return _fused_first(connection, ctx, call)
    _lock(connection, ctx, call)
    return call.run(connection)


def _lock(connection: Transaction, ctx: Context, call: Plan[Any]) -> None:
    if call.lock_session is not None:
        ctx.backend.lock_session(
            connection,
            call.lock_session,
            announce=call.added_events is not None,
            lock_timeout_ms=ctx.lock_timeout_ms,
        )


def _fused_first(connection: Transaction, ctx: Context, call: Plan[T]) -> T:
    """A call with a fused statement (a2sql.backends.postgresql.one_statement): first the session's
    lock tried
    and the guarded statement sent at once, on the direct path in one round trip (and
    one transaction, unless the caller decides the commit). When that wrote nothing,
    the call after the lock: its clock read anew, its fused statement, then the full
    path if that wrote nothing either. A session found contended skips the first."""
    commit = connection.sends_whole and not connection.commits_later
    session = call.lock_session
    assert session is not None
    contended = commit and is_contended(ctx, session)
    if not contended:
        result = _fused(connection, ctx, call, tried=True, commit=commit)
        if result is not None:
            return result
    if commit:
        # Over, having written nothing: the call again, once the lock is granted,
        # in two round trips.
        again = _fused(connection, ctx, call, tried=False, commit=True)
        if again is not None:
            if not contended:
                remember_contended(ctx, session)
            return again
        _lock(connection, ctx, call)
        return call.run(connection)
    # Nothing was written, in the transaction still open: the lock (held already if
    # it was granted: the same statements then as on the direct path).
    _lock(connection, ctx, call)
    return _run_locked(connection, call)


# How long a session stays contended, and how many are remembered at most.
CONTENDED_S = 1.0
_MAX_CONTENDED = 1024


def is_contended(ctx: Context, session: str) -> bool:
    """Whether ``session``'s calls go straight the way after the lock for now."""
    return ctx.contended.get(session, 0.0) > time.monotonic()


def remember_contended(ctx: Context, session: str) -> None:
    """Send ``session``'s calls the way after the lock for a while: a call sent whole that
    finds the lock held costs a round trip more than that way, and a session contended
    now likely is a moment later."""
    contended = ctx.contended
    if len(contended) >= _MAX_CONTENDED:
        contended.clear()
    contended[session] = time.monotonic() + CONTENDED_S


def sends_whole(ctx: Context, call: Plan[Any]) -> bool:
    """Whether ``call`` is sent whole first, its lock only tried (``lock_statements``) and
    its guarded statement with it: it has a fused statement, and its session is not
    contended."""
    return call.one_statement is not None and not is_contended(ctx, cast(str, call.lock_session))


def lock_statements(
    ctx: Context, call: Plan[Any], *, tried: bool, commits: bool
) -> tuple[tuple[Executable, Params], tuple[Executable, Params] | None]:
    """The statement that takes ``call``'s session lock (``tried``: only tries it), and
    the one that wakes streams of its session, or ``None``.

    ``commits``: the transaction is sent whole with its COMMIT, and a call that adds
    events wakes streams with the second statement, sent with it to run after the
    commit (a2sql.backends.postgresql), whether or not the call wrote: a stream woken for
    nothing reads nothing new. Otherwise the lock statement itself notifies, and
    the second is ``None``."""
    session = call.lock_session
    assert session is not None
    adds = call.added_events is not None
    then = ctx.backend.announcement(session) if adds and commits else None
    lock = ctx.backend.own_try_lock if tried else ctx.backend.own_lock
    return (
        lock(session, announce=adds and not commits, lock_timeout_ms=ctx.lock_timeout_ms),
        then,
    )


def after_the_lock(call: Plan[T]) -> Plan[T]:
    """``call`` without its first try: the lock, then its fused statement, then the full
    path if that wrote nothing (for a call sent whole that wrote nothing)."""
    return call._replace(run=partial(_run_locked, call=call), one_statement=None)


def _fused(
    connection: Transaction, ctx: Context, call: Plan[T], *, tried: bool, commit: bool
) -> T | None:
    """The call's fused statement's answer.
    ``tried``: the lock only tried, the clock read before it and the guarded statement
    sent with it; else the clock is read once the lock is granted (only on the direct
    path, in a pipeline of two round trips)."""
    assert call.one_statement is not None
    lock, then = lock_statements(ctx, call, tried=tried, commits=commit)
    fuse, built = call.one_statement, list[OneStatement[T]]()
    rows: Sequence[AnyRow]

    def statement() -> tuple[Executable, Mapping[str, Any]]:
        fused = fuse()
        built.append(fused)
        return (fused.guarded if tried else fused.statement), fused.params

    with collisions(built):
        if connection.sends_whole:
            if tried:  # the clock read now, before the lock
                ready = statement()
                rows = connection.pipeline(
                    lock, lambda: ready, wait_for_lock=False, commit=commit, then=then
                )
            else:
                rows = connection.pipeline(
                    lock, statement, wait_for_lock=True, commit=commit, then=then
                )
        else:
            connection.run(*lock)
            rows = connection.rows(*statement())
    return built[0].answer(rows)


def _run_locked(connection: Transaction, call: Plan[T]) -> T:
    """The call, the session's lock taken: its fused statement first when it has one."""
    if call.one_statement is not None:
        fused = call.one_statement()
        with collisions([fused]):
            result = fused.answer(connection.rows(fused.statement, fused.params))
        if result is not None:
            return result
    return call.run(connection)


@contextmanager
def collisions(built: Sequence[OneStatement[Any]]) -> Iterator[None]:
    """A hit on the unique event id index as the fused call's own error, if it has one
    (``built``: the fused statement, once it is built)."""
    try:
        yield
    except DBAPIError as error:
        if not built or built[0].collided is None or not is_event_id_collision(error):
            raise
        raise built[0].collided(error) from None


def run_own_transaction(connection: Connection, ctx: Context, call: Plan[T]) -> T:
    """``run_in_transaction`` in a transaction a2sql began itself with ``connection.begin()``."""
    ctx.backend.begin_own(connection, read_only=call.read_only, busy_timeout_ms=ctx.lock_timeout_ms)
    with unprepared_behind_pooler(connection):
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
        with unprepared_behind_pooler(connection), connection.begin_nested():
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
