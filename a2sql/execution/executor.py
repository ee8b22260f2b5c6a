"""Running a2sql's statements: prebuilt Core constructs, through ``Connection.execute``.

Every statement a2sql sends goes through SQLAlchemy's public execution path,
so whatever an application attaches to its engine sees a2sql's statements
as its own: ``before_cursor_execute`` / ``after_cursor_execute`` listeners
(tracing, statement counters, rewrites), ``echo``, ``handle_error`` and the
pool's invalidation of lost connections. Statements are module-level
constants, so SQLAlchemy compiles each once per engine and takes the rest
from its compiled cache.

The one exception is a2sql's own SQLite transactions on an engine that
nothing observes (``a2sql.execution.raw``): there the same statements run on the
driver's cursor, which nobody can tell apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from sqlalchemy import Connection
from sqlalchemy.sql import Executable

from a2sql.execution.raw import DirectTransaction

Params = Mapping[str, Any]
# A row of any width, as a tuple or SQLAlchemy's Row.
AnyRow: TypeAlias = Sequence[Any]
# What an operation runs on: a Connection in a transaction, or a direct one.
Transaction: TypeAlias = Connection | DirectTransaction

# Items of one list bound per statement: far below SQLite's 32,766 and
# PostgreSQL's 65,535 parameters, whatever else the statement binds.
LIST_CHUNK = 10_000


def rows(tx: Transaction, statement: Executable, params: Params) -> Sequence[AnyRow]:
    """Every row of ``statement``."""
    if type(tx) is DirectTransaction:
        return tx.rows(statement, params)
    return tx.execute(statement, params).all()  # type: ignore[union-attr]


def first(tx: Transaction, statement: Executable, params: Params) -> AnyRow | None:
    """The first row, or ``None``."""
    found = rows(tx, statement, params)
    return found[0] if found else None


def run(tx: Transaction, statement: Executable, params: Params) -> None:
    """Execute a statement whose rows are not needed."""
    if type(tx) is DirectTransaction:
        tx.rows(statement, params)
    else:
        tx.execute(statement, params)  # type: ignore[union-attr]


def count(tx: Transaction, statement: Executable, params: Params) -> int:
    """Execute an UPDATE or DELETE; how many rows it changed."""
    if type(tx) is DirectTransaction:
        return tx.count(statement, params)
    return int(tx.execute(statement, params).rowcount)  # type: ignore[union-attr]


def run_many(tx: Transaction, statement: Executable, many: Sequence[Params]) -> None:
    """Execute a statement once per parameter set, in one driver call (``executemany``)."""
    if len(many) == 1:
        run(tx, statement, many[0])
    elif type(tx) is DirectTransaction:
        tx.run_many(statement, many)
    elif many:
        tx.execute(statement, list(many))  # type: ignore[union-attr]


def rows_for_each_chunk(
    tx: Transaction,
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
        found.extend(rows(tx, statement, chunk))
    return found
