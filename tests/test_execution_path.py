"""Which way a store's calls go (``execution_path``), said at open and asked at any time."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine

import a2sql
from a2sql import NewEvent


def test_a_store_runs_on_the_driver_until_something_observes_its_engine(tmp_path: Path) -> None:
    """A listener attached after the store opened takes the next call through the
    ``Connection``, where it sees the statements."""
    seen: list[str] = []

    def listener(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    with a2sql.create_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        assert store.execution_path == "driver"
        store.append("s", [NewEvent("t")])
        assert seen == []
        event.listen(store.engine, "before_cursor_execute", listener)
        assert store.execution_path == "connection"
        store.append("s", [NewEvent("t")])
        assert seen


def test_a_store_on_postgresql_runs_on_the_driver(postgres_url: str) -> None:
    with a2sql.create_store(postgres_url, migrate=True) as store:
        assert store.execution_path == "driver"


def test_an_async_store_says_which_way_its_calls_go(tmp_path: Path, postgres_url: str) -> None:
    async def paths() -> list[str]:
        found = []
        for url in (f"sqlite:///{tmp_path / 'a.db'}", "sqlite://", postgres_url):
            async with a2sql.create_async_store(url, migrate=True) as store:
                await store.append("s", [NewEvent("t")])
                found.append(store.execution_path)
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
        async with a2sql.create_async_store(engine, migrate=True) as store:
            found.append(store.execution_path)
        await engine.dispose()
        return found

    assert asyncio.run(paths()) == ["thread", "asyncio", "loop", "asyncio"]


def test_the_path_is_said_at_debug_when_a_store_opens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="a2sql"):
        a2sql.create_store(f"sqlite:///{tmp_path / 'a.db'}").close()
    assert any("execution path 'driver'" in record.getMessage() for record in caplog.records)
