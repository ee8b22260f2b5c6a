"""Fixtures of the torture tests: a database per engine for many processes, and a seed.

The seed comes from ``A2SQL_TORTURE_SEED`` when set (to replay a failure),
else it is random; every test prints it.
"""

from __future__ import annotations

import os
import random
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import URL, create_engine, text
from sqlalchemy.pool import NullPool

from a2sql.execution.engines import resolve_url
from bench.torture.common import Report, Target

TORTURE_ENGINES = ("sqlite", pytest.param("postgres", marks=pytest.mark.postgres))


@pytest.fixture(params=TORTURE_ENGINES)
def torture_target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """A fresh database that many processes open: a SQLite file, or a PostgreSQL schema."""
    if request.param == "sqlite":
        return Target("sqlite", f"sqlite:///{tmp_path / 'torture.db'}")
    return Target("postgres", str(request.getfixturevalue("postgres_url")))


@pytest.fixture
def seed() -> int:
    chosen = int(os.environ.get("A2SQL_TORTURE_SEED") or random.randrange(1_000_000))
    print(f"torture seed: {chosen} (replay with A2SQL_TORTURE_SEED={chosen})")
    return chosen


def assert_clean(report: Report) -> None:
    """No anomaly; the summary (seed, figures, logs) is printed either way."""
    print(report.summary())
    assert not report.anomalies, report.summary()


def postmaster_start_time(server: URL | str) -> datetime:
    """When the PostgreSQL server at ``server`` started: a restart changes it."""
    engine = create_engine(resolve_url(server), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            started = connection.execute(text("select pg_postmaster_start_time()")).scalar_one()
    finally:
        engine.dispose()
    assert isinstance(started, datetime)
    return started
