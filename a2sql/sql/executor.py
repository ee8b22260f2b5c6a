"""Running a2sql's statements: prebuilt Core constructs, on one ``Executor``.

An operation's statements run on an ``Executor``: one open transaction that
runs a statement and gives its rows. There are two. ``ConnectionExecutor``
sends each through ``Connection.execute``, SQLAlchemy's public execution
path, so whatever an application attaches to its engine sees a2sql's
statements as its own: ``before_cursor_execute`` / ``after_cursor_execute``
listeners (tracing, statement counters, rewrites), ``echo``, ``handle_error``
and the pool's invalidation of lost connections. Statements are module-level
constants, so SQLAlchemy compiles each once per engine and takes the rest
from its compiled cache. ``RawTransaction`` (a2sql.execution.raw) runs the
same statements on the driver's cursor, in a2sql's own transactions on an
engine nothing observes, where nobody can tell them apart; it alone sends a
plan whole (``sends_whole``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias

from sqlalchemy import Connection
from sqlalchemy.sql import Executable

Params = Mapping[str, Any]
# A row of any width, as a tuple or SQLAlchemy's Row.
AnyRow: TypeAlias = Sequence[Any]

# Items of one list bound per statement: far below SQLite's 32,766 and
# PostgreSQL's 65,535 parameters, whatever else the statement binds.
LIST_CHUNK = 10_000


class Executor(Protocol):
    """What an operation's statements run on: one open transaction."""

    # Whether a plan's lock and statement go to the server at once, in one
    # pipeline (``pipeline``), rather than one statement after the other.
    sends_whole: bool
    # Whether the transaction's commit is decided after its statements, by
    # whoever runs it (a call handed to a thread): nothing sent whole commits.
    commits_later: bool

    @property
    def driver_connection(self) -> Any:
        """The driver's connection the transaction runs on."""
        ...

    def rows(self, statement: Executable, params: Params) -> Sequence[AnyRow]:
        """Every row of ``statement``."""
        ...

    def first(self, statement: Executable, params: Params) -> AnyRow | None:
        """The first row, or ``None``."""
        ...

    def run(self, statement: Executable, params: Params) -> None:
        """Execute a statement whose rows are not needed."""
        ...

    def count(self, statement: Executable, params: Params) -> int:
        """Execute an UPDATE or DELETE; how many rows it changed."""
        ...

    def run_many(self, statement: Executable, many: Sequence[Params]) -> None:
        """Execute a statement once per parameter set, in one driver call."""
        ...

    def pipeline(
        self,
        lock: tuple[Executable, Params],
        statement: tuple[Executable, Params],
        *,
        commit: bool,
        then: tuple[Executable, Params] | None = None,
    ) -> Sequence[AnyRow]:
        """Where ``sends_whole``: the lock and ``statement`` in one round trip."""
        ...


# The name operations use for what they run on.
Transaction: TypeAlias = Executor


class ConnectionExecutor:
    """An ``Executor`` on a SQLAlchemy ``Connection`` in a transaction: a2sql's own, or
    the caller's (``using``)."""

    __slots__ = ("commits_later", "connection")

    sends_whole = False

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.commits_later = False

    @property
    def driver_connection(self) -> Any:
        return self.connection.connection.driver_connection

    def rows(self, statement: Executable, params: Params) -> Sequence[AnyRow]:
        return self.connection.execute(statement, params).all()

    def first(self, statement: Executable, params: Params) -> AnyRow | None:
        found = self.connection.execute(statement, params).all()
        return found[0] if found else None

    def run(self, statement: Executable, params: Params) -> None:
        self.connection.execute(statement, params)

    def count(self, statement: Executable, params: Params) -> int:
        return int(self.connection.execute(statement, params).rowcount)

    def run_many(self, statement: Executable, many: Sequence[Params]) -> None:
        if len(many) == 1:
            self.connection.execute(statement, many[0])
        elif many:
            self.connection.execute(statement, list(many))

    def pipeline(
        self,
        lock: tuple[Executable, Params],
        statement: tuple[Executable, Params],
        *,
        commit: bool,
        then: tuple[Executable, Params] | None = None,
    ) -> Sequence[AnyRow]:
        raise NotImplementedError("a Connection sends one statement at a time")


def rows_for_each_chunk(
    tx: Executor,
    statement: Executable,
    params: Params,
    list_param: str,
    items: Sequence[Any],
    *,
    per_item: int = 1,
) -> list[AnyRow]:
    """``rows`` with the list ``items`` bound to ``list_param`` a chunk at a time.

    For statements where each item stands alone (lookups, per-item updates);
    ``per_item`` is how many parameters one item takes (2 for pairs).
    """
    size = LIST_CHUNK // per_item
    found: list[AnyRow] = []
    for start in range(0, len(items), size):
        chunk = {**params, list_param: list(items[start : start + size])}
        found.extend(tx.rows(statement, chunk))
    return found
