"""Transactions on the driver's cursor, for an engine nothing observes.

``Connection.execute`` costs ~20 µs of Python a statement on SQLite here
(execution context, parameter processing, result object), against ~10 µs
for the statement itself, and ~80 µs with psycopg: a cycle of append, claim
and complete ran at half the speed of the same work on ``sqlite3``, and 0.75
of it on psycopg. So when nothing can tell the difference, ``Store``'s own
transactions run their statements on the pooled driver connection's cursor:
the same SQL (compiled by SQLAlchemy from the same constructs), the same bind
and result processing (the types' own processors), driver errors wrapped and
lost connections invalidated as SQLAlchemy does it.

"Nothing can tell" is checked at the start of every transaction
(``observed``), so a listener or ``echo`` attached at any time, before or
after ``create_store``, sees every statement of every later transaction:
those then run through ``Connection.execute``.

A store holds a driver connection across many transactions (``KeptConnection``):
its cursor is made once, and on PostgreSQL it stays in psycopg's autocommit
mode while held, a2sql sending ``BEGIN`` and ``COMMIT`` itself (it rolls back
through the driver), or neither for a transaction it sends whole in one
pipeline (a2sql.execution.wire) where the connection's default isolation level is READ
COMMITTED. Switching autocommit on and off for each pipelined transaction,
and a new cursor for each of its statements, cost 5-10% of a cycle's CPU
(BENCHMARKS.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, cast

from sqlalchemy import Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

from a2sql.backends import backend_of
from a2sql.execution import pooler as preparation

if TYPE_CHECKING:
    from a2sql.execution.wire import Wire

Params = Mapping[str, Any]
Row = tuple[Any, ...]
Processor = Callable[[Any], Any]

_REQUIRED = object()
# a2sql's writes need READ COMMITTED, whatever the server's or the connection's
# default (a2sql.backends.postgresql).
BEGIN_READ_COMMITTED = b"BEGIN ISOLATION LEVEL READ COMMITTED"
COMMIT = b"COMMIT"
# Expanding statements rendered per list length, kept per statement.
MAX_SHAPES = 64


def observed(engine: Engine) -> bool:
    """Whether anything would see a statement run on ``engine`` through a ``Connection``:
    a connection or dialect event listener of any kind, SQL logging (``echo`` or the
    ``sqlalchemy.engine`` logger at INFO), or execution options set on the engine."""
    # ``_has_events`` is SQLAlchemy's own test, made before every statement it runs,
    # for exactly this (it has no public spelling). tests/internals/test_tracing.py attaches
    # listeners after create_store and fails if it ever stops meaning this.
    return bool(
        engine._has_events
        or engine.dialect._has_events
        or engine.logger.isEnabledFor(logging.INFO)
        or engine.get_execution_options()
    )


def can_run_directly(engine: Engine) -> bool:
    """Whether ``engine``'s driver has a direct path (sqlite3, psycopg's sync mode): the
    backend's direct driver, with the paramstyle a2sql builds parameters for."""
    dialect = engine.dialect
    return backend_of(engine).direct_driver == (dialect.driver, dialect.paramstyle)


class _Bind(NamedTuple):
    key: str
    name: str
    default: Any
    process: Processor | None


class _Shape(NamedTuple):
    """An expanding statement rendered for one set of list lengths."""

    sql: str
    names: Sequence[str] | None
    processors: Mapping[str, Processor]
    expansion: Mapping[str, Sequence[str]]


def _bind_processor(type_: Any, dialect: Dialect) -> Processor | None:
    return type_.dialect_impl(dialect).bind_processor(dialect)  # type: ignore[no-any-return]


class Prepared:
    """One statement compiled for one dialect, with its bind plan and result processors."""

    __slots__ = (
        "binds",
        "compiled",
        "fetch",
        "known",
        "positional",
        "result_processors",
        "shapes",
        "sql",
    )

    def __init__(self, statement: Executable, dialect: Dialect) -> None:
        assert isinstance(statement, ClauseElement)
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.compiled = compiled
        self.sql = compiled.string
        binds = compiled.binds
        expanding = any(bind.expanding for bind in binds.values())
        self.shapes: dict[tuple[int, ...], _Shape] | None = {} if expanding else None
        # In the order the SQL takes them (positional), or by name.
        self.positional = compiled.positiontup is not None
        names = compiled.positiontup if compiled.positiontup is not None else list(binds)
        self.binds = [
            _Bind(
                binds[name].key,
                name,
                _REQUIRED if binds[name].required else binds[name].effective_value,
                _bind_processor(binds[name].type, dialect),
            )
            for name in names
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

    def arguments(self, params: Params) -> tuple[str, Any]:
        """The SQL and the driver's parameters for ``params``."""
        if self.shapes is not None:
            return self._expanded(params)
        try:
            values = [
                known if key is None else params[key] if known is None else known(params[key])
                for key, known in self.known
            ]
        except KeyError:  # a bind named otherwise, or missing: the full rules
            values = self._values(params)
        if self.positional:
            return self.sql, tuple(values)
        return self.sql, {bind.name: value for bind, value in zip(self.binds, values, strict=True)}

    def _values(self, params: Params) -> list[Any]:
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
        return values

    def _expanded(self, params: Params) -> tuple[str, Any]:
        assert self.shapes is not None
        lengths = tuple(
            len(params[bind.key]) for bind in self.compiled.binds.values() if bind.expanding
        )
        shape = self.shapes.get(lengths)
        if shape is None:
            state = self.compiled.construct_expanded_state(dict(params))
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
        for name, process in processors.items():
            if name in values:
                values[name] = process(values[name])
        if shape.names is None:
            return shape.sql, values
        return shape.sql, tuple(values[name] for name in shape.names)

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


# a2sql's statements are built once (module-level constants, or built by functions
# that cache what they build) and live as long as the process: each is compiled once
# per driver, keyed by id(). An entry holds its statement (the compiled form refers
# to it), so no other statement can take that id while the entry lives. A statement
# built for each call would add an entry each time: past MAX_PREPARED entries (the
# whole contract, on both engines, makes about 130) the cache starts afresh rather
# than grow without end.
MAX_PREPARED = 1_000
_prepared: dict[tuple[str, int], Prepared] = {}


def prepared(statement: Executable, dialect: Dialect) -> Prepared:
    """``statement`` compiled for ``dialect``'s driver, once."""
    key = (dialect.driver, id(statement))
    found = _prepared.get(key)
    if found is None:
        if len(_prepared) >= MAX_PREPARED:
            _prepared.clear()
        found = _prepared[key] = Prepared(statement, dialect)
    return found


class KeptConnection:
    """A pooled driver connection while a store holds it, across its transactions.

    Set up when the store takes it from the pool, put back as it was by
    ``release``: the cursor statements run on and, on PostgreSQL, psycopg's
    autocommit mode. In that mode psycopg sends no BEGIN of its own, which in a
    pipeline would wait for its answer; a2sql's transactions send theirs, at
    READ COMMITTED whatever the connection's level. Pipelines go through
    ``wire`` (a2sql.execution.wire), made at the first.
    """

    __slots__ = ("_set_autocommit", "_wire", "cursor", "pooled", "sends_begin")

    def __init__(self, pooled: PoolProxiedConnection, *, sends_begin: bool) -> None:
        self.pooled = pooled
        self.sends_begin = sends_begin
        self.cursor: Any = pooled.cursor()
        self._wire: Wire | None = None
        self._set_autocommit = False
        if not sends_begin:
            driver: Any = pooled.driver_connection
            if not driver.autocommit:
                driver.autocommit = True
                self._set_autocommit = True

    @property
    def wire(self) -> Wire:
        """The connection's pipelines (PostgreSQL)."""
        if self._wire is None:
            from a2sql.execution.wire import Wire  # psycopg's: PostgreSQL only

            self._wire = Wire(self.pooled.driver_connection, self.pooled.info)
        return self._wire

    def forget_prepared(self) -> None:
        """After a rollback through the driver (a2sql.execution.wire)."""
        if self._wire is not None:
            self._wire.forget()

    def release(self) -> None:
        """Put the connection back as it was taken, and check it in to the pool."""
        pooled = self.pooled
        if pooled.is_valid:
            try:
                self.cursor.close()
                if self._set_autocommit:
                    pooled.driver_connection.autocommit = False  # type: ignore[union-attr]
            except Exception as error:  # lost meanwhile: the pool must not hand it out
                pooled.invalidate(error)
        pooled.close()


class RawTransaction:
    """One a2sql transaction on a held driver connection's cursor: an ``Executor``
    (a2sql.sql.executor) that sends a plan whole."""

    sends_whole = True

    __slots__ = (
        "_cursor",
        "_dialect",
        "_engine",
        "_error",
        "_held",
        "_implicit",
        "_pooled",
        "_unbegun",
        "commits_later",
        "sends_begin",
    )

    def __init__(self, engine: Engine, held: KeptConnection) -> None:
        self._engine = engine
        self._held = held
        self._pooled = held.pooled
        self._dialect = engine.dialect
        self._error: type[Exception] = self._dialect.loaded_dbapi.Error
        self.sends_begin = held.sends_begin
        self._cursor = held.cursor
        # PostgreSQL: BEGIN is still to be sent, with the first statement (SQLite
        # sends it in ``begin``).
        self._unbegun = not held.sends_begin
        # Whether a transaction sent whole may go without BEGIN and COMMIT
        # (a2sql.execution.pooler.implicit_transactions; PostgreSQL, from ``begin``).
        self._implicit = False
        # Whether whoever runs the transaction commits it (or rolls it back)
        # itself: an AsyncStore's hand-off decides at the end, so that a call
        # cancelled while any statement waits commits nothing (a2sql.execution.threads).
        # A ``pipeline`` then leaves the transaction open.
        self.commits_later = False

    @property
    def driver_connection(self) -> Any:
        """The driver's connection the transaction runs on."""
        return self._pooled.driver_connection

    def _prepare(self, statement: Executable) -> Prepared:
        return prepared(statement, self._dialect)

    def begin(self, *, read_only: bool) -> None:
        """Open the transaction: on PostgreSQL, BEGIN goes with the first statement."""
        if self.sends_begin:
            self.send("BEGIN" if read_only else "BEGIN IMMEDIATE")
            return
        connection: Any = self._pooled.dbapi_connection
        info = self._pooled.info
        self._implicit = preparation.implicit_transactions(info, connection, self.scalar)

    def commit(self) -> None:
        # As a statement on SQLite too: the driver keeps it prepared, where its
        # commit() prepares COMMIT anew each time.
        if self.sends_begin:
            self.send("COMMIT")
        elif not self._unbegun:
            self.send(COMMIT)
            self._unbegun = True

    def pipeline(
        self,
        lock: tuple[Executable, Params],
        statement: tuple[Executable, Params],
        *,
        commit: bool,
        then: tuple[Executable, Params] | None = None,
    ) -> list[Row]:
        """BEGIN, the ``lock`` statement, ``statement`` and, if
        ``commit``, COMMIT, in one pipeline (a2sql.execution.wire): the statement's rows.
        Committed, the transaction is over when this returns, and a later statement
        begins the next one. ``then`` (with ``commit``): a statement sent with the
        last of them, run after the commit in a transaction of its own, whose
        failure is not the call's. One round trip: the server has the whole
        transaction before it waits for the lock, so a client frozen mid-way never
        holds it."""
        driver: Any = self._pooled.driver_connection
        wire = self._held.wire
        sent: list[tuple[str, Any]] = []
        # (A connection's first transaction has begun already: a2sql.execution.pooler
        # asked the server a question.)
        begin = self._unbegun
        # Sent whole, without BEGIN and COMMIT where the statements up to the Sync
        # make a transaction at READ COMMITTED: two statements of four.
        implicit = begin and commit and self._implicit
        self._unbegun = commit
        try:
            with wire:
                if begin and not implicit:
                    sent.append((BEGIN_READ_COMMITTED.decode(), ()))
                    wire.add(BEGIN_READ_COMMITTED)
                sql, arguments = self._prepare(lock[0]).arguments(lock[1])
                sent.append((sql, arguments))
                wire.add(sql, arguments)
                built, params = statement
                prepared = self._prepare(built)
                sql, arguments = prepared.arguments(params)
                sent.append((sql, arguments))
                wire.add(sql, arguments, fetch=True)
                if commit and not implicit:
                    sent.append(("COMMIT", ()))
                    wire.add(COMMIT)
                wire.sync()
                if then is not None:
                    assert commit, "a statement after the commit, without one"
                    wire.add(*self._prepare(then[0]).arguments(then[1]), best_effort=True)
                    wire.sync()
                rows = wire.answer()
        except self._error as error:
            # Which statement failed is in the error; all of them are reported.
            lost = bool(driver.broken or driver.closed)
            self._fail(error, ";\n".join(sql for sql, _ in sent), [a for _, a in sent], lost=lost)
        return prepared.rows(rows) if prepared.fetch else []

    def rollback(self) -> None:
        """After a failure: never raises (the failure being handled is the one to report)."""
        pooled = self._pooled
        if not pooled.is_valid:
            return
        driver: Any = pooled.driver_connection
        try:
            if not self.sends_begin:
                # The driver's own, in autocommit mode too: it sends ROLLBACK when a
                # transaction is open, and may deallocate a2sql's prepared statements.
                driver.rollback()
                self._held.forget_prepared()
            elif driver.in_transaction:
                self._cursor.execute("ROLLBACK")
        except self._error as error:
            pooled.invalidate(error)

    def send(
        self, sql: str | bytes, arguments: Any = (), *, many: bool = False, fetch: bool = False
    ) -> list[Row]:
        """Run SQL text as it is; its rows if ``fetch``. The first on PostgreSQL begins the
        transaction."""
        if self._unbegun:
            self._unbegun = False
            self.send(BEGIN_READ_COMMITTED)
        cursor = self._cursor
        try:
            if many:
                cursor.executemany(sql, arguments)
                return []
            cursor.execute(sql, arguments)
            return cast("list[Row]", cursor.fetchall()) if fetch else []
        except self._error as error:
            self._fail(error, sql, arguments)

    def rows(self, statement: Executable, params: Params) -> list[Row]:
        prepared = self._prepare(statement)
        sql, arguments = prepared.arguments(params)
        found = self.send(sql, arguments, fetch=prepared.fetch)
        return prepared.rows(found) if found else found

    def first(self, statement: Executable, params: Params) -> Row | None:
        found = self.rows(statement, params)
        return found[0] if found else None

    def run(self, statement: Executable, params: Params) -> None:
        self.rows(statement, params)

    def count(self, statement: Executable, params: Params) -> int:
        """Run a statement that returns no rows; how many rows it changed."""
        self.rows(statement, params)
        return int(self._cursor.rowcount)

    def run_many(self, statement: Executable, many: Sequence[Params]) -> None:
        if len(many) == 1:
            self.rows(statement, many[0])
            return
        if not many:
            return
        prepared = self._prepare(statement)
        assert prepared.shapes is None, "executemany takes no expanding parameters"
        self.send(prepared.sql, [prepared.arguments(params)[1] for params in many], many=True)

    def scalar(self, sql: str) -> Any:
        """The first column of the first row of SQL text (``None`` without rows)."""
        found = self.send(sql, fetch=True)
        return found[0][0] if found else None

    def _fail(
        self, error: Exception, sql: str | bytes, arguments: Any, *, lost: bool = False
    ) -> NoReturn:
        # As SQLAlchemy's own handling: a lost connection is invalidated, and
        # the pool's idle ones (older than the failure, likely as dead: a server
        # restart) closed. ``lost``: known lost whatever the error says.
        lost = lost or self._dialect.is_disconnect(
            error,  # type: ignore[arg-type]
            self._pooled.dbapi_connection,
            self._cursor,
        )
        if lost:
            self._pooled.invalidate(error)
            self._engine.pool.dispose()
        text = sql.decode() if isinstance(sql, bytes) else sql
        raise self.wrap(self._engine, error, text, arguments, lost=lost) from error

    @staticmethod
    def wrap(
        engine: Engine, error: Exception, sql: str | None, arguments: Any, *, lost: bool
    ) -> StatementError:
        """The driver's error as SQLAlchemy's ``DBAPIError`` of its kind."""
        dialect = engine.dialect
        return DBAPIError.instance(
            sql,
            arguments,
            error,
            dialect.loaded_dbapi.Error,
            connection_invalidated=lost,
            dialect=dialect,
        )
