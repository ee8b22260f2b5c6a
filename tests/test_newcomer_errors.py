"""A newcomer's first mistakes, each answered by one clear error.

A driver a2sql does not run on, psycopg missing, a SQLite path that cannot
be written, a store used after ``close()``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://u@localhost/db",
        "postgresql+asyncpg://u@localhost/db",
        "postgresql+pg8000://u@localhost/db",
        "sqlite+pysqlcipher:///x.db",
    ],
)
def test_a_driver_a2sql_does_not_run_on_is_named(url: str) -> None:
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(url)
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    message = raised.value.message
    assert url.split(":")[0] in message
    if url.startswith("postgresql"):
        assert "postgresql+psycopg" in message
        assert "pip install 'a2sql[postgres]'" in message


MALFORMED_URLS = [
    "postgresql://u@h:abc/db",  # a port that is not a number
    "postgresql://u:secret@h:1e3/db",
    "postgresql://u:secret@[::1/db",  # an IPv6 host without its closing bracket
    "postgres://u:secret@[::1/db",
    "postgresql://u:secret@h:99999/db",  # past the last port
    "postgresql://u@h:0/db",
]


@pytest.mark.parametrize("url", MALFORMED_URLS)
@pytest.mark.parametrize("facade", ["sync", "async"])
def test_a_malformed_url_is_invalid_argument_naming_it_without_its_password(
    url: str, facade: str
) -> None:
    opener = a2sql.create_store if facade == "sync" else a2sql.create_async_store
    with pytest.raises(A2Error) as raised:
        opener(url)
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT, raised.value
    message = raised.value.message
    assert message.startswith("url: "), message
    assert "secret" not in message
    assert url.replace(":secret@", ":***@").split("://")[1] in message, message


def test_an_asyncio_sqlite_url_opens_a_sync_store_too(tmp_path: Path) -> None:
    """sqlite+aiosqlite:// names a file: Store opens it with sqlite3, AsyncStore with aiosqlite."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'a2.db'}"
    with a2sql.create_store(url) as store:
        store.append("s", [NewEvent("t", 1, id="e1")])

    async def read_async() -> list[str]:
        async with a2sql.create_async_store(url) as async_store:
            return [event.id for event in await async_store.read("s")]

    assert asyncio.run(read_async()) == ["e1"]


def test_psycopg_missing_says_what_to_install(tmp_path: Path) -> None:
    """In a process where psycopg cannot be imported (as without the postgres extra)."""
    script = (
        "import sys\n"
        "sys.modules['psycopg'] = None\n"  # what an uninstalled module looks like to import
        "import a2sql\n"
        "try:\n"
        "    a2sql.create_store('postgresql://u@127.0.0.1:1/db')\n"
        "except a2sql.A2Error as error:\n"
        "    print(error.code, error.message)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.startswith("INVALID_ARGUMENT"), out
    assert "pip install 'a2sql[postgres]'" in out
    assert "not installed" in out


@pytest.mark.parametrize("facade", ["sync", "async"])
def test_a_sqlite_path_that_cannot_be_created(tmp_path: Path, facade: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    url = f"sqlite:///{blocker / 'sub' / 'a2.db'}"
    with pytest.raises(A2Error) as raised:
        if facade == "sync":
            a2sql.create_store(url)
        else:
            a2sql.create_async_store(url)
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert str(blocker / "sub") in raised.value.message


def test_a_sqlite_file_that_cannot_be_opened(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(f"sqlite:///{folder}")  # a folder, not a database file
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert str(folder) in raised.value.message
    assert "cannot open" in raised.value.message


def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = a2sql.create_store(f"sqlite:///{tmp_path / 'a2.db'}")
    store.append("s", [NewEvent("t", 1, id="e1")])
    store.close()
    for call in (
        lambda: store.read("s"),
        lambda: store.append("s", [NewEvent("t", 2)]),
        lambda: store.inspect.list_sessions(),
        lambda: store.begin().__enter__(),
    ):
        with pytest.raises(A2Error) as raised:
            call()
        assert raised.value.code == ErrorCode.STORE_CLOSED
        assert "closed" in raised.value.message
