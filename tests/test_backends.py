"""The backend seam: every engine a2sql runs on has a backend, and an engine without one
is refused up front, by name, on every way in; nothing outside ``a2sql/backends``
asks which engine it runs on."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError

import a2sql
from a2sql import A2Error, ErrorCode
from a2sql.backends import backend_of, supported
from a2sql.backends.base import Backend

PACKAGE = Path(a2sql.__file__).parent
# MariaDB runs on the development machines; a2sql has no backend for it.
UNSUPPORTED_URLS = ["mysql+pymysql://root@127.0.0.1:3306/test", "mariadb://root@127.0.0.1/test"]


def _refusal(raised: pytest.ExceptionInfo[A2Error], argument: str) -> None:
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert raised.value.message.startswith(f"{argument}: a2sql supports sqlite and postgresql,")


@pytest.mark.parametrize("url", UNSUPPORTED_URLS)
def test_an_engine_without_a_backend_is_refused_by_url(url: str) -> None:
    """create_store and create_async_store refuse the URL, naming the engines supported."""
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url)
    _refusal(raised, "url")
    with pytest.raises(A2Error) as raised:
        a2sql.create_async_store(url)
    _refusal(raised, "url")


def test_an_engine_without_a_backend_is_refused_as_an_engine() -> None:
    """An application's own engine of an unsupported database is refused before any
    connection is made (this one's server need not even be there)."""
    engine = create_engine("mysql+pymysql://nobody@127.0.0.1:1/none")
    try:
        with pytest.raises(A2Error) as raised:
            a2sql.create_store(engine)
        _refusal(raised, "url")
        assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()


def test_a_connection_of_an_engine_without_a_backend_is_refused_by_using(
    tmp_path: Path,
) -> None:
    """``using()`` with a transaction on the machine's MariaDB: refused, naming the
    engines a2sql runs on, and nothing sent on the caller's connection."""
    store = a2sql.create_store(f"sqlite:///{tmp_path / 'a.db'}")
    mariadb = create_engine(UNSUPPORTED_URLS[0])
    try:
        try:
            connection = mariadb.connect()
        except OperationalError:
            pytest.skip("no MariaDB at 127.0.0.1:3306")
        with connection, connection.begin():
            with pytest.raises(A2Error) as raised:
                store.using(connection).append("s", [a2sql.NewEvent("t", 1)])
            _refusal(raised, "connection")
            assert connection.exec_driver_sql("select 1").scalar() == 1  # still usable
    finally:
        mariadb.dispose()
        store.close()


def test_backends_by_name_and_by_engine(tmp_path: Path, postgres_url: str) -> None:
    """A store's backend is its engine's; each says what its engine can do."""
    with a2sql.create_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        sqlite = backend_of(store.engine)
    with a2sql.create_store(postgres_url, migrate=True) as store:
        postgres = backend_of(store.engine)
    assert (sqlite.name, postgres.name) == ("sqlite", "postgresql")
    assert isinstance(sqlite, Backend) and isinstance(postgres, Backend)
    assert sqlite.capabilities.one_writer and not postgres.capabilities.one_writer
    assert postgres.capabilities.listen_notify and not sqlite.capabilities.listen_notify
    assert postgres.capabilities.one_statement_writes
    assert supported() == "sqlite and postgresql"


def test_a_listen_url_of_an_engine_without_notifications_is_refused(tmp_path: Path) -> None:
    """``listen=`` names a database to LISTEN on: an engine without LISTEN/NOTIFY (SQLite)
    has none, on both facades."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    listen = "postgresql://nobody@127.0.0.1/none"
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url, listen=listen)
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert raised.value.message.startswith("listen:")
    error = asyncio.run(_async_refusal_listen(url, listen))
    assert error.code == ErrorCode.INVALID_ARGUMENT and error.message.startswith("listen:")


async def _async_refusal_listen(url: str, listen: str) -> A2Error:
    try:
        a2sql.create_async_store(url, listen=listen)
    except A2Error as error:
        return error
    raise AssertionError("opened")


# An engine's or a dialect's name compared with a literal, or SQLAlchemy's name of a
# URL's engine read: the questions only a backend may ask.
_ENGINE_QUESTION = re.compile(
    r"""(dialect\.name|get_backend_name\(\)|drivername)\s*(==|!=|\bin\b)"""
    r"""|(==|!=)\s*["'](sqlite|postgresql)["']"""
)


def test_nothing_outside_the_backends_asks_which_engine_it_runs_on() -> None:
    """The seam holds: outside ``a2sql/backends`` no module compares an engine's name."""
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "backends" not in path.relative_to(PACKAGE).parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _ENGINE_QUESTION.search(line)
    ]
    assert found == []
