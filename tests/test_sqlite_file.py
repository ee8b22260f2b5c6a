"""The SQLite file under a store: made only when asked for, never silently replaced.

A store keeps pooled connections open on the file it opened. Deleted (or
replaced by another file) while the store runs, that file must not go on
taking writes that vanish with it, and no new empty database may appear at
its path: every later call fails with ``STORE_UNAVAILABLE``. Both facades.
"""

from __future__ import annotations

import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, Store
from a2sql.testing.facades import BlockingAsyncStore


@pytest.fixture(params=["sync", "async"])
def open_file_store(request: pytest.FixtureRequest) -> Iterator[type]:
    yield a2sql.create_store if request.param == "sync" else BlockingAsyncStore  # type: ignore[misc]


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _unavailable(call: object) -> A2Error:
    with pytest.raises(A2Error) as raised:
        call()  # type: ignore[operator]
    assert raised.value.code is ErrorCode.STORE_UNAVAILABLE
    return raised.value


def test_a_deleted_database_file_fails_every_call_and_is_not_recreated(
    tmp_path: Path, open_file_store: type
) -> None:
    path = tmp_path / "a2.db"
    store: Store = open_file_store(f"sqlite:///{path}")
    try:
        store.append("s", [NewEvent(type="t", payload=1, id="before")])
        store.read("s")  # the pool holds open connections on the file now
        _remove_database(path)
        for n in range(8):
            error = _unavailable(
                lambda n=n: store.append("s", [NewEvent(type="t", payload=n, id=f"after{n}")])
            )
            assert "deleted or replaced" in str(error)
        _unavailable(lambda: store.read("s"))
        _unavailable(lambda: store.inspect.list_sessions())
        assert not path.exists()
    finally:
        store.close()
    assert not path.exists()


def test_a_database_file_replaced_under_the_store_fails_every_call(
    tmp_path: Path, open_file_store: type
) -> None:
    path = tmp_path / "a2.db"
    other = tmp_path / "other.db"
    with a2sql.create_store(f"sqlite:///{other}") as elsewhere:
        elsewhere.append("x", [NewEvent(type="t", payload=1)])
    store: Store = open_file_store(f"sqlite:///{path}")
    try:
        store.append("s", [NewEvent(type="t", payload=1)])
        _remove_database(path)
        shutil.copy(other, path)
        _unavailable(lambda: store.append("s", [NewEvent(type="t", payload=2)]))
        _unavailable(lambda: store.read("x"))
    finally:
        store.close()


def test_a_missing_file_is_created_only_when_the_store_may_migrate(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "a2.db"
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(f"sqlite:///{path}", migrate=False)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert "there is no SQLite database" in str(raised.value)
    assert not path.exists() and not path.parent.exists()
    with a2sql.create_store(f"sqlite:///{path}") as store:
        store.append("s", [NewEvent(type="t", payload=1)])
    # Made by a2sql: its user's alone.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    with a2sql.create_store(f"sqlite:///{path}", migrate=False) as store:
        assert len(store.read("s")) == 1


def test_the_default_database_and_its_folder_are_the_users_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A2SQL_DATABASE_URL", raising=False)
    with a2sql.create_store() as store:
        store.append("s", [NewEvent(type="t", payload=1)])
    assert stat.S_IMODE((tmp_path / ".a2").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / ".a2" / "dev.db").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "where",
    [
        "with\x00nul.db",
        "a-file/a2.db",  # a folder that is a file
        "a-folder",  # a database that is a folder
    ],
)
def test_unusable_paths_are_invalid_arguments(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "a-folder").mkdir()
    for opener in (a2sql.create_store, a2sql.create_async_store):
        with pytest.raises(A2Error) as raised:
            opener(f"sqlite:///{tmp_path / where}")
        assert raised.value.code is ErrorCode.INVALID_ARGUMENT, raised.value
        assert "url" in str(raised.value)
