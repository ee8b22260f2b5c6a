"""SQLite transactions on the driver's cursor, for an engine nothing observes.

On SQLite a2sql's cost is Python, and ``Connection.execute`` costs ~20 µs
a statement here (execution context, parameter processing, result object)
against ~10 µs for the statement itself: a cycle of append, claim and
complete ran at half the speed of the same work on ``sqlite3``. So when
nothing can tell the difference, a2sql's own SQLite transactions run
their statements on the pooled driver connection's cursor: the same SQL
(compiled by SQLAlchemy from the same constructs), the same bind and result
processing (the types' own processors), driver errors wrapped as
SQLAlchemy wraps them.

"Nothing can tell" is checked at the start of every transaction
(``observed``), so a listener or ``echo`` attached at any time, before or
after ``create_store``, sees every statement of every later transaction:
those then run through ``Connection.execute``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn, cast

from sqlalchemy import Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

Params = Mapping[str, Any]
Row = tuple[Any, ...]
Processor = Callable[[Any], Any]

_REQUIRED = object()
# Expanding statements rendered per list length, kept per statement.
MAX_SHAPES = 64


def observed(engine: Engine) -> bool:
    """Whether anything would see a statement run on ``engine`` through a ``Connection``:
    a connection or dialect event listener of any kind, SQL logging (``echo`` or the
    ``sqlalchemy.engine`` logger at INFO), or execution options set on the engine."""
    # ``_has_events`` is SQLAlchemy's own test, made before every statement it runs,
    # for exactly this (it has no public spelling). tests/test_tracing.py attaches
    # listeners after create_store and fails if it ever stops meaning this.
    return bool(
        engine._has_events
        or engine.dialect._has_events
        or engine.logger.isEnabledFor(logging.INFO)
        or engine.get_execution_options()
    )


def can_run_directly(engine: Engine) -> bool:
    """The engines with a direct path: SQLite on the standard library's driver."""
    dialect = engine.dialect
    return (
        dialect.name == "sqlite" and dialect.driver == "pysqlite" and dialect.paramstyle == "qmark"
    )


class _Bind(NamedTuple):
    key: str
    name: str
    default: Any
    process: Processor | None


class _Shape(NamedTuple):
    """An expanding statement rendered for one set of list lengths."""

    sql: str
    names: Sequence[str]
    processors: Mapping[str, Processor]
    expansion: Mapping[str, Sequence[str]]


def _bind_processor(type_: Any, dialect: Dialect) -> Processor | None:
    return type_.dialect_impl(dialect).bind_processor(dialect)  # type: ignore[no-any-return]


class _Prepared:
    """One statement compiled for SQLite, with its bind plan and result processors."""

    __slots__ = ("binds", "compiled", "fetch", "known", "result_processors", "shapes", "sql")

    def __init__(self, statement: Executable, dialect: Dialect) -> None:
        assert isinstance(statement, ClauseElement)
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler) and compiled.positiontup is not None
        self.compiled = compiled
        self.sql = compiled.string
        binds = compiled.binds
        expanding = any(bind.expanding for bind in binds.values())
        self.shapes: dict[tuple[int, ...], _Shape] | None = {} if expanding else None
        # In the order the SQL takes them.
        self.binds = [
            _Bind(
                binds[name].key,
                name,
                _REQUIRED if binds[name].required else binds[name].effective_value,
                _bind_processor(binds[name].type, dialect),
            )
            for name in compiled.positiontup
        ]
        # For the common call, which names every required bind by its key: (key,
        # processor) to look up, or (None, the processed value) for a bind with a
        # value of its own (SQLAlchemy's anonymous literals: the 1 of ``n + 1``).
        self.known: list[tuple[str | None, Any]] = [
            (bind.key, bind.process)
            if bind.default is _REQUIRED
            else (None, bind.default if bind.process is None else bind.process(bind.default))
            for bind in self.binds
        ]
        columns = getattr(statement, "exported_columns", ())
        # Only statements that return rows are fetched (a SELECT, or RETURNING).
        self.fetch = bool(columns)
        self.result_processors = [
            (position, process)
            for position, column in enumerate(columns)
            if (process := column.type.dialect_impl(dialect).result_processor(dialect, None))
            is not None
        ]

    def arguments(self, params: Params) -> tuple[str, tuple[Any, ...]]:
        """The SQL and its positional parameters for ``params``."""
        if self.shapes is not None:
            return self._expanded(params)
        try:
            return self.sql, tuple(
                known if key is None else params[key] if known is None else known(params[key])
                for key, known in self.known
            )
        except KeyError:  # a bind named otherwise, or missing: the full rules
            pass
        values = []
        for key, name, default, process in self.binds:
            if key in params:
                value = params[key]
            elif name in params:
                value = params[name]
            elif default is _REQUIRED:
                raise KeyError(f"missing bind parameter {key!r}")
            else:
                value = default
            values.append(value if process is None else process(value))
        return self.sql, tuple(values)

    def _expanded(self, params: Params) -> tuple[str, tuple[Any, ...]]:
        assert self.shapes is not None
        lengths = tuple(
            len(params[bind.key]) for bind in self.compiled.binds.values() if bind.expanding
        )
        shape = self.shapes.get(lengths)
        if shape is None:
            state = self.compiled.construct_expanded_state(dict(params))
            assert state.positiontup is not None
            shape = _Shape(
                state.statement,
                state.positiontup,
                # The expanded names' processors, and those of the other binds.
                {
                    **{bind.name: bind.process for bind in self.binds if bind.process},
                    **state.processors,
                },
                {name: list(names) for name, names in state.parameter_expansion.items()},
            )
            if len(self.shapes) < MAX_SHAPES:
                self.shapes[lengths] = shape
        values = dict(self.compiled.construct_params(params))
        for name, expanded in shape.expansion.items():
            items = values.pop(name)
            if items and isinstance(items[0], tuple):  # tuple IN: flattened in order
                items = [item for row in items for item in row]
            values.update(zip(expanded, items, strict=True))
        processors = shape.processors
        return shape.sql, tuple(
            value if (process := processors.get(name)) is None else process(value)
            for name in shape.names
            for value in (values[name],)
        )

    def rows(self, found: list[Row]) -> list[Row]:
        if not self.result_processors:
            return found
        out = []
        for row in found:
            values = list(row)
            for position, process in self.result_processors:
                values[position] = process(values[position])
            out.append(tuple(values))
        return out


# Statements are module-level constants that live as long as the process:
# keyed by id(), compiled once per SQLite dialect class.
_prepared: dict[int, _Prepared] = {}


class DirectTransaction:
    """One a2sql transaction on a pooled pysqlite connection's cursor."""

    __slots__ = ("_cursor", "_dialect", "_pooled")

    def __init__(self, pooled: PoolProxiedConnection, dialect: Dialect) -> None:
        self._pooled = pooled
        self._dialect = dialect
        self._cursor = pooled.cursor()

    def _prepare(self, statement: Executable) -> _Prepared:
        prepared = _prepared.get(id(statement))
        if prepared is None:
            prepared = _prepared[id(statement)] = _Prepared(statement, self._dialect)
        return prepared

    def send(
        self, sql: str, arguments: Any = (), *, many: bool = False, fetch: bool = False
    ) -> list[Row]:
        """Run SQL text as it is; its rows if ``fetch``."""
        cursor = self._cursor
        try:
            if many:
                cursor.executemany(sql, arguments)
                return []
            cursor.execute(sql, arguments)
            return cast("list[Row]", cursor.fetchall()) if fetch else []
        except sqlite3.Error as error:
            self._fail(error, sql, arguments)

    def rows(self, statement: Executable, params: Params) -> list[Row]:
        prepared = self._prepare(statement)
        sql, arguments = prepared.arguments(params)
        found = self.send(sql, arguments, fetch=prepared.fetch)
        return prepared.rows(found) if found else found

    def run_many(self, statement: Executable, many: Sequence[Params]) -> None:
        prepared = self._prepare(statement)
        assert prepared.shapes is None, "executemany takes no expanding parameters"
        self.send(prepared.sql, [prepared.arguments(params)[1] for params in many], many=True)

    def close(self) -> None:
        self._cursor.close()

    def _fail(self, error: sqlite3.Error, sql: str, arguments: Any) -> NoReturn:
        # As SQLAlchemy's own handling: a lost connection is invalidated, and the
        # driver's error raised as the DBAPIError of its kind.
        lost = self._dialect.is_disconnect(
            error,  # type: ignore[arg-type]
            self._pooled.dbapi_connection,
            self._cursor,
        )
        if lost:
            self._pooled.invalidate(error)
        raise DBAPIError.instance(
            sql, arguments, error, sqlite3.Error, connection_invalidated=lost, dialect=self._dialect
        ) from error
