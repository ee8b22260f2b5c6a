"""A transaction's statements written to PostgreSQL at once, and their answers read.

a2sql's hot writes are one pipeline: the session's lock, the statement,
and on some servers ``BEGIN`` and ``COMMIT`` (a2sql.backends.postgresql.one_statement).
psycopg's pipeline mode writes each statement as it is executed, then the
Sync, then a flush request: four writes for one transaction, as many times
the server is woken up, and a cursor's bookkeeping for each statement. Here
the statements go into libpq's buffer and out in one write, and the answers
are read as they arrive: on this machine that took a pipeline of a lock and an
insert from 73 to 14-18 µs of client CPU, from 95 to 62-75 µs of server CPU,
and from 275 to 172-185 µs of wall time.

Built on psycopg's public libpq wrapper (``psycopg.pq``). Parameters go as
text, converted by psycopg's own adaptation (``psycopg.adapt.Transformer``,
which its cursors use), with their types left for the server to infer from the
statement, whose parameters SQLAlchemy casts; rows come back converted by the
same, as a cursor would give them. A failed statement raises psycopg's error
for its SQLSTATE, as a cursor would.

Statements with parameters are prepared on the server under names of
a2sql's own, where psycopg would prepare them too (not behind a pooler, nor
with ``prepare_threshold=None``), and where libpq can close a prepared
statement (version 17 on); otherwise each goes unnamed. The names prepared on
a connection are kept with it, in the pool, for as long as it lives. But
psycopg deallocates every prepared statement of a connection
(``DEALLOCATE ALL``) when it rolls back a transaction after preparing
statements of its own, as an application's transaction on the same engine
may: a batch that finds a name gone, and that the failure undid whole (it
began outside any transaction), is sent again, once, every name prepared
anew. A name is closed before it is prepared (which the server allows
whether or not it exists). In a transaction begun before the batch, where a
failure could not be undone, a name is trusted only inside ``with wire:``, and
only if it was prepared since a name that ran there: ``DEALLOCATE ALL`` takes
every name at once, so none prepared after one still there was taken.
"""

from __future__ import annotations

import itertools
import re
import selectors
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer

from a2sql.execution.pooler import known_behind_pooler

Row = tuple[Any, ...]

# Whether libpq can close a prepared statement in a pipeline (PQsendClosePrepared).
_CAN_CLOSE = bool(
    getattr(psycopg, "capabilities", None) and psycopg.capabilities.has_send_close_prepared()
)

# poll() (any descriptor number, and no descriptor of its own) where the platform has
# it; select() elsewhere (Windows).
_Selector: type[selectors.BaseSelector] = getattr(
    selectors, "PollSelector", selectors.SelectSelector
)

# Key, in the pool's ``info`` of a driver connection, of the names prepared on it.
_PREPARED_KEY = "a2sql_wire_prepared"
# The order names were prepared in, on any connection: each name prepared on a
# connection is kept with the next of these.
_SERIALS = itertools.count()

# What each message queued is answered with, in order (``_BEST_EFFORT``: a statement
# whose failure is not the batch's).
_CLOSE, _PREPARE, _DISCARD, _FETCH, _SYNC, _BEST_EFFORT = range(6)

# PostgreSQL's code for: prepared statement "…" does not exist.
_NO_SUCH_STATEMENT = "26000"

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.EMPTY_QUERY)

# SQLAlchemy's placeholders for psycopg (``%(name)s``), and its escaped ``%``.
_PLACEHOLDER = re.compile(r"%\(([^)]+)\)s|%%")
# SQL as SQLAlchemy renders it -> (the SQL with ``$n``, the names in ``$n``'s order).
_converted: dict[str, tuple[bytes, tuple[str, ...]]] = {}
# The SQL with ``$n`` -> the name it is prepared under, the same on every connection.
_names: dict[bytes, bytes] = {}
# Bounds on both (expanding statements render one SQL per list length).
_MAX_CACHED = 4096


def _dollar(sql: str) -> tuple[bytes, tuple[str, ...]]:
    """``sql``'s ``%(name)s`` placeholders as ``$1 …``, each name numbered once."""
    found = _converted.get(sql)
    if found is None:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "%"
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        found = (_PLACEHOLDER.sub(number, sql).encode(), tuple(names))
        if len(_converted) >= _MAX_CACHED:
            _converted.clear()
        _converted[sql] = found
    return found


_numbers = itertools.count(1)


def _name(query: bytes) -> bytes:
    name = _names.get(query)
    if name is None:
        if len(_names) >= _MAX_CACHED:
            # A name never serves other SQL: statements prepared under it stay valid.
            _names.clear()
        name = _names[query] = b"a2sql_%d" % next(_numbers)
    return name


class _Queued(NamedTuple):
    """A message of the batch being answered, kept to send it again."""

    query: bytes  # b"" for a Sync
    params: Sequence[Any] | None
    answer: int
    prepare: bool


_SYNC_MESSAGE = _Queued(b"", None, _SYNC, False)


class Wire:
    """One psycopg connection's statements, queued (``add``, ``sync``), then written at
    once and answered (``answer``, ``answer_async``). ``info``: the pool's dictionary
    of the connection, where the names prepared on it are kept (as long as it lives)."""

    __slots__ = (
        "_batch",
        "_contained",
        "_driver",
        "_effort_segment",
        "_encoding",
        "_error",
        "_expected",
        "_inside",
        "_pgconn",
        "_poll",
        "_prepared",
        "_proven",
        "_rows",
        "_sent_again",
        "_tx",
        "_unnamed",
    )

    def __init__(self, driver: Any, info: dict[Any, Any]) -> None:
        self._driver = driver
        self._pgconn: Any = driver.pgconn
        self._tx = Transformer(driver)
        self._encoding = self._tx.encoding
        # Behind a pooler, never a name of a2sql's own, whatever the connection's
        # threshold (an application's engine without the setting the docs name):
        # another client's statement of that name would run with these arguments.
        self._unnamed = known_behind_pooler(info)
        prepared = info.get(_PREPARED_KEY)
        if prepared is None:
            prepared = info[_PREPARED_KEY] = {}
        # Each name prepared on the connection, and when (``_SERIALS``).
        self._prepared: dict[bytes, int] = prepared
        # Inside ``with wire:`` (``_inside``): no name prepared since this serial can
        # have been deallocated (one prepared then was just run); ``None``: none is
        # known.
        self._inside = False
        self._proven: int | None = None
        # For each answer still to come: what it is, the name of the statement it is
        # for (if prepared), and whether it is a best-effort statement's.
        self._expected: deque[tuple[int, bytes, bool]] = deque()
        # Whether a best-effort statement was queued since the last Sync: the commit
        # at the next Sync is then best-effort too.
        self._effort_segment = False
        # The batch being answered, and whether it began outside any transaction (its
        # statements are then all a failure undoes, and it can be sent again).
        self._batch: list[_Queued] = []
        self._contained = False
        self._sent_again = False
        self._rows: list[Row] = []
        self._error: Exception | None = None
        # For the sync wait.
        self._poll = _Selector()
        self._poll.register(self._pgconn.socket, selectors.EVENT_READ)

    def __enter__(self) -> Wire:
        self._inside, self._proven = True, None
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """A failure inside ``with wire:`` abandons a pipeline it left midway. Outside
        the block the connection is psycopg's, which may deallocate every name."""
        self._inside, self._proven = False, None
        if kind is not None:
            self.abandon()

    def add(
        self,
        sql: str | bytes,
        arguments: Mapping[str, Any] | None = None,
        *,
        fetch: bool = False,
        best_effort: bool = False,
    ) -> None:
        """Queue a statement: SQL as SQLAlchemy renders it for psycopg, with its
        arguments by name, or bytes without parameters. ``fetch``: its rows are the
        answer's (one statement of a pipeline). SQL with parameters is prepared on
        the server under a name of its own where the connection prepares at all
        (its ``prepare_threshold`` is set: a2sql.execution.pooler unsets it behind a
        pooler). ``best_effort``: its failure is not raised (nor are the statements
        up to the next ``sync`` then run, nor is a failure of the commit at that
        ``sync``), and its name is prepared anew the next time.

        A failure between the first ``add`` and the end of ``answer`` leaves the
        pipeline midway: the caller then calls ``abandon``, or queues and answers
        inside ``with wire:``."""
        names: tuple[str, ...] = ()
        if isinstance(sql, bytes):
            query = sql
        else:
            query, names = _dollar(sql)
        params: Sequence[Any] | None = None
        if names:
            assert arguments is not None
            params = self._tx.dump_sequence(
                [arguments[name] for name in names], [PyFormat.TEXT] * len(names)
            )
        if not self._batch:
            self._contained = self._pgconn.transaction_status == pq.TransactionStatus.IDLE
        # BEGIN and COMMIT (bytes) cost nothing to parse: they go unnamed.
        prepare = bool(names) and not self._unnamed and self._driver.prepare_threshold is not None
        answer = _BEST_EFFORT if best_effort else _FETCH if fetch else _DISCARD
        self._queue(_Queued(query, params, answer, prepare))

    def sync(self) -> None:
        """End the statements queued so far: a transaction of their own where none was
        begun, and the point up to which a failure skips them."""
        self._queue(_SYNC_MESSAGE)

    def _queue(self, message: _Queued) -> None:
        pgconn = self._pgconn
        if pgconn.pipeline_status == pq.PipelineStatus.OFF:
            pgconn.enter_pipeline_mode()
        self._batch.append(message)
        expected = self._expected
        effort = message.answer == _BEST_EFFORT
        self._effort_segment |= effort
        name = b""
        if message.answer == _SYNC:
            pgconn.pipeline_sync()
            # The commit at this Sync is best-effort where a statement before it was.
            effort, self._effort_segment = self._effort_segment, False
        elif message.prepare and _CAN_CLOSE:
            name = _name(message.query)
            if not self._trusted(name):
                pgconn.send_close_prepared(name)
                expected.append((_CLOSE, b"", effort))
                pgconn.send_prepare(name, message.query)
                expected.append((_PREPARE, name, effort))
            pgconn.send_query_prepared(name, message.params)
        else:
            pgconn.send_query_params(message.query, message.params)
        expected.append((message.answer, name, effort))

    def _trusted(self, name: bytes) -> bool:
        """Whether ``name`` is run as prepared, without preparing it again. In a batch
        begun outside any transaction, if it was prepared: a failure because it is
        gone undoes the whole batch, which is then sent again (``_send_again``). In a
        transaction begun before, where that failure could not be undone, only if it
        was prepared since a name that ran inside ``with wire:``: ``DEALLOCATE ALL``
        takes every name at once, so none prepared after one that is still there was
        taken."""
        serial = self._prepared.get(name)
        if serial is None:
            return False
        return self._contained or (self._proven is not None and serial >= self._proven)

    def answer(self) -> list[Row]:
        """Write what is queued and wait for every answer: the rows of the statement
        queued with ``fetch``, or the first statement's error, raised."""
        exchange = self._exchange()
        try:
            while True:
                fileno, writing = next(exchange)
                if writing:
                    with _Selector() as writable:
                        writable.register(fileno, selectors.EVENT_WRITE)
                        writable.select()
                else:
                    self._poll.select()
        except StopIteration as done:
            rows: list[Row] = done.value
            return rows
        except BaseException:
            self.abandon()
            raise

    async def answer_async(self, wait: Callable[[int, bool], Awaitable[Any]]) -> list[Row]:
        """``answer`` on an event loop: ``wait(fileno, writing)`` is awaited until the
        socket is ready."""
        exchange = self._exchange()
        try:
            while True:
                await wait(*next(exchange))
        except StopIteration as done:
            rows: list[Row] = done.value
            return rows
        except BaseException:
            self.abandon()
            raise

    def _exchange(self) -> Generator[tuple[int, bool], None, list[Row]]:
        """Write what is queued and take every answer, yielding ``(fileno, writing)``
        whenever the socket must be waited for."""
        pgconn = self._pgconn
        fileno = pgconn.socket
        while True:
            while pgconn.flush():
                yield fileno, True
            while not self._read():
                yield fileno, False
            if not self._send_again():
                return self._result()

    def _read(self) -> bool:
        """Take the answers that have arrived; whether every one has."""
        pgconn = self._pgconn
        pgconn.consume_input()
        expected = self._expected
        while expected:
            if pgconn.is_busy():
                return False
            result = pgconn.get_result()
            if result is None:  # the end of one statement's answer
                continue
            kind, name, effort = expected.popleft()
            status = result.status
            if kind == _SYNC:
                if status != pq.ExecStatus.FATAL_ERROR:
                    continue
                # A transaction begun implicitly commits at its Sync, and failed to (a
                # NOTIFY's wait for the notification queue's lock cancelled, say): its
                # error comes first, then the Sync's own answer, still to be read.
                expected.appendleft((kind, name, effort))
            if effort and status not in _OK:
                # Not the batch's failure. Gone, perhaps (its failure may be that):
                # prepared anew next time.
                self._prepared.pop(name, None)
                continue
            if status == pq.ExecStatus.FATAL_ERROR:
                if self._error is None:
                    # psycopg's own maker of the error a cursor raises for a failed
                    # result (its SQLSTATE's class, with ``diag``), not in its
                    # documentation: a2sql's error handling reads both.
                    # tests/internals/test_wire.py fails if it ever stops giving them.
                    self._error = errors.error_from_result(result, encoding=self._encoding)
            elif status == pq.ExecStatus.PIPELINE_ABORTED:
                pass  # skipped after the failure already taken
            elif status not in _OK:
                if self._error is None:
                    self._error = errors.InterfaceError(f"unexpected answer: {status.name}")
            elif kind == _PREPARE:
                self._prepared[name] = next(_SERIALS)
            elif kind != _CLOSE:  # run (closing a name says nothing of it)
                if name:
                    self._prove(name)
                if kind == _FETCH:
                    tx = self._tx
                    tx.set_pgresult(result)
                    self._rows = tx.load_rows(0, result.ntuples, tuple)
        pgconn.exit_pipeline_mode()
        return True

    def _prove(self, name: bytes) -> None:
        """``name`` ran as prepared: so did, as far as deallocation goes, every name
        prepared since."""
        serial = self._prepared.get(name)
        if self._inside and serial is not None and (self._proven is None or serial < self._proven):
            self._proven = serial

    def _send_again(self) -> bool:
        """When the batch failed because a name it trusted was no longer prepared
        (deallocated behind a2sql's back: psycopg's rollback does it), and the failure
        undid all of it: every name forgotten, the batch queued again, once. Whether
        it was."""
        error = self._error
        if (
            error is None
            or getattr(error, "sqlstate", None) != _NO_SUCH_STATEMENT
            or not self._contained
            or self._sent_again
        ):
            return False
        self._sent_again = True
        self._prepared.clear()
        self._proven = None
        self._error = None
        self._rows = []
        batch, self._batch = self._batch, []
        if self._pgconn.transaction_status != pq.TransactionStatus.IDLE:
            self._queue(_Queued(b"ROLLBACK", None, _DISCARD, False))  # BEGIN, then failed
        for message in batch:
            self._queue(message)
        return True

    def _result(self) -> list[Row]:
        rows, error = self._rows, self._error
        self._rows, self._error = [], None
        self._batch = []
        self._sent_again = False
        if error is not None:
            raise error
        return rows

    def forget(self) -> None:
        """Prepare every statement anew: for after a rollback through psycopg, which may
        have deallocated them."""
        self._prepared.clear()
        self._proven = None

    def abandon(self) -> None:
        """After a failure with a pipeline midway (a lost connection, an interrupt, an
        error queueing a statement): the connection is closed, never to be reused in a
        state unknown. What was sent, if anything, may have committed."""
        self._expected.clear()
        self._effort_segment = False
        self._batch = []
        self._sent_again = False
        self._rows, self._error = [], None
        pgconn = self._pgconn
        if pgconn.status != pq.ConnStatus.BAD and pgconn.pipeline_status != pq.PipelineStatus.OFF:
            pgconn.finish()
