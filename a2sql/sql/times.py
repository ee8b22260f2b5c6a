"""The times a write records, computed in its statement: never earlier than what already
happened in the session (docs/contract.md, "Times").

A write's ``now`` is the store's clock, read by the client, which may be a
host whose clock lags another's. In the statement, under the session's lock,
the time it records is the latest of that reading and the times it follows:
the creation of the session's last event (``SESSION_NOW``), and, for a write to
one event, the times already on it (``Latest``). Expiries are that time plus
the lease (``After``). Each is spelled by the backend (``latest_timestamp``,
``plus_millis``): PostgreSQL's ``greatest`` and interval arithmetic, SQLite's
scalar ``max`` and integer milliseconds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal

from a2sql.backends.column_types import Timestamp
from a2sql.backends.registry import backend_of

# The clock's reading, as the client took it.
NOW = bindparam("now", type_=Timestamp())


class Latest(ColumnElement[datetime]):
    """The latest of ``times`` that are set; the first is never NULL."""

    inherit_cache = True
    type = Timestamp()
    _traverse_internals = [  # noqa: RUF012 (read by SQLAlchemy, never changed)
        ("times", InternalTraversal.dp_clauseelement_list),
    ]

    def __init__(self, *times: ColumnElement[Any]) -> None:
        self.times = times


@compiles(Latest)
def _latest(element: Latest, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(backend_of(compiler.dialect).latest_timestamp(*element.times), **kw)


class After(ColumnElement[datetime]):
    """``time`` plus ``millis`` milliseconds (an integer expression)."""

    inherit_cache = True
    type = Timestamp()
    _traverse_internals = [  # noqa: RUF012 (read by SQLAlchemy, never changed)
        ("time", InternalTraversal.dp_clauseelement),
        ("millis", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, time: ColumnElement[Any], millis: ColumnElement[Any]) -> None:
        self.time = time
        self.millis = millis


@compiles(After)
def _after(element: After, compiler: SQLCompiler, **kw: Any) -> str:
    backend = backend_of(compiler.dialect)
    return compiler.process(backend.plus_millis(element.time, element.millis), **kw)
