"""Processes appending to one session at once (SPEC §3 append, idempotent replay, §5).

Some replay batches after a simulated lost reply (the call committed, the
caller never saw the result): no index taken twice, no gap, every batch stored
exactly once and contiguously, and replays return the stored events. Racing
appends of one id to different sessions: exactly one wins, the others get
PARTIAL_DUPLICATE_BATCH (never STORE_UNAVAILABLE).
"""

from __future__ import annotations

from pathlib import Path

from bench.torture.appenders import AppendersConfig, run_appenders
from bench.torture.common import Target
from tests.torture.conftest import assert_clean


def test_concurrent_appenders_take_every_index_once_and_replays_return_stored_events(
    torture_target: Target, seed: int, tmp_path: Path
) -> None:
    """Gapless indexes, batches stored once, replays equal, one winner per contested id."""
    appenders = 4 if torture_target.engine == "sqlite" else 8
    report = run_appenders(
        AppendersConfig(
            target=torture_target,
            appenders=appenders,
            batches=40,
            seed=seed,
            log_dir=str(tmp_path / "logs"),
        )
    )
    assert_clean(report)
    assert report.figures["batches"] == appenders * 40, report.figures
    assert report.figures["replays"] > 0, report.figures
    assert report.figures["contests"] == 10, report.figures
