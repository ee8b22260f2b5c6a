"""A PostgreSQL server of a run's own: initdb in a temporary folder, a free port, removed after.

A fault that restarts the server must never reach a server others use (the
machine's cluster, say): its clients would see ``the database system is shutting
down``. ``private_postgres`` starts a server that nobody else knows of, hands out
its URL and a way to restart it, and stops it and deletes its folder on the way
out, whether the body succeeded or raised.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# initdb and postgres refuse to run as root: as root they run as this system user.
SERVER_USER = "postgres"
START_TIMEOUT_S = 120
PORT_ATTEMPTS = 3


class NoPrivatePostgres(RuntimeError):
    """This machine cannot run a private PostgreSQL server (no binaries, no user to run it)."""


@dataclass(frozen=True)
class PrivatePostgres:
    """A running private server: ``url`` reaches its ``postgres`` database as superuser."""

    url: str
    port: int
    folder: Path
    bindir: Path

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def restart(self) -> float:
        """Restart this server (``pg_ctl restart``, fast mode); returns the seconds it took."""
        started = time.monotonic()
        _pg_ctl(self.bindir, self.folder, "restart", "-m", "fast")
        return time.monotonic() - started

    def postmaster_pid(self) -> int | None:
        """The server's process id, from its ``postmaster.pid``; None when it is not running."""
        return _postmaster_pid(self.data)


def postgres_bindir() -> Path | None:
    """Where initdb, pg_ctl and postgres are: ``pg_config --bindir``, else the newest
    ``/usr/lib/postgresql/*/bin``, else the folder of ``initdb`` on the PATH."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            found = subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, check=True
            )
            candidates.append(Path(found.stdout.strip()))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += [Path(p) for p in sorted(versions, key=_version_key, reverse=True)]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for folder in candidates:
        if all((folder / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.name
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def unavailable_reason() -> str | None:
    """Why ``private_postgres`` cannot run here, or None when it can."""
    if postgres_bindir() is None:
        return (
            "no PostgreSQL server binaries (initdb, pg_ctl, postgres) in pg_config --bindir, "
            "/usr/lib/postgresql/*/bin or the PATH"
        )
    if os.geteuid() == 0 and not _server_user_exists():
        return f"running as root and there is no {SERVER_USER!r} system user to run PostgreSQL"
    return None


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """Start a private PostgreSQL server; stop it and delete its folder on the way out.

    Raises ``NoPrivatePostgres`` (saying why) when this machine cannot run one.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise NoPrivatePostgres(reason)
    bindir = postgres_bindir()
    assert bindir is not None
    folder = Path(tempfile.mkdtemp(prefix="a2-private-pg-"))
    try:
        if os.geteuid() == 0:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(folder, user.pw_uid, user.pw_gid)
        data = folder / "data"
        _run_as_server_user(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",  # a throwaway cluster: no need to wait for the disk
            ]
        )
        yield _start(bindir, folder)
    finally:
        _stop(bindir, folder)
        shutil.rmtree(folder, ignore_errors=True)


def _start(bindir: Path, folder: Path) -> PrivatePostgres:
    """Start the server on a free port; another process may take the port between our
    look and the server's bind, so a failed start is tried again on another."""
    failure: subprocess.CalledProcessError | None = None
    for _ in range(PORT_ATTEMPTS):
        port = _free_port()
        with (folder / "data" / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\n# private server of a test run\nport = {port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{folder}'\n"
            )
        server = PrivatePostgres(
            url=f"postgresql://postgres@127.0.0.1:{port}/postgres",
            port=port,
            folder=folder,
            bindir=bindir,
        )
        try:
            _pg_ctl(bindir, folder, "start")
            return server
        except subprocess.CalledProcessError as error:
            failure = error
            _stop(bindir, folder)
    log = (folder / "server.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"the private PostgreSQL server did not start: {failure}\n{log}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_user_exists() -> bool:
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        return False
    return True


def _run_as_server_user(command: list[str]) -> None:
    if os.geteuid() == 0:
        command = ["runuser", "-u", SERVER_USER, "--", *command]
    subprocess.run(
        command,
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=START_TIMEOUT_S + 60,
        cwd=tempfile.gettempdir(),  # the server user may not enter the caller's folder
    )


def _pg_ctl(bindir: Path, folder: Path, *args: str) -> None:
    command = [str(bindir / "pg_ctl"), "-D", str(folder / "data"), "-w"]
    command += ["-t", str(START_TIMEOUT_S), *args]
    if args[0] in ("start", "restart"):
        # The server's output goes to a file: left on our pipe, it would hold the pipe
        # open, and the wait for pg_ctl to finish would last as long as the server.
        command += ["-l", str(folder / "server.log")]
    _run_as_server_user(command)


def _stop(bindir: Path, folder: Path) -> None:
    """Stop the server in ``folder`` if one runs (immediate: its data is deleted next);
    kill its postmaster when pg_ctl could not stop it."""
    data = folder / "data"
    with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
        if (data / "postmaster.pid").exists():
            _pg_ctl(bindir, folder, "stop", "-m", "immediate")
    pid = _postmaster_pid(data)
    if pid is not None and _is_postmaster_of(pid, data):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, timeout=30)


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _is_postmaster_of(pid: int, data: Path) -> bool:
    """Whether process ``pid`` is a postgres serving ``data``: a pid file outlives its
    server, and its number may since belong to another process."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(data).encode() in arguments


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
