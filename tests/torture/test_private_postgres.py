"""The private PostgreSQL server the restart test starts: its own, restartable, removed after.

The tests' server may serve other programs; a test that restarts a server must
restart one it started itself, and leave nothing of it behind, even when it fails.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import URL, make_url

from bench.torture.private_postgres import PrivatePostgres, private_postgres, unavailable_reason
from tests.conftest import _unavailable
from tests.torture.conftest import postmaster_start_time

pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True)
def _needs_binaries() -> None:
    reason = unavailable_reason()
    if reason is not None:
        _unavailable(reason)


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone(server: PrivatePostgres, pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid) and not server.folder.exists()


def test_a_private_server_is_its_own_restarts_and_leaves_nothing_behind(
    postgres_server: URL | str,
) -> None:
    """It listens on a port of its own, restarts (a new start time; the tests' server keeps
    its own), and once the block ends its postmaster is gone and its folder deleted."""
    shared = postgres_server if isinstance(postgres_server, URL) else None
    shared_started = postmaster_start_time(shared) if shared else None
    with private_postgres() as server:
        if shared is not None:
            assert make_url(server.url).port != (shared.port or 5432)
        pid = server.postmaster_pid()
        assert pid is not None and _running(pid)
        before = postmaster_start_time(server.url)
        assert server.restart() > 0
        assert postmaster_start_time(server.url) > before
        pid = server.postmaster_pid()
        assert pid is not None
    assert _gone(server, pid)
    if shared is not None:
        assert postmaster_start_time(shared) == shared_started


def test_a_private_server_is_removed_when_the_block_fails() -> None:
    """A test that fails inside the block still stops the server and deletes its folder."""
    with pytest.raises(RuntimeError, match="the test failed"), private_postgres() as server:
        pid = server.postmaster_pid()
        assert pid is not None
        raise RuntimeError("the test failed")
    assert pid is not None and _gone(server, pid)
