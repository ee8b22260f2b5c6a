"""Hot statements: Core constructs compiled once per dialect, run on the driver's cursor.

The operations are written as SQLAlchemy Core statements run in one
transaction (a ``Tx``). Executing a construct through
``Connection.execute`` costs ~25 µs of Python per statement here (cache key,
execution context, result object) against ~5 µs for the statement itself
on SQLite. This module keeps SQLAlchemy's compiler, type processing, error
wrapping and pool invalidation, and skips the per-call execution machinery:
each statement is compiled once per dialect, its parameters processed by the
compiled bind processors, and its rows by the columns' result processors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn, cast

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

Params = Mapping[str, Any]
Row = tuple[Any, ...]


MAX_SHAPES = 64
_REQUIRED = object()


class _Bind(NamedTuple):
    name: str
    key: str
    default: Any
    process: Callable[[Any], Any] | None


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
        "fast_plan",
        "names",
        "plan",
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
        # How to build the driver's parameters without construct_params (the
        # same rules, decided once): per bind, in the order the SQL takes them.
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        order = self.names if self.names is not None else list(by_name)
        self.plan: list[_Bind] = []
        for name in order:
            bind = by_name[name]
            assert bind.callable is None, "a2sql statements bind no callables"
            self.plan.append(
                _Bind(
                    name,
                    bind.key,
                    _REQUIRED if bind.required else bind.effective_value,
                    self.processors.get(name),
                )
            )
        # The same plan for the common call, which names every required bind
        # by its key: (key, processor) to look up, or (None, the processed
        # value) for a bind with a value of its own (SQLAlchemy's anonymous
        # literals: an OFFSET 0, the 1 of ``attempt_count + 1``).
        self.fast_plan: list[tuple[str | None, Any]] = [
            (bind.key, bind.process)
            if bind.default is _REQUIRED
            else (None, bind.default if bind.process is None else bind.process(bind.default))
            for bind in self.plan
        ]
        # (column position, processor) of the columns that need converting.
        self.processed_columns: list[tuple[int, Callable[[Any], Any]]] = [
            (position, process)
            for position, entry in enumerate(compiled._result_columns)
            if (process := entry.type._cached_result_processor(dialect, None)) is not None
        ]

    def arguments(self, params: Params) -> tuple[str, Any]:
        """The SQL text and the driver's parameters for ``params``."""
        if self.expanding:
            return self._expanded_arguments(params)
        try:
            values = [
                known if key is None else params[key] if known is None else known(params[key])
                for key, known in self.fast_plan
            ]
        except KeyError:  # a bind named otherwise, or missing: the full rules
            values = self._values(params)
        if self.names is not None:
            return self.sql, tuple(values)
        return self.sql, {bind.name: value for bind, value in zip(self.plan, values, strict=True)}

    def _values(self, params: Params) -> list[Any]:
        values = []
        for name, key, default, process in self.plan:
            if key in params:
                value = params[key]
            elif name in params:
                value = params[name]
            elif default is _REQUIRED:
                raise KeyError(f"missing bind parameter {key!r}")
            else:
                value = default
            values.append(value if process is None else process(value))
        return values

    def _expanded_arguments(self, params: Params) -> tuple[str, Any]:
        shape = self._shape(params)
        values = dict(self.compiled.construct_params(params))
        for name, expanded in shape.expansion.items():
            items = values.pop(name)
            if items and isinstance(items[0], tuple):  # tuple IN: flattened in order
                items = [item for row in items for item in row]
            values.update(zip(expanded, items, strict=True))
        for name, process in shape.processors.items():
            if name in values:
                values[name] = process(values[name])
        if shape.names is not None:
            return shape.sql, tuple(values[name] for name in shape.names)
        return shape.sql, values

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
        if not processed:  # the drivers' rows are tuples already
            return list(rows)
        out = []
        for row in rows:
            values = list(row)
            for position, process in processed:
                values[position] = process(values[position])
            out.append(tuple(values))
        return out


# Prepared statements per driver: the driver matters, not only the database
# (aiosqlite and psycopg's async dialect process values differently from
# their sync twins). Keyed by the statement's id(): statements are
# module-level constants that live as long as the process.
_prepared: dict[tuple[type[Dialect], str], dict[int, _Prepared]] = {}


def _prepared_for(dialect: Dialect) -> dict[int, _Prepared]:
    return _prepared.setdefault((type(dialect), dialect.paramstyle), {})


def _prepare(tx: Tx, statement: ClauseElement) -> _Prepared:
    prepared = tx.prepared.get(id(statement))
    if prepared is None:
        prepared = tx.prepared[id(statement)] = _Prepared(statement, tx.dialect)
    return prepared


class Tx:
    """Statements on one driver connection through one cursor, a transaction at a time.

    A transaction runs either on a SQLAlchemy ``Connection``, which begins
    and ends it and whose ``before_cursor_execute`` listeners see every
    statement, or on a bare pooled driver connection, where a2sql begins and
    ends it itself (``a2sql.pooled``, which keeps a ``Tx`` with each idle
    connection for its next transactions). The second skips SQLAlchemy's
    connection and transaction objects, ~35 µs a transaction.
    """

    __slots__ = ("_connection", "_cursor", "_pool", "_pooled", "dialect", "prepared")

    def __init__(
        self,
        dialect: Dialect,
        *,
        connection: Connection | None = None,
        pooled: PoolProxiedConnection | None = None,
        pool: Pool | None = None,
    ) -> None:
        self.dialect = dialect
        self.prepared = _prepared_for(dialect)
        self._connection = connection
        self._pooled = pooled
        self._pool = pool
        source = connection.connection if connection is not None else pooled
        assert source is not None
        self._cursor = source.cursor()

    @classmethod
    def on(cls, connection: Connection) -> Tx:
        """A transaction on ``connection``, which runs it (begin, commit, rollback)."""
        return cls(connection.dialect, connection=connection)

    def execute(
        self, sql: str, arguments: Any, *, many: bool = False, fetch: bool = False
    ) -> list[Row]:
        """Send ``sql``; the raw rows if ``fetch``."""
        cursor = self._cursor
        connection = self._connection
        try:
            if connection is not None and connection.dispatch.before_cursor_execute:
                # Keep statement counters and tracing tools honest.
                connection.dispatch.before_cursor_execute(
                    connection, cursor, sql, arguments, None, many
                )
            if many:
                cursor.executemany(sql, arguments)
            else:
                cursor.execute(sql, arguments)
            # Only statements that return rows are fetched: no need to ask
            # for the description first (psycopg builds it anew each time).
            return cast("list[Row]", cursor.fetchall()) if fetch else []
        except Exception as error:
            self._fail(error, sql, arguments)

    def commit(self) -> None:
        """Commit a transaction a2sql runs itself."""
        assert self._pooled is not None
        try:
            self._pooled.commit()
        except Exception as error:
            self._fail(error, "COMMIT", ())

    def rollback(self) -> None:
        """Roll back a transaction a2sql runs itself, after a failure: never raises."""
        pooled = self._pooled
        assert pooled is not None
        if not pooled.is_valid:
            return
        try:
            pooled.rollback()
        except Exception as error:  # the failure being handled is the one to report
            if isinstance(error, self.dialect.loaded_dbapi.Error):
                pooled.invalidate(error)
            else:
                raise

    def close(self) -> None:
        # A cursor of a lost connection has nothing left to free.
        with suppress(Exception):
            self._cursor.close()

    def __enter__(self) -> Tx:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _fail(self, error: Exception, sql: str, arguments: Any) -> NoReturn:
        connection = self._connection
        if connection is not None:
            # SQLAlchemy's own handling: wraps the driver's error in a
            # DBAPIError and invalidates the pool on a lost connection.
            connection._handle_dbapi_exception(error, sql, arguments, self._cursor, None)
            raise AssertionError("unreachable: the handler raises")
        pooled = self._pooled
        assert pooled is not None and self._pool is not None
        dialect = self.dialect
        lost = isinstance(error, dialect.loaded_dbapi.Error) and dialect.is_disconnect(
            error, pooled.dbapi_connection, self._cursor
        )
        if lost:
            # As SQLAlchemy does: this connection is dropped, and every pooled
            # connection older than the failure is replaced before reuse.
            self._pool._invalidate(pooled, error)
            if pooled.is_valid:
                pooled.invalidate(error)
        raise_wrapped(error, dialect, sql, arguments, lost=lost)


def raise_wrapped(
    error: Exception, dialect: Dialect, sql: str | None, arguments: Any, *, lost: bool
) -> NoReturn:
    """Raise the driver's error as SQLAlchemy's ``DBAPIError`` of its kind; others as they are."""
    base = dialect.loaded_dbapi.Error
    if not isinstance(error, base):
        raise error
    raise DBAPIError.instance(
        sql, arguments, error, base, connection_invalidated=lost, dialect=dialect
    ) from error


def _execute(tx: Tx, statement: ClauseElement, params: Params, *, fetch: bool) -> list[Row]:
    prepared = _prepare(tx, statement)
    sql, arguments = prepared.arguments(params)
    found = tx.execute(sql, arguments, fetch=fetch)
    return prepared.process_rows(found) if found else []


def rows(tx: Tx, statement: ClauseElement, params: Params) -> list[Row]:
    """Every row of ``statement``, processed to Python values."""
    return _execute(tx, statement, params, fetch=True)


# Items of one list bound per statement: far below SQLite's 32,766 and
# PostgreSQL's 65,535 parameters, whatever else the statement binds.
LIST_CHUNK = 10_000


def rows_for_each_chunk(
    tx: Tx,
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
        found.extend(_execute(tx, statement, chunk, fetch=True))
    return found


def first(tx: Tx, statement: ClauseElement, params: Params) -> Row | None:
    """The first row, or ``None``."""
    found = _execute(tx, statement, params, fetch=True)
    return found[0] if found else None


def run(tx: Tx, statement: ClauseElement, params: Params) -> None:
    """Execute a statement whose rows are not needed."""
    _execute(tx, statement, params, fetch=False)


def run_many(tx: Tx, statement: ClauseElement, many: Sequence[Params]) -> None:
    """Execute a statement once per parameter set, in one driver call (``executemany``)."""
    if len(many) == 1:
        _execute(tx, statement, many[0], fetch=False)
        return
    prepared = _prepare(tx, statement)
    assert not prepared.expanding, "executemany takes no expanding parameters"
    arguments = [prepared.arguments(params)[1] for params in many]
    tx.execute(prepared.sql, arguments, many=True)
