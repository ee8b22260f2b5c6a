"""Eight processes open a store on the same fresh database at once (SPEC §2 migrate, §5).

Each one migrates on open. All succeed, none sees ``database is locked``, and
the schema is created once, at the newest revision, in WAL mode on SQLite.
"""

from __future__ import annotations

from bench.torture.coldstart import ColdStartConfig, run_cold_start
from bench.torture.common import Target
from tests.torture.conftest import assert_clean


def test_eight_processes_migrating_one_fresh_database_at_once_all_succeed(
    torture_target: Target, seed: int
) -> None:
    """Concurrent first starts: every open succeeds; one version row at head; all events there."""
    rounds = 10 if torture_target.engine == "sqlite" else 3
    report = run_cold_start(
        ColdStartConfig(target=torture_target, processes=8, rounds=rounds, seed=seed)
    )
    assert_clean(report)
    assert report.figures["opens"] == 8 * rounds, report.figures
