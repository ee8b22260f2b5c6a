"""Statements and round trips a2sql sends to PostgreSQL on its direct path.

A listener on an engine would send a2sql's transactions down the path that
runs each statement through ``Connection.execute``, one round trip each
(a2sql.direct.observed). So the counting store's engine gets a psycopg
cursor class instead, which sees what the timed store's path sends, and
each of its connections is traced by libpq (``PQtrace``):

- statements: a cursor's ``execute`` (an ``executemany`` counts one); the
  first of a transaction outside a pipeline also brings psycopg's ``BEGIN``
  and the ``COMMIT`` or ``ROLLBACK`` that ends it: two more;
- round trips: the ``Sync`` and ``Query`` messages the client sent, each of
  which it waits on (a pipeline's statements share one ``Sync``).
"""

from __future__ import annotations

import tempfile
from typing import IO, Any

import psycopg
from psycopg import pq
from sqlalchemy import Engine, create_engine, event


class Counter:
    """What one engine's connections sent."""

    def __init__(self) -> None:
        self.statements = 0
        self._traces: list[IO[str]] = []

    def _sent(self, *messages: str) -> int:
        """How many of the client's messages so far were one of ``messages``."""
        sent = 0
        for trace in self._traces:
            trace.seek(0)
            for line in trace:
                fields = line.split("\t")
                if fields[0] == "F" and len(fields) > 2 and fields[2].strip() in messages:
                    sent += 1
            trace.seek(0, 2)
        return sent

    @property
    def round_trips(self) -> int:
        return self._sent("Sync", "Query")

    @property
    def traced_statements(self) -> int:
        """Statements as the trace shows them: each ``Bind`` (an execution of a parsed
        statement) and each ``Query`` (simple protocol, psycopg's own BEGIN and COMMIT
        among them)."""
        return self._sent("Bind", "Query")

    def trace(self, engine: Engine) -> None:
        """Trace every connection ``engine`` opens from now on (sync or asyncio)."""

        # A pool event: it leaves the engine unobserved (a2sql.direct.observed).
        @event.listens_for(engine, "connect")
        def trace(driver: Any, _record: Any) -> None:
            file = tempfile.TemporaryFile("w+")  # noqa: SIM115 (open while the engine is; close())
            self._traces.append(file)
            pgconn = getattr(driver, "driver_connection", driver).pgconn
            pgconn.trace(file.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def engine(self, url: str) -> Engine:
        """An engine on ``url`` whose connections count into this counter."""
        counter = self

        class Counting(psycopg.Cursor[Any]):
            def _count(self) -> None:
                connection = self.connection
                counter.statements += 1
                outside = connection.pgconn.pipeline_status == pq.PipelineStatus.OFF
                idle = connection.info.transaction_status == pq.TransactionStatus.IDLE
                if outside and idle and not connection.autocommit:
                    counter.statements += 2

            def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
                self._count()
                return super().execute(query, params, **kw)

            def executemany(self, query: Any, params_seq: Any, **kw: Any) -> None:
                self._count()
                super().executemany(query, params_seq, **kw)

        engine = create_engine(url, connect_args={"cursor_factory": Counting})
        self.trace(engine)
        return engine

    def close(self) -> None:
        for trace in self._traces:
            trace.close()
