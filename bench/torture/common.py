"""What every torture scenario shares: targets, JSON-lines logs, retries, reports."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

import a2sql
from a2sql import A2Error, ErrorCode
from a2sql.execution.engines import resolve_url

T = TypeVar("T")

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1/test"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# How long a process keeps retrying a call that fails with STORE_UNAVAILABLE
# (a PostgreSQL restart takes a few seconds; a busy 2-core machine more).
GIVE_UP_AFTER_S = 120.0


@dataclass(frozen=True)
class Target:
    """A database every process of a scenario opens: ``engine`` is sqlite or postgres."""

    engine: str
    url: str

    def url_for(self, name: str) -> str:
        """The URL a process called ``name`` opens (PostgreSQL sees it as application_name)."""
        if self.engine != "postgres":
            return self.url
        parsed = make_url(self.url).update_query_dict({"application_name": name})
        return parsed.render_as_string(hide_password=False)


def engine_of(url: str) -> str:
    return "postgres" if make_url(url).get_backend_name() == "postgresql" else "sqlite"


@contextlib.contextmanager
def scratch_target(engine: str, url: str | None = None, *, keep: bool = False) -> Iterator[Target]:
    """A fresh database for one run: a temporary SQLite file, or a new PostgreSQL schema.

    ``url``: for sqlite a database URL to use as is; for postgres the server
    (default ``A2SQL_TEST_POSTGRES_URL`` or the local test database) in which
    a schema is created, and dropped afterwards unless ``keep``.
    """
    if engine == "sqlite":
        if url is not None:
            yield Target("sqlite", url)
            return
        folder = tempfile.mkdtemp(prefix="a2-torture-")
        yield Target("sqlite", f"sqlite:///{folder}/torture.db")
        return
    server = resolve_url(url or os.environ.get("A2SQL_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL)
    schema = f"torture_{uuid.uuid4().hex[:10]}"
    admin = create_engine(server, poolclass=NullPool)
    with admin.begin() as connection:
        connection.execute(text(f'create schema "{schema}"'))
    scoped = server.update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield Target("postgres", scoped.render_as_string(hide_password=False))
    finally:
        if not keep:
            _drop_schema(admin, schema)
        admin.dispose()


def _drop_schema(admin: Any, schema: str) -> None:
    deadline = time.monotonic() + GIVE_UP_AFTER_S
    while True:
        try:
            with admin.begin() as connection:
                connection.execute(text(f'drop schema if exists "{schema}" cascade'))
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# --- time and randomness -----------------------------------------------------


def now_ms() -> int:
    """Wall-clock epoch milliseconds (every process of a run shares the clock)."""
    return time.time_ns() // 1_000_000


def ms(value: datetime | None) -> int | None:
    """Epoch milliseconds of a stored time."""
    if value is None:
        return None
    return (value - EPOCH) // timedelta(milliseconds=1)


def unit(seed: int, *parts: object) -> float:
    """A number in [0, 1) fixed by the seed and ``parts``: decisions a replay repeats."""
    digest = hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def rng_for(seed: int, *parts: object) -> random.Random:
    return random.Random(unit(seed, *parts))


# --- logs ----------------------------------------------------------------------


class JsonLog:
    """Append-only JSON lines, one ``os.write`` per record so a SIGKILL tears at most one."""

    def __init__(self, path: str | Path, source: str) -> None:
        self.source = source
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, kind: str, /, **fields: Any) -> None:
        record = {"k": kind, "src": self.source, "t": now_ms(), **fields}
        os.write(self._fd, (json.dumps(record, default=str) + "\n").encode())

    def anomaly(self, what: str, /, **fields: Any) -> None:
        self.write("anomaly", what=what, **fields)

    def close(self) -> None:
        os.close(self._fd)


def read_logs(folder: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record of every ``*.jsonl`` file in ``folder``, and problems reading them.

    A torn last line (the writer was killed mid-write) is skipped; a torn
    line anywhere else is a problem.
    """
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        lines = path.read_text().split("\n")
        for number, line in enumerate(lines):
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                if number != len(lines) - 1:
                    problems.append(f"{path.name}:{number + 1}: unreadable log line {line!r}")
    return records, problems


# --- retries -----------------------------------------------------------------------


class GaveUp(Exception):
    """A call kept failing with STORE_UNAVAILABLE past the retry deadline."""


def retrying(
    call: Callable[[], T],
    *,
    log: JsonLog,
    op: str,
    give_up_after: float = GIVE_UP_AFTER_S,
    on_unavailable: Callable[[A2Error], None] | None = None,
) -> T:
    """Run ``call``, retrying with jittered exponential backoff on STORE_UNAVAILABLE.

    Every failure is logged (its message tells a fault from a bug). Any other
    error propagates: the caller decides whether it is an outcome or an anomaly.
    """
    deadline = time.monotonic() + give_up_after
    pause = 0.02
    while True:
        try:
            return call()
        except A2Error as error:
            if error.code != ErrorCode.STORE_UNAVAILABLE:
                raise
            log.write("unavailable", op=op, err=error.message[:300])
            if on_unavailable is not None:
                on_unavailable(error)
            if time.monotonic() > deadline:
                raise GaveUp(f"{op}: {error.message}") from error
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(pause * 2, 1.0)


def open_store(
    url: str, log: JsonLog, *, migrate: bool | None = False, clock: Any = None
) -> a2sql.Store:
    """``create_store`` with retries: a process may start while the server restarts."""
    return retrying(
        lambda: a2sql.create_store(url, migrate=migrate, clock=clock), log=log, op="open"
    )


# --- reports -----------------------------------------------------------------------


@dataclass
class Report:
    """What a run did and what went wrong; ``anomalies`` must be empty."""

    scenario: str
    engine: str
    seed: int
    seconds: float = 0.0
    figures: dict[str, int] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)
    log_dir: str = ""
    # The prefix of every session id of the run (to re-check its database).
    prefix: str = ""

    def add(self, name: str, amount: int = 1) -> None:
        self.figures[name] = self.figures.get(name, 0) + amount

    def summary(self) -> str:
        figures = ", ".join(f"{name}={value}" for name, value in sorted(self.figures.items()))
        head = (
            f"[torture {self.scenario}] engine={self.engine} seed={self.seed} "
            f"seconds={self.seconds:.1f} {figures} anomalies={len(self.anomalies)}"
        )
        shown = self.anomalies[:40]
        more = len(self.anomalies) - len(shown)
        lines = [head, *(f"  ANOMALY {a[:600]}" for a in shown)]
        if more:
            lines.append(f"  ... and {more} more anomalies")
        if self.log_dir:
            lines.append(f"  logs: {self.log_dir}")
        return "\n".join(lines)

    def as_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


# STORE_UNAVAILABLE messages that a PostgreSQL fault (a terminated backend, a
# restarting server) explains. Any other message is an anomaly.
POSTGRES_FAULT_MESSAGES = (
    "terminating connection",
    "server closed the connection",
    "connection refused",
    "the database system is shutting down",
    "the database system is starting up",
    "the database system is not yet accepting connections",
    "consuming input failed",
    "the connection is closed",
    "connection is lost",
    "connection failed",
    "could not receive data",
    "could not send data",
    "no connection to the server",
    "server conn crashed",
    "sending query",
    "eof detected",
    "connection has been closed",
    "administrator command",
    "connection to server",
)


def explained_by_postgres_fault(message: str) -> bool:
    lowered = message.lower()
    return any(fragment in lowered for fragment in POSTGRES_FAULT_MESSAGES)


def unavailable_anomalies(
    records: list[dict[str, Any]], *, engine: str, faults_injected: bool
) -> tuple[int, list[str]]:
    """How many STORE_UNAVAILABLE errors the processes saw, and those that are anomalies.

    On SQLite every one is (nothing is injected that may fail a call: a
    killed process releases its locks; ``database is locked`` is a bug). On
    PostgreSQL one is explained only by an injected fault and its message.
    """
    seen = [r for r in records if r["k"] == "unavailable"]
    bad: list[str] = []
    for record in seen:
        message = record["err"]
        if engine == "postgres" and faults_injected and explained_by_postgres_fault(message):
            continue
        bad.append(f"{record['src']} {record['op']}: STORE_UNAVAILABLE {message}")
    return len(seen), bad
