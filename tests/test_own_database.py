"""The database of a test process's own under pytest-xdist (a2sql.testing.plugin.own_database):
made afresh once a run, kept when another client is connected to it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import URL, create_engine, text
from sqlalchemy.pool import NullPool

from a2sql.testing import plugin
from tests.plugin import unavailable


@pytest.fixture
def server(postgres_given: URL | str) -> URL:
    if isinstance(postgres_given, str):
        unavailable(postgres_given)
        raise AssertionError("unreachable")
    return postgres_given


@pytest.fixture
def worker(server: URL, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A test process name of this test's own, and its database dropped afterwards."""
    name = f"own{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
    monkeypatch.setattr(plugin, "_MADE_AFRESH", set())
    yield name
    engine = create_engine(server, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'drop database if exists "{server.database}_{name}"'))
    engine.dispose()


def _marked(url: URL) -> bool:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return bool(connection.execute(text("select to_regclass('left_behind')")).scalar())
    finally:
        engine.dispose()


def _mark(url: URL) -> None:
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as connection:
        connection.execute(text("create table left_behind (x int)"))
    engine.dispose()


def test_a_database_an_earlier_run_left_is_made_afresh(
    server: URL, worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = plugin.own_database(server)
    assert own.database == f"{server.database}_{worker}"
    _mark(own)
    # Again in the same run: the same database, as it is.
    assert plugin.own_database(server) == own
    assert _marked(own)
    # The next run (a new process): a fresh database.
    monkeypatch.setattr(plugin, "_MADE_AFRESH", set())
    assert plugin.own_database(server) == own
    assert not _marked(own)


def test_a_database_another_client_uses_is_kept(
    server: URL, worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = plugin.own_database(server)
    _mark(own)
    monkeypatch.setattr(plugin, "_MADE_AFRESH", set())
    engine = create_engine(own, poolclass=NullPool)
    try:
        with engine.connect():
            assert plugin.own_database(server) == own
    finally:
        engine.dispose()
    assert _marked(own)
