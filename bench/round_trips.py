"""Statements and round trips a2sql sends to PostgreSQL on its direct path.

A SQLAlchemy event listener on an engine would send a2sql's transactions down
the path that runs each statement through ``Connection.execute``, one round
trip each (a2sql.execution.raw.observed). So each connection of the counting store's
engine is traced by libpq (``PQtrace``, from a pool event, which leaves the
engine unobserved), and the trace is counted:

- statements: each ``Bind`` (an execution of a parsed statement; an
  ``executemany`` counts one per row) and each ``Query`` (the simple protocol,
  psycopg's own ``BEGIN`` and ``COMMIT`` among them);
- round trips: the times the client, having sent, read an answer (a
  pipeline written at once is one, however many transactions its ``Sync``
  messages end).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO, Any

from psycopg import pq
from sqlalchemy import Engine, create_engine, event


def _message(line: str) -> tuple[str, str]:
    """A trace line's direction, ``F`` (the client's message) or ``B`` (the server's),
    and the message's name, with timestamps or without (``("", "")`` for neither)."""
    fields = line.split("\t", 4)
    if fields[0] not in ("F", "B"):
        fields = fields[1:]
    if not fields or fields[0] not in ("F", "B"):
        return "", ""
    return fields[0], fields[2].strip() if len(fields) > 2 else ""


def round_trips(trace: str) -> int:
    """In libpq's trace of a connection: how many times the client read an answer after
    sending (each run of the client's messages followed by the server's)."""
    trips, sending = 0, False
    for line in trace.splitlines():
        direction, _ = _message(line)
        if direction == "F":
            sending = True
        elif direction == "B" and sending:
            trips += 1
            sending = False
    return trips


class Counter:
    """What one engine's connections sent."""

    def __init__(self) -> None:
        self._traces: list[IO[str]] = []

    def _texts(self) -> Iterator[str]:
        """Each connection's trace so far (libpq goes on appending at the end)."""
        for trace in self._traces:
            trace.seek(0)
            text = trace.read()
            trace.seek(0, 2)
            yield text

    @property
    def round_trips(self) -> int:
        return sum(round_trips(text) for text in self._texts())

    @property
    def statements(self) -> int:
        """The client's ``Bind`` and ``Query`` messages so far."""
        return sum(
            1
            for text in self._texts()
            for line in text.splitlines()
            if _message(line) in (("F", "Bind"), ("F", "Query"))
        )

    def trace(self, engine: Engine) -> None:
        """Trace every connection ``engine`` opens from now on (sync or asyncio)."""

        @event.listens_for(engine, "connect")
        def trace(driver: Any, _record: Any) -> None:
            file = tempfile.TemporaryFile("w+")  # noqa: SIM115 (open while the engine is; close())
            self._traces.append(file)
            pgconn = getattr(driver, "driver_connection", driver).pgconn
            pgconn.trace(file.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def engine(self, url: str) -> Engine:
        """An engine on ``url`` whose connections count into this counter."""
        engine = create_engine(url)
        self.trace(engine)
        return engine

    def close(self) -> None:
        for trace in self._traces:
            trace.close()
