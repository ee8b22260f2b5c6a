"""The few things that differ between SQLite and PostgreSQL, and nothing else.

A ``Dialect`` locks a session for writing, and holds the statements whose
SQL differs per engine (upserts, the latest of several timestamps). It is
built once per engine kind per process; statements are reused on every call.
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar

from sqlalchemy import (
    BindParameter,
    Select,
    Text,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert

from a2sql import execute
from a2sql.errors import invalid
from a2sql.execute import Transaction
from a2sql.schema import events, presence, retired_attempts, snapshots
from a2sql.stream import POSTGRES_POLL_INTERVAL_S, SQLITE_POLL_INTERVAL_S
from a2sql.types import Timestamp
from a2sql.wakeups import CHANNEL

# Class id of a2sql's session locks in PostgreSQL's two-key advisory lock
# space (which never overlaps the one-bigint space applications tend to use).
SESSION_LOCK_CLASS = 0x6132
# The setting through which a transaction that only tried the session's lock
# tells its next statement whether it got it ('true'): set for the
# transaction only, so it survives a transaction pooler; outside such a
# transaction it is unset or empty (a2sql.ops.fused).
GRANTED_SETTING = "a2sql.granted"
# Whether the lock was granted, as a statement after the try reads it. Unset,
# as on a connection that never tried, it reads as NULL: not granted. A test
# of no column, which the planner checks once, before reading any row.
GRANTED = func.current_setting(literal_column(f"'{GRANTED_SETTING}'"), true()) == literal_column(
    "'true'"
)


class Dialect:
    """What differs per engine. Subclasses fill in the statements."""

    name: str
    stream_poll_interval: float
    # Whether the hot writes have a fused statement for their common case
    # (a2sql.ops.fused): where round trips are the cost.
    fuses = False
    upsert_snapshot: Insert
    upsert_presence: Insert
    retire_attempts: Insert

    def lock_session(
        self, tx: Transaction, session_id: str, *, announce: bool, lock_timeout_ms: int | None
    ) -> None:
        """First statement of every mutating transaction on a session.

        ``announce``: the transaction may add events, so other processes'
        streams of the session are to be woken when it commits.
        ``lock_timeout_ms``: how long a transaction of a2sql's own waits for
        the lock (and may then sit idle); ``None`` in the caller's
        transaction, whose own settings apply.
        """

    def own_lock(
        self, session_id: str, *, announce: bool, lock_timeout_ms: int
    ) -> tuple[Select[Any], dict[str, Any]]:
        """``lock_session``'s statement in a transaction of a2sql's own, and its
        parameters (PostgreSQL: sent ahead of a fused statement, a2sql.ops.fused)."""
        raise NotImplementedError

    def own_try_lock(
        self, session_id: str, *, announce: bool, lock_timeout_ms: int
    ) -> tuple[Select[Any], dict[str, Any]]:
        """``own_lock`` that never waits: its first column says whether the lock was
        granted (the text ``'true'``), and ``GRANTED_SETTING`` says the same to the
        transaction's next statement. Streams are woken only if it was granted."""
        raise NotImplementedError

    def announcement(self, session_id: str) -> tuple[Select[Any], dict[str, Any]]:
        """A statement that wakes other processes' streams of the session, in a
        transaction of its own sent right after one that committed with its lock
        taken without ``announce`` (PostgreSQL, a2sql.calls)."""
        raise NotImplementedError

    def try_lock_session(self, tx: Transaction, session_id: str) -> bool:
        """Lock the session for writing if no other transaction holds it; never wait."""
        raise NotImplementedError

    def check_isolation(self, tx: Transaction) -> None:
        """Refuse the caller's transaction if its isolation level breaks a2sql's writes."""

    def latest_timestamp(self, *columns: ColumnElement[Any]) -> ColumnElement[Any]:
        """The latest of ``columns`` that are set; the first is never NULL."""
        raise NotImplementedError

    def unestimated(self, value: BindParameter[Any]) -> ColumnElement[Any]:
        """``value``, hidden from the planner's estimates where it has any."""
        return value

    def _build_upserts(self, insert: Any) -> None:
        # delete_session: keep the session's highest attempt number, where one was
        # claimed (a2sql.schema), never lowering it. Its events' attempt counts
        # started at the one kept before, so the highest of them is never below it.
        last_attempt = (
            select(events.c.session_id, func.max(events.c.attempt_count))
            .where(
                events.c.session_id == bindparam("sid"),
                events.c.attempt_count > literal_column("0"),
            )
            .group_by(events.c.session_id)
        )
        retired = insert(retired_attempts).from_select(["session_id", "last_attempt"], last_attempt)
        self.retire_attempts = retired.on_conflict_do_update(
            index_elements=[retired_attempts.c.session_id],
            set_={"last_attempt": retired.excluded.last_attempt},
            where=retired.excluded.last_attempt > retired_attempts.c.last_attempt,
        )
        snapshot = insert(snapshots)
        self.upsert_snapshot = snapshot.on_conflict_do_update(
            index_elements=[snapshots.c.session_id, snapshots.c.reducer_name],
            set_={
                "up_to_index": snapshot.excluded.up_to_index,
                "state": snapshot.excluded.state,
                "updated_at": snapshot.excluded.updated_at,
            },
            # A slow writer never clobbers a further-along snapshot.
            where=snapshot.excluded.up_to_index > snapshots.c.up_to_index,
        )
        entry = insert(presence)
        self.upsert_presence = entry.on_conflict_do_update(
            index_elements=[presence.c.ns, presence.c.participant, presence.c.field],
            set_={
                "value": entry.excluded.value,
                "seen": entry.excluded.seen,
                "at": entry.excluded.at,
                "expires_at": entry.excluded.expires_at,
            },
            # Last writer wins by the writer's `at`; ties go to the incoming write.
            # An expired row is gone, swept or not: any write replaces it.
            where=or_(
                presence.c.at <= entry.excluded.at,
                presence.c.expires_at <= bindparam("now", type_=Timestamp()),
            ),
        )


class SqliteDialect(Dialect):
    name = "sqlite"
    # No cross-process wake-up on SQLite: streams poll, briefly.
    stream_poll_interval = SQLITE_POLL_INTERVAL_S

    def __init__(self) -> None:
        self._build_upserts(sqlite.insert)

    def lock_session(
        self, tx: Transaction, session_id: str, *, announce: bool, lock_timeout_ms: int | None
    ) -> None:
        # BEGIN IMMEDIATE (a2sql.begin) already holds the database's write lock,
        # waiting for it up to the busy timeout, and other processes' streams poll.
        return None

    def try_lock_session(self, tx: Transaction, session_id: str) -> bool:
        # The write lock, held since BEGIN IMMEDIATE, covers every session.
        return True

    def latest_timestamp(self, *columns: ColumnElement[Any]) -> ColumnElement[Any]:
        # SQLite's scalar max() is NULL if any argument is: an unset time counts
        # as the first (never unset), not as 0, which is 1970 and later than
        # any time before it.
        first, *rest = columns
        return func.max(first, *(func.coalesce(c, first) for c in rest))


class PostgresDialect(Dialect):
    name = "postgresql"
    # LISTEN/NOTIFY wakes streams; polling only covers a lost notification.
    stream_poll_interval = POSTGRES_POLL_INTERVAL_S
    fuses = True
    _lock_call = func.pg_advisory_xact_lock(
        literal_column(str(SESSION_LOCK_CLASS)), func.hashtext(bindparam("sid"))
    )
    _try_lock_call = func.pg_try_advisory_xact_lock(
        literal_column(str(SESSION_LOCK_CLASS)), func.hashtext(bindparam("sid"))
    )
    # The notification rides on the lock statement: no round trip of its own.
    # NOTIFY is delivered at commit and only then, so a rolled back append
    # wakes nobody; a commit that added nothing (a replay) wakes streams for
    # a re-read that finds nothing. But a transaction that notifies commits
    # under a lock of the whole database's, held while its commit record is
    # flushed to disk: notifying writers commit one at a time. A transaction
    # a2sql sends whole therefore notifies in a transaction of its own, sent
    # with it (``announcement``): writing nothing, it holds that lock for no
    # flush.
    _notify_call = func.pg_notify(literal_column(f"'{CHANNEL}'"), bindparam("sid"))
    _announcement = select(_notify_call)
    # In a2sql's own transactions the lock statement first bounds, for this
    # transaction only (set_config's ``true``), how long it waits for a lock
    # and how long it may then sit idle: a frozen holder is cut off by the
    # server after that long, and its waiters give up after as long. Target
    # list entries are evaluated in order, so both hold before the wait.
    # Set per transaction, they survive a transaction pooler, which hands
    # each transaction a different server connection.
    _bounds = (
        func.set_config(literal_column("'lock_timeout'"), bindparam("wait"), True),
        func.set_config(
            literal_column("'idle_in_transaction_session_timeout'"), bindparam("wait"), True
        ),
    )
    # In the caller's transaction the lock statement reports its isolation
    # level, which must be READ COMMITTED: at a higher level the snapshot
    # is taken before the lock is granted, and what the lock's previous
    # holder committed stays unseen.
    _isolation = func.current_setting(literal_column("'transaction_isolation'"))
    _own_lock: ClassVar[dict[bool, Select[Any]]] = {
        False: select(*_bounds, _lock_call),
        True: select(*_bounds, _lock_call, _notify_call),
    }
    _callers_lock: ClassVar[dict[bool, Select[Any]]] = {
        False: select(_isolation, _lock_call),
        True: select(_isolation, _lock_call, _notify_call),
    }
    _try_lock = select(_try_lock_call)
    # Evaluated in order, as _bounds: the notification follows the attempt.
    _granted = func.set_config(
        literal_column(f"'{GRANTED_SETTING}'"), cast(_try_lock_call, Text), True
    )
    _own_try_lock: ClassVar[dict[bool, Select[Any]]] = {
        False: select(_granted, *_bounds),
        True: select(
            _granted,
            *_bounds,
            case((GRANTED, _notify_call)),
        ),
    }
    _isolation_level = select(_isolation)

    def __init__(self) -> None:
        self._build_upserts(postgresql.insert)

    def lock_session(
        self, tx: Transaction, session_id: str, *, announce: bool, lock_timeout_ms: int | None
    ) -> None:
        if lock_timeout_ms is not None:
            execute.run(
                tx, *self.own_lock(session_id, announce=announce, lock_timeout_ms=lock_timeout_ms)
            )
            return
        [(level, *_)] = execute.rows(tx, self._callers_lock[announce], {"sid": session_id})
        _check_isolation(level)

    def own_lock(
        self, session_id: str, *, announce: bool, lock_timeout_ms: int
    ) -> tuple[Select[Any], dict[str, Any]]:
        return self._own_lock[announce], {"sid": session_id, "wait": str(lock_timeout_ms)}

    def own_try_lock(
        self, session_id: str, *, announce: bool, lock_timeout_ms: int
    ) -> tuple[Select[Any], dict[str, Any]]:
        return self._own_try_lock[announce], {"sid": session_id, "wait": str(lock_timeout_ms)}

    def announcement(self, session_id: str) -> tuple[Select[Any], dict[str, Any]]:
        return self._announcement, {"sid": session_id}

    def try_lock_session(self, tx: Transaction, session_id: str) -> bool:
        [(locked,)] = execute.rows(tx, self._try_lock, {"sid": session_id})
        return bool(locked)

    def check_isolation(self, tx: Transaction) -> None:
        [(level,)] = execute.rows(tx, self._isolation_level, {})
        _check_isolation(level)

    def latest_timestamp(self, *columns: ColumnElement[Any]) -> ColumnElement[Any]:
        # greatest() skips NULLs.
        return func.greatest(*columns, type_=Timestamp())

    def unestimated(self, value: BindParameter[Any]) -> ColumnElement[Any]:
        # A scalar subquery is a value the planner only learns when the
        # statement runs. A page of sessions under a prefix is a key range
        # (prefix, successor): estimated from the histogram, a prefix holding
        # a sliver of a bucket's key space comes out a few rows wide however
        # many it holds, and the planner then reads the whole range with a
        # bitmap scan and sorts it instead of walking the key in order and
        # stopping at the page. With one bound unknown it takes the default
        # range estimate (0.5% of the table), and walks.
        return select(value).scalar_subquery()


def _check_isolation(level: str) -> None:
    if level != "read committed":
        raise invalid(
            "connection",
            f"its transaction runs at isolation level {level.upper()}; a2sql's writes need "
            "READ COMMITTED, where each statement sees what the session lock's previous "
            "holder committed. Begin it with store.begin(), or set "
            'execution_options(isolation_level="READ COMMITTED") on the connection',
        )


@cache
def dialect_named(name: str) -> Dialect:
    if name == "sqlite":
        return SqliteDialect()
    if name == "postgresql":
        return PostgresDialect()
    raise ValueError(f"a2sql does not support the {name!r} dialect")
