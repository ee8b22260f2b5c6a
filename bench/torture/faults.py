"""Faults a driver injects: SIGKILL of processes, terminated backends.

A server restart is the run's own server's (bench.torture.private_postgres).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

SPAWN = multiprocessing.get_context("spawn")


@dataclass
class ProcessPool:
    """Real worker processes (spawn start method) that a driver may kill and replace."""

    target: Callable[..., None]
    make_args: Callable[[str], tuple[Any, ...]]
    name_prefix: str = "w"
    # How many processes should be running; the driver replaces dead ones up to it.
    size: int = 0
    alive: dict[str, BaseProcess] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    spawned: int = 0

    def spawn(self) -> str:
        name = f"{self.name_prefix}{self.spawned}"
        self.spawned += 1
        process = SPAWN.Process(target=self.target, args=self.make_args(name), name=name)
        process.start()
        self.alive[name] = process
        return name

    def kill_random(self, rng: random.Random) -> str | None:
        """SIGKILL one live process; returns its name."""
        running = [name for name, p in self.alive.items() if p.is_alive()]
        if not running:
            return None
        name = rng.choice(sorted(running))
        pid = self.alive[name].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        self.killed.add(name)
        return name

    def reap(self) -> list[tuple[str, int | None]]:
        """Forget processes that ended; returns (name, exit code) of those not killed by us."""
        unexpected = []
        for name, process in list(self.alive.items()):
            if process.is_alive():
                continue
            process.join()
            del self.alive[name]
            if name not in self.killed:
                unexpected.append((name, process.exitcode))
        return unexpected

    def join_all(self, timeout: float) -> list[str]:
        """Wait for every process to end; SIGKILL and name those that did not."""
        deadline = time.monotonic() + timeout
        stuck = []
        for name, process in self.alive.items():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                stuck.append(name)
                process.kill()
                process.join()
        return stuck

    def terminate_all(self) -> None:
        for process in self.alive.values():
            if process.is_alive():
                process.kill()
            process.join()
        self.alive.clear()


class BackendKiller:
    """Terminates backends whose application_name starts with a run's prefix."""

    # Backends caught inside a transaction are the interesting ones.
    BUSY_STATES = ("active", "idle in transaction", "idle in transaction (aborted)")

    def __init__(self, url: str, app_prefix: str) -> None:
        admin_url = make_url(url).update_query_dict({"application_name": "torture-admin"})
        self._engine = create_engine(admin_url, poolclass=NullPool)
        self._prefix = app_prefix

    def backends(self) -> list[tuple[int, str, str, str]]:
        with self._engine.connect() as connection:
            rows = connection.execute(
                text(
                    "select pid, application_name, coalesce(state, ''), left(query, 80) "
                    "from pg_stat_activity where application_name like :prefix "
                    "and pid <> pg_backend_pid()"
                ),
                {"prefix": self._prefix.replace("_", r"\_") + "%"},
            ).all()
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def terminate_one(self, rng: random.Random, patience_s: float = 0.5) -> dict[str, Any] | None:
        """Terminate one backend, preferring one caught inside a transaction."""
        deadline = time.monotonic() + patience_s
        candidates: list[tuple[int, str, str, str]] = []
        while True:
            candidates = self.backends()
            busy = [row for row in candidates if row[2] in self.BUSY_STATES]
            if busy:
                candidates = busy
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        if not candidates:
            return None
        pid, app, state, query = rng.choice(candidates)
        with self._engine.connect() as connection:
            done = connection.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})
            terminated = bool(done.scalar())
        return {"pid": pid, "app": app, "state": state, "query": query, "ok": terminated}

    def close(self) -> None:
        self._engine.dispose()
