"""a2sql.execution.wire: a transaction's statements written to PostgreSQL at once, their answers
read back as psycopg's cursors would give them, and a failure as a cursor raises it."""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine

import a2sql
from a2sql import NewEvent
from a2sql.execution.engines import resolve_url

psycopg = pytest.importorskip("psycopg")
from psycopg import pq  # noqa: E402

from a2sql.execution.wire import Wire  # noqa: E402


@pytest.fixture
def connection(postgres_url: str) -> Iterator[Any]:
    """A psycopg connection in autocommit mode, as a2sql holds them."""
    engine = create_engine(resolve_url(postgres_url))
    pooled = engine.raw_connection()
    driver: Any = pooled.driver_connection
    driver.autocommit = True
    try:
        yield driver
    finally:
        pooled.close()
        engine.dispose()


def _alone(wire: Wire, sql: str, n: int) -> list[Any]:
    """``sql`` with its parameter ``n`` alone in a pipeline: its rows."""
    wire.add(sql, {"n": n}, fetch=True)
    wire.sync()
    return wire.answer()


def _unique(sql: str) -> str:
    """``sql`` as no earlier test sent it: prepared anew."""
    return f"{sql} -- {uuid.uuid4().hex}"


def test_values_come_back_as_a_cursor_gives_them(connection: Any) -> None:
    driver = connection
    wire = Wire(driver, {})
    sql = _unique(
        "SELECT %(big)s::bigint, %(text)s::text, %(flag)s::boolean, %(at)s::timestamptz,"
        " %(items)s::text[], %(doc)s::jsonb, %(none)s::int, %(big)s::bigint - 1, '100%%'"
    )
    arguments = {
        "big": 2**62,
        "text": 'it\'s "quoted", ünïcode, \\ and %s',
        "flag": False,
        "at": datetime(2026, 12, 5, 9, 30, 1, 123000, tzinfo=UTC),
        "items": ["x", "y,z", 'q"', ""],
        "doc": '{"k": [1, 2.5, null]}',
        "none": None,
    }
    with driver.cursor() as cursor:
        expected = cursor.execute(sql, arguments).fetchall()
    for _ in range(2):  # prepared with the first, then by its name
        wire.add(sql, arguments, fetch=True)
        wire.sync()
        assert wire.answer() == expected
    assert driver.pgconn.pipeline_status == pq.PipelineStatus.OFF


def test_a_failure_raises_the_cursors_error_and_skips_the_rest(
    connection: Any,
) -> None:
    """The first failure is raised as psycopg's error of its SQLSTATE (``error_from_result``,
    pinned here); the statements after it are skipped, their names not prepared, and the
    connection is ready for the next pipeline."""
    driver = connection
    wire = Wire(driver, {})
    after = _unique("SELECT %(n)s::int")
    wire.add(_unique("SELECT 1 / %(zero)s::int"), {"zero": 0})
    wire.add(after, {"n": 5}, fetch=True)
    wire.sync()
    with pytest.raises(psycopg.errors.DivisionByZero) as caught:
        wire.answer()
    assert caught.value.sqlstate == "22012"
    assert caught.value.diag.message_primary == "division by zero"
    assert driver.pgconn.pipeline_status == pq.PipelineStatus.OFF
    assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
    # Its prepare was skipped too: prepared now, not taken for prepared.
    assert _alone(wire, after, 5) == [(5,)]


def test_an_explicit_transaction_that_failed_is_left_to_roll_back(
    connection: Any,
) -> None:
    driver = connection
    wire = Wire(driver, {})
    wire.add(b"BEGIN")
    wire.add(_unique("SELECT 1 / %(zero)s::int"), {"zero": 0})
    wire.add(b"COMMIT")
    wire.sync()
    with pytest.raises(psycopg.errors.DivisionByZero):
        wire.answer()
    assert driver.pgconn.transaction_status == pq.TransactionStatus.INERROR
    driver.rollback()
    assert driver.execute("SELECT 1").fetchall() == [(1,)]


def test_a_connection_that_never_prepares_sends_its_statements_unnamed(
    connection: Any,
) -> None:
    """As behind a pooler (a2sql.execution.pooler unsets ``prepare_threshold`` there), or on
    an engine made with ``prepare_threshold=None``: nothing is prepared on the server."""
    driver = connection
    driver.prepare_threshold = None
    wire = Wire(driver, {})
    for n in range(3):
        assert _alone(wire, _unique("SELECT %(n)s::int"), n) == [(n,)]
    assert driver.execute("SELECT count(*) FROM pg_prepared_statements").fetchall() == [(0,)]


def test_two_syncs_answer_in_turn(connection: Any) -> None:
    """A pipeline answered up to its first Sync goes on with statements queued after it
    (the way after the lock: the statement is built once the lock is granted)."""
    driver = connection
    wire = Wire(driver, {})
    wire.add(b"BEGIN")
    wire.add(_unique("SELECT pg_advisory_xact_lock(%(key)s::bigint)"), {"key": 17})
    wire.sync()
    assert wire.answer() == []
    assert driver.pgconn.transaction_status == pq.TransactionStatus.INTRANS
    wire.add(_unique("SELECT %(n)s::int"), {"n": 3}, fetch=True)
    wire.add(b"COMMIT")
    wire.sync()
    assert wire.answer() == [(3,)]
    assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE


def test_a_best_effort_statements_failure_is_not_raised(connection: Any) -> None:
    """A statement queued ``best_effort`` after a Sync (a2sql wakes streams so, after a
    commit): its failure leaves the answer and what committed before it as they were,
    and the connection is ready for the next pipeline."""
    driver = connection
    driver.execute("CREATE TEMPORARY TABLE kept (n int)")
    wire = Wire(driver, {})
    wire.add(_unique("INSERT INTO kept VALUES (%(n)s::int) RETURNING n"), {"n": 7}, fetch=True)
    wire.sync()
    wire.add(_unique("SELECT 1 / %(zero)s::int"), {"zero": 0}, best_effort=True)
    wire.sync()
    assert wire.answer() == [(7,)]
    assert driver.pgconn.pipeline_status == pq.PipelineStatus.OFF
    assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert driver.execute("SELECT n FROM kept").fetchall() == [(7,)]
    assert _alone(wire, _unique("SELECT %(n)s::int"), 8) == [(8,)]


def test_a_best_effort_statement_whose_name_is_gone_is_prepared_anew(connection: Any) -> None:
    """Its failure is not raised, so no batch is sent again for it: the name it failed
    under is forgotten instead, and the next batch prepares it anew."""
    driver = connection
    driver.execute("CREATE TEMPORARY TABLE kept (n int)")
    wire = Wire(driver, {})
    insert = _unique("INSERT INTO kept VALUES (%(n)s::int)")

    def best_effort(n: int) -> None:
        wire.add(insert, {"n": n}, best_effort=True)
        wire.sync()
        assert wire.answer() == []

    best_effort(1)
    driver.execute("DEALLOCATE ALL")
    best_effort(2)  # fails: its name is gone
    best_effort(3)
    assert driver.execute("SELECT n FROM kept ORDER BY n").fetchall() == [(1,), (3,)]


def _deferred_unique(driver: Any) -> None:
    """A table whose unique constraint is checked at the commit: a transaction that broke
    it fails there, at the Sync that commits it when it began implicitly."""
    driver.execute("CREATE TEMPORARY TABLE once (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    driver.execute("INSERT INTO once VALUES (1)")


def test_a_best_effort_statement_whose_commit_fails_is_not_raised(connection: Any) -> None:
    """The best-effort statement runs, and its transaction fails at the Sync that commits
    it (a NOTIFY's wait for the notification queue's lock, cancelled, fails so): what
    committed before is answered, nothing raised, and the connection kept whole for the
    next pipeline. (Before, that failure was taken for the Sync's answer: the real one
    was left unread, the connection closed and the call reported failed, committed.)"""
    driver = connection
    _deferred_unique(driver)
    wire = Wire(driver, {})
    wire.add(_unique("INSERT INTO once VALUES (%(n)s::int) RETURNING n"), {"n": 2}, fetch=True)
    wire.sync()
    wire.add(_unique("INSERT INTO once VALUES (%(n)s::int)"), {"n": 1}, best_effort=True)
    wire.sync()
    assert wire.answer() == [(2,)]
    assert not driver.closed
    assert driver.pgconn.pipeline_status == pq.PipelineStatus.OFF
    assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert driver.execute("SELECT n FROM once ORDER BY n").fetchall() == [(1,), (2,)]
    assert _alone(wire, _unique("SELECT %(n)s::int"), 8) == [(8,)]
    # The next batch's commit is its own again: failing, it is raised.
    wire.add(_unique("INSERT INTO once VALUES (%(n)s::int)"), {"n": 2})
    wire.sync()
    with pytest.raises(psycopg.errors.UniqueViolation):
        wire.answer()


def test_a_transaction_whose_commit_at_the_sync_fails_raises_its_error(
    connection: Any,
) -> None:
    """Begun implicitly, a batch's transaction commits at its Sync: failing there, it
    rolled back, and its error is raised as a statement's would be; the Sync's own
    answer is still read, and the connection kept for the next pipeline."""
    driver = connection
    _deferred_unique(driver)
    wire = Wire(driver, {})
    wire.add(_unique("INSERT INTO once VALUES (%(n)s::int) RETURNING n"), {"n": 1}, fetch=True)
    wire.sync()
    with pytest.raises(psycopg.errors.UniqueViolation):
        wire.answer()
    assert not driver.closed
    assert driver.pgconn.pipeline_status == pq.PipelineStatus.OFF
    assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
    assert driver.execute("SELECT n FROM once").fetchall() == [(1,)]
    assert _alone(wire, _unique("SELECT %(n)s::int"), 8) == [(8,)]


class _Interrupted:
    def select(self, *_args: Any) -> Any:
        raise KeyboardInterrupt


def test_an_interrupted_wait_closes_the_connection(connection: Any) -> None:
    """Whether what was sent committed is then unknown: the connection is not left
    midway, to be handed out again, but closed."""
    driver = connection
    wire = Wire(driver, {})
    wire._poll = _Interrupted()  # type: ignore[assignment]
    wire.add(_unique("SELECT pg_sleep(%(s)s::float)"), {"s": 0.05})
    wire.sync()
    with pytest.raises(KeyboardInterrupt):
        wire.answer()
    assert driver.closed


def test_a_statement_that_cannot_be_queued_abandons_the_pipeline(
    connection: Any,
) -> None:
    """Queued statements cannot be taken back: inside ``with wire:`` a failure before the
    answer closes the connection rather than leave it midway."""
    driver = connection
    wire = Wire(driver, {})
    with pytest.raises(psycopg.ProgrammingError), wire:
        wire.add(_unique("SELECT %(a)s::int"), {"a": 1})
        wire.add(_unique("SELECT %(b)s::text"), {"b": object()})  # psycopg cannot adapt it
    assert driver.closed


@pytest.mark.parametrize("explicit", [False, True], ids=["implicit", "begin-commit"])
def test_a_batch_that_finds_its_names_deallocated_is_sent_again_once(
    connection: Any, explicit: bool
) -> None:
    """psycopg's rollback, or an application, deallocated every statement: the failure
    undid the whole batch, which goes again, prepared anew, and commits once."""
    driver = connection
    driver.execute("CREATE TABLE wire_rows (n int)")
    wire = Wire(driver, {})
    insert = _unique("INSERT INTO wire_rows VALUES (%(n)s::int) RETURNING n")
    for n in (1, 2):
        if n == 2:
            driver.execute("DEALLOCATE ALL")
        if explicit:
            wire.add(b"BEGIN")
        wire.add(_unique("SELECT %(n)s::int") if n == 1 else insert, {"n": n})
        wire.add(insert, {"n": n}, fetch=True)
        if explicit:
            wire.add(b"COMMIT")
        wire.sync()
        assert wire.answer() == [(n,)]
    assert driver.execute("SELECT n FROM wire_rows ORDER BY n").fetchall() == [(1,), (2,), (2,)]
    assert driver.pgconn.transaction_status == pq.TransactionStatus.IDLE


def test_in_a_transaction_begun_before_the_batch_no_name_is_trusted(connection: Any) -> None:
    """A failure there could not be undone to send the batch again: outside ``with
    wire:``, the names it uses are prepared anew."""
    driver = connection
    wire = Wire(driver, {})
    sql = _unique("SELECT %(n)s::int")
    assert _alone(wire, sql, 1) == [(1,)]
    driver.execute("DEALLOCATE ALL")
    wire.add(b"BEGIN")
    wire.sync()
    wire.answer()
    wire.add(sql, {"n": 2}, fetch=True)
    wire.add(b"COMMIT")
    wire.sync()
    assert wire.answer() == [(2,)]


def _after_the_lock(wire: Wire, lock: str, sql: str, n: int) -> list[Any]:
    """As the way after the lock, inside ``with wire:``: BEGIN and ``lock`` answered,
    then ``sql`` and COMMIT: ``sql``'s rows."""
    with wire:
        wire.add(b"BEGIN")
        wire.add(lock, {"n": n})
        wire.sync()
        wire.answer()
        wire.add(sql, {"n": n}, fetch=True)
        wire.add(b"COMMIT")
        wire.sync()
        return wire.answer()


def _prepared_by(driver: Any, run: Callable[[], object]) -> int:
    """How many statements ``run`` prepared on ``driver`` by name: the Parse messages in
    libpq's trace."""
    with tempfile.TemporaryFile("w+") as trace:
        driver.pgconn.trace(trace.fileno())
        driver.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            run()
        finally:
            driver.pgconn.untrace()
        trace.seek(0)
        return sum(1 for line in trace if re.match(r"F\t\d+\tParse\t \"[^\"]", line))


def test_inside_with_wire_a_name_prepared_since_one_that_ran_is_trusted(connection: Any) -> None:
    """The way after the lock, again: its statement is not prepared again in every
    transaction, where the session's lock is held while the server parses and plans
    it (4 processes on one session ran 20-30% slower for it). The lock's name ran
    in the batch before, prepared before the statement's: no DEALLOCATE ALL came
    between, or it would be gone."""
    driver = connection
    wire = Wire(driver, {})
    lock, sql = _unique("SELECT %(n)s::int"), _unique("SELECT %(n)s::int + 1")
    assert _after_the_lock(wire, lock, sql, 1) == [(2,)]
    rows: list[Any] = []
    assert _prepared_by(driver, lambda: rows.extend(_after_the_lock(wire, lock, sql, 2))) == 0
    assert rows == [(3,)]


def test_a_name_that_ran_proves_nothing_of_one_prepared_before_it(connection: Any) -> None:
    """DEALLOCATE ALL between two names' preparations: the later one runs, and the
    earlier one, gone, is prepared again in the transaction begun before."""
    driver = connection
    wire = Wire(driver, {})
    earlier, lock = _unique("SELECT %(n)s::int + 1"), _unique("SELECT %(n)s::int")
    assert _alone(wire, earlier, 1) == [(2,)]
    driver.execute("DEALLOCATE ALL")
    assert _alone(wire, lock, 1) == [(1,)]
    rows: list[Any] = []
    assert _prepared_by(driver, lambda: rows.extend(_after_the_lock(wire, lock, earlier, 3))) == 1
    assert rows == [(4,)]


def test_a_name_prepared_already_is_prepared_again_after_forget(connection: Any) -> None:
    """``forget`` does not know whether the names still exist: preparing one that does
    must not fail (it is closed first)."""
    driver = connection
    wire = Wire(driver, {})
    sql = _unique("SELECT %(n)s::int")
    for n in range(3):
        wire.forget()
        assert _alone(wire, sql, n) == [(n,)]


def test_psycopgs_rollback_deallocates_and_forget_recovers(connection: Any) -> None:
    """psycopg rolls back with DEALLOCATE ALL once it prepared statements of its own: what
    a2sql does after every rollback through the driver (``forget``) recovers from it."""
    driver = connection
    wire = Wire(driver, {})
    sql = _unique("SELECT %(n)s::int")
    assert _alone(wire, sql, 1) == [(1,)]
    with driver.cursor() as cursor:
        for _ in range(driver.prepare_threshold + 1):  # psycopg prepares one of its own
            cursor.execute("SELECT %s::int", (1,))
        cursor.execute("BEGIN")
        driver.rollback()
    assert driver.execute("SELECT count(*) FROM pg_prepared_statements").fetchall() == [(0,)]
    wire.forget()
    assert _alone(wire, sql, 2) == [(2,)]


def test_without_poll_the_wait_uses_select(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the platform has no ``poll`` (Windows), the pipelines wait with ``select``: a
    store's hot writes work the same. (Before, ``select.poll`` was called at the first
    hot write, an ``AttributeError`` there.)"""
    import selectors

    from a2sql.execution import wire

    monkeypatch.setattr(wire, "_Selector", selectors.SelectSelector)
    with a2sql.create_store(postgres_url, migrate=True) as store:
        for n in range(3):
            store.append("s", [NewEvent("t", n)])
            [event] = store.claim_available("s", holder="w", ttl_ms=60_000).events
            done = store.complete_attempt(
                "s", index=event.index, attempt=event.attempt_count, events=[]
            )
            assert done.outcome == "completed"
        assert [e.payload for e in store.read("s")] == [0, 1, 2]
