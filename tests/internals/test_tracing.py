"""a2sql's statements on SQLAlchemy's public execution path, seen as any application's.

OpenTelemetry's SQLAlchemy instrumentation, ``echo``, statement listeners
that keep state on the execution context or rewrite the statement,
``handle_error``: each sees every statement a2sql runs, whether it was
attached before or after ``create_store``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine, create_engine, event, text

import a2sql
from a2sql import A2Error, ClaimRef, Completion, ErrorCode, NewEvent, Store
from a2sql.execution.raw import observed

AT = datetime(2026, 1, 1, tzinfo=UTC)


def every_operation(store: Store) -> None:
    """Each store method once, ending in a state every later test can read."""
    store.append("s", [NewEvent("t", {"n": 1}, id="e1"), NewEvent("t", {"n": 2}, id="e2")])
    store.read("s")
    claimed = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.renew_claims(
        "s", holder="w", claims=[ClaimRef(e.index, e.attempt_count) for e in claimed], ttl_ms=1
    )
    first, second = claimed
    store.complete_attempt(
        "s",
        index=first.index,
        attempt=first.attempt_count,
        events=[NewEvent("r", 1, id="r1", settled=True)],
    )
    store.fail_attempt(
        "s", index=second.index, attempt=second.attempt_count, error="x", max_failures=3
    )
    [again] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    store.complete_attempts("s", [Completion(again.index, again.attempt_count, [])])
    store.put_snapshot("s", "r", 2, {"total": 2})
    store.read_state("s", "r")
    store.presence.set("ns", "p", {"f": 1}, at=AT, seen=1, ttl_ms=60_000)
    store.presence.read("ns")
    store.inspect.list_sessions()
    store.inspect.read_events("s")
    store.inspect.list_snapshots("s")
    with store.begin() as connection:
        store.using(connection).append("s", [NewEvent("t", 3, id="e3")])


class StatementLog:
    """Every statement the engine's cursors execute, through ``after_cursor_execute``."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[str] = []
        self._engine = engine
        event.listen(engine, "after_cursor_execute", self._after)

    def _after(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        self.statements.append(statement)

    def close(self) -> None:
        event.remove(self._engine, "after_cursor_execute", self._after)


def statement_spans(exporter: InMemorySpanExporter) -> list[str]:
    """The statements of the finished spans, in order."""
    return [
        str(span.attributes["db.statement"])
        for span in exporter.get_finished_spans()
        if span.attributes and "db.statement" in span.attributes
    ]


@pytest.fixture
def spans() -> Iterator[Callable[[Engine], InMemorySpanExporter]]:
    instrumentor = SQLAlchemyInstrumentor()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def instrument(engine: Engine) -> InMemorySpanExporter:
        # The instrumentation's release declares SQLAlchemy < 2.1; it runs on 2.1.
        instrumentor.instrument(engine=engine, tracer_provider=provider, skip_dep_check=True)
        return exporter

    yield instrument
    instrumentor.uninstrument()


def test_opentelemetry_traces_every_statement(
    url: str, spans: Callable[[Engine], InMemorySpanExporter]
) -> None:
    """Instrumented after create_store: every method works, one span per statement."""
    with a2sql.create_store(url, migrate=True) as store:
        exporter = spans(store.engine)
        log = StatementLog(store.engine)
        every_operation(store)
        log.close()
        assert len(log.statements) > 20
        # (The instrumentation also makes a span for each new connection, without a statement.)
        statements = statement_spans(exporter)
        assert statements == log.statements


def test_opentelemetry_traces_the_async_store(
    url: str, spans: Callable[[Engine], InMemorySpanExporter]
) -> None:
    async def main() -> tuple[int, int]:
        async with a2sql.create_async_store(url, migrate=True) as store:
            exporter = spans(store.engine.sync_engine)
            log = StatementLog(store.engine.sync_engine)
            await store.append("s", [NewEvent("t", 1, id="e1")])
            [claimed] = (await store.claim_available("s", holder="w", ttl_ms=60_000)).events
            await store.complete_attempt(
                "s", index=claimed.index, attempt=claimed.attempt_count, events=[]
            )
            assert [e.type for e in await store.read("s")] == ["t"]
            log.close()
            return len(statement_spans(exporter)), len(log.statements)

    span_count, statement_count = asyncio.run(main())
    assert statement_count >= 4
    assert span_count == statement_count


def test_echo_logs_every_statement(url: str, caplog: pytest.LogCaptureFixture) -> None:
    engine = create_engine(url, echo=True)
    try:
        with a2sql.create_store(engine, migrate=True) as store:
            log = StatementLog(engine)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="sqlalchemy.engine.Engine"):
                every_operation(store)
            log.close()
        logged = [record.getMessage() for record in caplog.records]
        for statement in log.statements:
            assert statement in logged, statement
    finally:
        engine.dispose()


def test_a_listener_attached_before_create_store_sees_every_statement(url: str) -> None:
    engine = create_engine(url)
    try:
        log = StatementLog(engine)
        with a2sql.create_store(engine, migrate=True) as store:
            every_operation(store)
            assert [e.index for e in store.read("s")] == [1, 2, 3, 4]
        log.close()
        assert any("a2_events" in statement for statement in log.statements)
    finally:
        engine.dispose()


def test_a_listener_that_keeps_state_on_the_execution_context(url: str) -> None:
    """As OpenTelemetry does (``context._otel_span``): no raw StatementError, ever."""
    with a2sql.create_store(url, migrate=True) as store:
        seen: list[object] = []

        def before(
            _conn: Any, _cursor: Any, _statement: str, _params: Any, context: Any, _many: bool
        ) -> None:
            context._traced_by_test = object()

        def after(
            _conn: Any, _cursor: Any, _statement: str, _params: Any, context: Any, _many: bool
        ) -> None:
            seen.append(context._traced_by_test)

        event.listen(store.engine, "before_cursor_execute", before)
        event.listen(store.engine, "after_cursor_execute", after)
        every_operation(store)
        assert len(seen) > 20


def test_a_statement_rewrite_runs(tmp_path: Path) -> None:
    """A ``before_cursor_execute`` listener with ``retval=True`` rewrites a2sql's SQL, and the
    database runs the rewrite (SQLite's trace callback shows what it was given)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'a2.db'}")
    executed: list[str] = []

    @event.listens_for(engine, "connect")
    def trace(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.set_trace_callback(executed.append)

    try:
        with a2sql.create_store(engine) as store:

            @event.listens_for(engine, "before_cursor_execute", retval=True)
            def tag(
                _conn: Any, _cursor: Any, statement: str, params: Any, _ctx: Any, _many: bool
            ) -> tuple[str, Any]:
                return statement + " /* tagged by the app */", params

            executed.clear()
            store.append("s", [NewEvent("t", 1, id="e1")])
            assert [e.id for e in store.read("s")] == ["e1"]
        tagged = [sql for sql in executed if "a2_events" in sql]
        assert tagged and all(sql.endswith("/* tagged by the app */") for sql in tagged)
    finally:
        engine.dispose()


def test_handle_error_sees_a2sqls_failures(url: str) -> None:
    with a2sql.create_store(url, migrate=True) as store:
        failures: list[str] = []

        @event.listens_for(store.engine, "handle_error")
        def seen(context: Any) -> None:
            failures.append(str(context.statement))

        with store.engine.begin() as connection:
            connection.execute(text("drop table a2_snapshots"))
        with pytest.raises(A2Error) as raised:
            store.read_state("s", "r")
        assert raised.value.code == ErrorCode.STORE_UNAVAILABLE
        assert any("a2_snapshots" in statement for statement in failures)


def test_what_makes_an_engine_observed(tmp_path: Path) -> None:
    """Store's SQLite transactions run on the driver's cursor only while nothing could
    tell: any connection or dialect listener, SQL logging, or engine execution options
    send them through ``Connection.execute`` (``a2sql.execution.raw.observed``)."""

    def fresh() -> Engine:
        return create_engine(f"sqlite:///{tmp_path / 'a2.db'}")

    engine = fresh()
    assert not observed(engine)
    event.listen(engine, "connect", lambda *_: None)  # a pool event sees no statement
    assert not observed(engine)
    event.listen(engine, "handle_error", lambda *_: None)
    assert observed(engine)

    engine = fresh()
    event.listen(engine, "do_execute", lambda *_: None)  # a dialect event
    assert observed(engine)

    engine = fresh()
    engine.echo = True
    assert observed(engine)

    engine = fresh()
    logger = logging.getLogger("sqlalchemy.engine")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        assert observed(engine)
    finally:
        logger.setLevel(level)
    assert not observed(engine)
    assert observed(engine.execution_options(schema_translate_map={None: "main"}))


@pytest.mark.parametrize("how", ["echo", "logger"])
def test_logging_turned_on_later_logs_the_next_call(
    url: str, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """SQL logging switched on while the store keeps connections idle: the very next
    call's statements are logged, as with any SQLAlchemy engine."""
    with a2sql.create_store(url, migrate=True) as store:
        store.append("s", [NewEvent("t", 1, id="e1")])  # the store now keeps a connection
        logger = logging.getLogger("sqlalchemy.engine")
        level = logger.level
        caplog.clear()
        try:
            with caplog.at_level(logging.INFO, logger="sqlalchemy.engine.Engine"):
                if how == "echo":
                    store.engine.echo = True
                else:
                    logger.setLevel(logging.INFO)
                store.append("s", [NewEvent("t", 2, id="e2")])
        finally:
            store.engine.echo = False
            logger.setLevel(level)
        logged = " ".join(record.getMessage() for record in caplog.records)
        assert "INSERT INTO a2_events" in logged
