"""Workers killed with SIGKILL mid-run and replaced: every invariant still holds (SPEC §1, §3).

A killed worker's claims are taken over once their lease ends; nothing it
had not committed is visible. On SQLite the file then passes
``pragma integrity_check`` and its WAL checkpoints completely.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import make_url

from bench.torture.common import Target
from bench.torture.driver import WorkersConfig, run_workers
from tests.torture.conftest import assert_clean


def test_killed_workers_lose_no_event_and_process_none_twice(
    torture_target: Target, seed: int, tmp_path: Path
) -> None:
    """Exactly-once completion survives SIGKILL of random workers about every 0.5 s."""
    report = run_workers(
        WorkersConfig(
            target=torture_target,
            workers=4 if torture_target.engine == "sqlite" else 8,
            duration=8,
            seed=seed,
            kill_every=0.5,
            drain_timeout=30,
            log_dir=str(tmp_path / "logs"),
            min_processed=40,
        )
    )
    assert_clean(report)
    assert report.figures["workers_killed"] >= 8, report.figures
    assert report.figures["processed"] >= 40, report.figures


def test_killed_async_workers_lose_no_event_and_process_none_twice(
    torture_target: Target, seed: int, tmp_path: Path
) -> None:
    """The same through AsyncStore: its calls run whole on the sync path (in a thread
    on PostgreSQL), and a worker killed mid-call still loses and doubles nothing."""
    report = run_workers(
        WorkersConfig(
            target=torture_target,
            workers=4,
            duration=6,
            seed=seed,
            kill_every=0.5,
            drain_timeout=30,
            log_dir=str(tmp_path / "logs"),
            api="async",
            min_processed=20,
        )
    )
    assert_clean(report)
    assert report.figures["workers_killed"] >= 5, report.figures
    assert report.figures["processed"] >= 20, report.figures


def test_sqlite_file_is_intact_and_its_wal_recovered_after_kills(seed: int, tmp_path: Path) -> None:
    """SQLite only: after SIGKILLs mid-write, integrity_check is ok and the WAL checkpoints."""
    target = Target("sqlite", f"sqlite:///{tmp_path / 'killed.db'}")
    report = run_workers(
        WorkersConfig(
            target=target,
            workers=4,
            duration=6,
            seed=seed,
            kill_every=0.3,
            ttl_ms=100,
            drain_timeout=30,
            log_dir=str(tmp_path / "logs"),
        )
    )
    assert_clean(report)
    assert report.figures["workers_killed"] >= 10, report.figures
    assert report.figures["sqlite_integrity_checked"] == 1, report.figures
    path = make_url(target.url).database
    assert path is not None
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("pragma integrity_check").fetchall() == [("ok",)]
        assert connection.execute("pragma journal_mode").fetchone() == ("wal",)
        count = connection.execute("select count(*) from a2_events").fetchone()[0]
        assert count == report.figures["events"]
    finally:
        connection.close()
