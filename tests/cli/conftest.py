"""Running the ``a2sql`` command in tests: in this process, or as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import a2sql
from a2sql import NewEvent, Store
from a2sql.cli import main
from a2sql.testing import FakeClock


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)

    def lines(self) -> list[str]:
        return self.out.splitlines()


Cli = Callable[..., Ran]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``cli("status", "--url", url)``: the command run in this process, its output captured."""

    def run(*args: str) -> Ran:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def run_a2sql(*args: str, cwd: Path | None = None, timeout: float = 60) -> Ran:
    """The command as a user runs it from a script: a process of its own, neither its
    input nor its output a terminal."""
    done = subprocess.run(
        [sys.executable, "-m", "a2sql.cli", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def populated(url: str) -> Iterator[tuple[Store, str]]:
    """A store at ``url`` holding every state an event can be in (``order-1``), a small
    session whose id starts like it (``order-17``) and an old settled one (``old``)."""
    # Real time, a week back for the old session: the command's own store reads the
    # system clock, and must find the claims live.
    now = datetime.now(UTC)
    clock = FakeClock(now - timedelta(days=7))
    with a2sql.create_store(url, clock=clock, migrate=True) as store:
        store.append("old", [NewEvent("done", settled=True)])
        clock.set(now)
        store.append(
            "order-1",
            [
                NewEvent("placed", {"n": 1}, lane="order"),  # 1: processed
                NewEvent("charge", {"n": 2}, lane="order"),  # 2: claimed
                NewEvent("ship", {"n": 3}, lane="order"),  # 3: waits behind 2
                NewEvent("report", {"n": 4}, lane="report"),  # 4: dead letter
                NewEvent("email", {"n": 5}, lane="report"),  # 5: blocked behind 4
                NewEvent("audit", {"n": 6}),  # 6: failed, retrying later
                NewEvent("note", {"n": 7}, settled=True),  # 7: settled
            ],
        )
        claim = store.claim_available("order-1", holder="w", ttl_ms=60_000)
        attempts = {e.index: e.attempt_count for e in claim.events}
        assert sorted(attempts) == [1, 4, 6]
        store.complete_attempt("order-1", index=1, attempt=attempts[1], events=[])
        store.fail_attempt(
            "order-1", index=4, attempt=attempts[4], error="boom\n  at x", max_failures=1
        )
        store.fail_attempt(
            "order-1",
            index=6,
            attempt=attempts[6],
            error="later",
            max_failures=5,
            retry_after_ms=3_600_000,
        )
        [charge] = store.claim_available("order-1", holder="w2", ttl_ms=60_000).events
        assert charge.index == 2
        store.append("order-17", [NewEvent("placed")])
        store.put_snapshot("order-1", "summary", 7, {"seen": 7})
        yield store, url
