"""Running a2sql's statements: prebuilt Core constructs, through ``Connection.execute``.

Every statement a2sql sends goes this one way, SQLAlchemy's public execution
path, so whatever an application attaches to its engine sees a2sql's
statements as its own: ``before_cursor_execute`` / ``after_cursor_execute``
listeners (tracing, statement counters, rewrites), ``echo``, ``handle_error``
and the pool's invalidation of lost connections. Statements are module-level
constants, so SQLAlchemy compiles each once per engine and takes the rest
from its compiled cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from sqlalchemy import Connection, Row
from sqlalchemy.sql import Executable

Params = Mapping[str, Any]
# A row of any width: the statements' columns are typed no further.
AnyRow: TypeAlias = Row[*tuple[Any, ...]]

# Items of one list bound per statement: far below SQLite's 32,766 and
# PostgreSQL's 65,535 parameters, whatever else the statement binds.
LIST_CHUNK = 10_000


def rows(connection: Connection, statement: Executable, params: Params) -> Sequence[AnyRow]:
    """Every row of ``statement``."""
    return connection.execute(statement, params).all()


def first(connection: Connection, statement: Executable, params: Params) -> AnyRow | None:
    """The first row, or ``None``."""
    return connection.execute(statement, params).first()


def run(connection: Connection, statement: Executable, params: Params) -> None:
    """Execute a statement whose rows are not needed."""
    connection.execute(statement, params)


def run_many(connection: Connection, statement: Executable, many: Sequence[Params]) -> None:
    """Execute a statement once per parameter set, in one driver call (``executemany``)."""
    if many:
        connection.execute(statement, list(many))


def rows_for_each_chunk(
    connection: Connection,
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
        found.extend(rows(connection, statement, chunk))
    return found
