"""The SQL a2sql sends on its direct path (a2sql.execution.raw), recorded without an event
listener, which would take a2sql off that path: what an engine's psycopg cursors
execute, and the statements a2sql.execution.wire writes in pipelines."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, create_engine


def recording_engine(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Engine, list[tuple[str, bool]]]:
    """An engine on ``url`` and the record of what is sent: (SQL, whether it went in a
    pipeline). Pipelines are recorded whichever engine sends them."""
    psycopg = pytest.importorskip("psycopg")
    from a2sql.execution.wire import Wire

    sent: list[tuple[str, bool]] = []

    class Recording(psycopg.Cursor):  # type: ignore[misc]
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            sent.append((query.decode() if isinstance(query, bytes) else str(query), False))
            return super().execute(query, params, **kw)

        def executemany(self, query: Any, params_seq: Any, **kw: Any) -> Any:
            sent.append((str(query), False))
            return super().executemany(query, params_seq, **kw)

    add = Wire.add

    def recorded_add(wire: Wire, sql: str | bytes, *args: Any, **kw: Any) -> None:
        sent.append((sql.decode() if isinstance(sql, bytes) else sql, True))
        add(wire, sql, *args, **kw)

    monkeypatch.setattr(Wire, "add", recorded_add)
    return create_engine(url, connect_args={"cursor_factory": Recording}), sent
