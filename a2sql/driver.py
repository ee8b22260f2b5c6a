"""Hot statements: Core constructs compiled once per dialect, run on the driver's cursor.

The operations are written as SQLAlchemy Core statements over a
``Connection`` inside its transaction. Executing a construct through
``Connection.execute`` costs ~25 µs of Python per statement here (cache key,
execution context, result object) against ~5 µs for the statement itself
on SQLite. This module keeps SQLAlchemy's compiler, type processing, error
wrapping and pool invalidation, and skips the per-call execution machinery:
each statement is compiled once per dialect, its parameters processed by the
compiled bind processors, and its rows by the columns' result processors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

Params = Mapping[str, Any]
Row = tuple[Any, ...]


MAX_SHAPES = 64


@dataclass(frozen=True, slots=True)
class _Shape:
    """An expanding statement rendered for given list lengths."""

    sql: str
    names: Sequence[str] | None
    processors: Mapping[str, Any]
    expansion: dict[str, list[str]]


class _Prepared:
    """One statement compiled for one dialect, with its processors."""

    __slots__ = (
        "compiled",
        "expanding",
        "names",
        "processed_columns",
        "processors",
        "shapes",
        "sql",
    )

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.compiled = compiled
        self.sql = compiled.string
        self.expanding = [name for name, bind in compiled.binds.items() if bind.expanding]
        # Expanded SQL per list length: rendering it costs ~50 µs a call.
        self.shapes: dict[tuple[int, ...], _Shape] = {}
        self.names = compiled.positiontup
        self.processors: Mapping[str, Any] = dict(compiled._bind_processors)
        # (column position, processor) of the columns that need converting.
        self.processed_columns: list[tuple[int, Callable[[Any], Any]]] = [
            (position, process)
            for position, entry in enumerate(compiled._result_columns)
            if (process := entry.type._cached_result_processor(dialect, None)) is not None
        ]

    def arguments(self, params: Params) -> tuple[str, Any]:
        """The SQL text and the driver's parameters for ``params``."""
        processors: Mapping[str, Any]
        if self.expanding:
            shape = self._shape(params)
            values = dict(self.compiled.construct_params(params))
            for name, expanded in shape.expansion.items():
                items = values.pop(name)
                if items and isinstance(items[0], tuple):  # tuple IN: flattened in order
                    items = [item for row in items for item in row]
                values.update(zip(expanded, items, strict=True))
            sql, processors, names = shape.sql, shape.processors, shape.names
        else:
            sql, values, processors, names = (
                self.sql,
                dict(self.compiled.construct_params(params)),
                self.processors,
                self.names,
            )
        for name, process in processors.items():
            if name in values:
                values[name] = process(values[name])
        if names is not None:
            return sql, tuple(values[name] for name in names)
        return sql, values

    def _shape(self, params: Params) -> _Shape:
        lengths = tuple(len(params[name]) for name in self.expanding)
        shape = self.shapes.get(lengths)
        if shape is None:
            state = self.compiled.construct_expanded_state(dict(params))
            shape = _Shape(
                sql=state.statement,
                names=state.positiontup,
                # Only the processors of the expanded names; the others stay.
                processors={**self.processors, **state.processors},
                expansion={name: list(state.parameter_expansion[name]) for name in self.expanding},
            )
            if len(self.shapes) < MAX_SHAPES:
                self.shapes[lengths] = shape
        return shape

    def process_rows(self, rows: Sequence[Row]) -> list[Row]:
        processed = self.processed_columns
        if not processed:
            return [tuple(row) for row in rows]
        out = []
        for row in rows:
            values = list(row)
            for position, process in processed:
                values[position] = process(values[position])
            out.append(tuple(values))
        return out


_prepared: dict[tuple[int, type[Dialect], str], _Prepared] = {}


def _prepare(statement: ClauseElement, dialect: Dialect) -> _Prepared:
    # Statements are module-level constants that live as long as the process,
    # so their id() is a stable key.
    # The driver matters, not only the database: aiosqlite and psycopg's async
    # dialect process values differently from their sync twins.
    key = (id(statement), type(dialect), dialect.paramstyle)
    prepared = _prepared.get(key)
    if prepared is None:
        prepared = _prepared[key] = _Prepared(statement, dialect)
    return prepared


def _on_cursor(
    connection: Connection, sql: str, arguments: Any, *, many: bool = False, fetch: bool = False
) -> list[Row]:
    """Send ``sql`` on a cursor of the connection's driver; the raw rows if ``fetch``."""
    cursor = connection.connection.cursor()
    try:
        if connection.dispatch.before_cursor_execute:
            # Keep statement counters and tracing tools honest.
            connection.dispatch.before_cursor_execute(
                connection, cursor, sql, arguments, None, many
            )
        if many:
            cursor.executemany(sql, arguments)
        else:
            cursor.execute(sql, arguments)
        found: list[Row] = (
            cast("list[Row]", cursor.fetchall()) if fetch and cursor.description is not None else []
        )
    except Exception as error:
        # SQLAlchemy's own handling: wraps the driver's error in a DBAPIError
        # and invalidates the pool on a lost connection.
        connection._handle_dbapi_exception(error, sql, arguments, cursor, None)
    finally:
        cursor.close()
    return found


def _execute(
    connection: Connection, statement: ClauseElement, params: Params, *, fetch: bool
) -> list[Row]:
    prepared = _prepare(statement, connection.dialect)
    sql, arguments = prepared.arguments(params)
    found = _on_cursor(connection, sql, arguments, fetch=fetch)
    return prepared.process_rows(found) if found else []


def execute_text(connection: Connection, sql: str) -> None:
    """Run a fixed SQL text with no parameters (BEGIN IMMEDIATE, say) the same way."""
    _on_cursor(connection, sql, ())


def rows(connection: Connection, statement: ClauseElement, params: Params) -> list[Row]:
    """Every row of ``statement``, processed to Python values."""
    return _execute(connection, statement, params, fetch=True)


# Items of one list bound per statement: far below SQLite's 32,766 and
# PostgreSQL's 65,535 parameters, whatever else the statement binds.
LIST_CHUNK = 10_000


def rows_for_each_chunk(
    connection: Connection,
    statement: ClauseElement,
    params: Params,
    list_param: str,
    items: Sequence[Any],
    *,
    per_item: int = 1,
) -> list[Row]:
    """``rows`` with the list ``items`` bound to ``list_param`` a chunk at a time.

    For statements where each item stands alone (lookups, per-item updates);
    ``per_item`` is how many parameters one item takes (2 for pairs).
    """
    size = LIST_CHUNK // per_item
    found: list[Row] = []
    for start in range(0, len(items), size):
        chunk = {**params, list_param: list(items[start : start + size])}
        found.extend(_execute(connection, statement, chunk, fetch=True))
    return found


def first(connection: Connection, statement: ClauseElement, params: Params) -> Row | None:
    """The first row, or ``None``."""
    found = _execute(connection, statement, params, fetch=True)
    return found[0] if found else None


def run(connection: Connection, statement: ClauseElement, params: Params) -> None:
    """Execute a statement whose rows are not needed."""
    _execute(connection, statement, params, fetch=False)


def run_many(connection: Connection, statement: ClauseElement, many: Sequence[Params]) -> None:
    """Execute a statement once per parameter set, in one driver call (``executemany``)."""
    if len(many) == 1:
        _execute(connection, statement, many[0], fetch=False)
        return
    prepared = _prepare(statement, connection.dialect)
    assert not prepared.expanding, "executemany takes no expanding parameters"
    arguments = [prepared.arguments(params)[1] for params in many]
    _on_cursor(connection, prepared.sql, arguments, many=True)
