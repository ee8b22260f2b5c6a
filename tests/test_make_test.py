"""``make test`` stops what it starts: the PgBouncer the tests go through is stopped when
pytest exits, whatever its exit code; a PgBouncer it was given, or found running, is
left alone.

Each test runs ``make test`` on one test of tests/test_pgbouncer.py (or none), on a
port and in a folder of its own, and then looks for processes naming that folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import URL

from tests.conftest import _unavailable

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parent.parent
THROUGH_PGBOUNCER = (
    "tests/test_pgbouncer.py::"
    "test_an_application_engine_is_left_as_it_is_and_its_failure_names_the_setting"
)
# What the outer run was given would be used as is by the inner one.
OUTER_SETTINGS = ("A2SQL_TEST_PGBOUNCER_URL", "PGBOUNCER_PORT_FOR_TESTS", "PGBOUNCER_DIR_FOR_TESTS")


@pytest.fixture
def direct_url(postgres_server: URL | str) -> str:
    if isinstance(postgres_server, str):
        _unavailable(postgres_server)
        raise AssertionError("unreachable")
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # Run here, make test must not build its venv first (minutes of pip).
    if subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT).returncode != 0:
        pytest.skip("make test's venv is not installed here (make .venv/.installed)")
    return postgres_server.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the PgBouncer's system user may enter (tmp_path's parents are private)."""
    made = Path(tempfile.mkdtemp(prefix="a2-make-test-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _processes_naming(text: str) -> list[str]:
    """The command lines of running processes that mention ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if state != "Z" and text in command:
            found.append(command)
    return found


def _environment(**settings: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in OUTER_SETTINGS}
    environment.update(settings)
    return environment


def _make_test(direct: str, folder: Path, pytest_args: str, **env: str) -> tuple[int, str]:
    """Run ``make test``; its exit code and output (stdout and stderr)."""
    environment = _environment(
        A2SQL_TEST_POSTGRES_URL=direct, CI="true", TMPDIR=str(folder), PYTHONDONTWRITEBYTECODE="1"
    )
    environment.update(env)
    ran = subprocess.run(
        ["make", "-s", "test", f"PYTEST_ARGS=-p no:cacheprovider {pytest_args}"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return ran.returncode, ran.stdout + ran.stderr


def _stop_pgbouncer(folder: Path) -> None:
    """Stop the PgBouncer started in ``folder``, by the pid in its pid file."""
    try:
        pid = int((folder / "pgbouncer.pid").read_text().strip())
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return
    if f"{folder}/pgbouncer.ini" not in command:
        return  # the pid file outlived its PgBouncer
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _processes_naming(f"{folder}/pgbouncer.ini") and time.monotonic() < deadline:
        time.sleep(0.05)


def test_make_test_stops_the_pgbouncer_it_started_on_a_free_port(
    direct_url: str, folder: Path
) -> None:
    """By default the PgBouncer runs on a free port, in a temporary folder: both are
    gone when make test ends."""
    code, output = _make_test(direct_url, folder, THROUGH_PGBOUNCER)
    assert code == 0 and "1 passed" in output, output
    assert "starting PgBouncer" in output, output
    assert _processes_naming(str(folder)) == [], output
    assert list(folder.glob("a2sql-test-pgbouncer.*")) == []


def test_make_test_stops_the_pgbouncer_it_started_when_pytest_fails(
    direct_url: str, folder: Path
) -> None:
    """pytest ends with an error (here: no test selected): the PgBouncer started on the
    given port and folder is stopped all the same, and make test fails."""
    bouncer = folder / "bouncer"
    port = _free_port()
    code, output = _make_test(
        direct_url,
        folder,
        f"{THROUGH_PGBOUNCER} -k no_such_test",
        PGBOUNCER_PORT_FOR_TESTS=str(port),
        PGBOUNCER_DIR_FOR_TESTS=str(bouncer),
    )
    try:
        assert code != 0, output
        assert "starting PgBouncer" in output, output
        assert _processes_naming(str(bouncer)) == [], output
        assert not _answers(port)
    finally:
        _stop_pgbouncer(bouncer)


@pytest.mark.parametrize("given", ["url", "port"])
def test_make_test_leaves_a_pgbouncer_it_did_not_start_running(
    direct_url: str, folder: Path, given: str
) -> None:
    """A PgBouncer given in A2SQL_TEST_PGBOUNCER_URL, or answering on
    PGBOUNCER_PORT_FOR_TESTS already, serves the tests and is still running afterwards."""
    bouncer = folder / "ours"
    port = _free_port()
    started = subprocess.run(
        [str(ROOT / "tools" / "test-pgbouncer.sh"), direct_url],
        env=_environment(PGBOUNCER_PORT_FOR_TESTS=str(port), PGBOUNCER_DIR_FOR_TESTS=str(bouncer)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        url = started.stdout.strip()
        assert url and _answers(port), started.stderr
        how = (
            {"A2SQL_TEST_PGBOUNCER_URL": url}
            if given == "url"
            else {"PGBOUNCER_PORT_FOR_TESTS": str(port)}
        )
        code, output = _make_test(direct_url, folder, THROUGH_PGBOUNCER, **how)
        assert code == 0 and "1 passed" in output, output
        assert "starting PgBouncer" not in output, output
        assert _answers(port)
        assert _processes_naming(f"{bouncer}/pgbouncer.ini") != []
    finally:
        _stop_pgbouncer(bouncer)
