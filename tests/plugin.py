"""The repository's pytest plugin: PostgreSQL for the tests, and the conformance suite
(a2sql/testing/conformance) on every engine.

pyproject.toml loads it after a2sql's own plugin (``addopts``: ``-p
a2sql.testing.plugin -p tests.plugin``), so that its ``a2sql_conformance_url``
overrides the plugin's, as a third party's conftest would: the suite runs on
a SQLite file, SQLite memory and PostgreSQL, each test on a fresh database
the plugin makes (a2sql.testing.plugin), through every facade.

PostgreSQL comes from ``A2SQL_TEST_POSTGRES_URL``; else from testcontainers
when a Docker engine answers; else its tests skip, saying why. With
``CI=true`` a PostgreSQL test that cannot run fails instead of skipping.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy import URL

from a2sql.execution.engines import resolve_url
from a2sql.testing.plugin import BEFORE_THE_DATABASE

ENGINES = ("sqlite_file", "sqlite_memory", "postgres")
# The engine that runs the contract's checks made before the database is reached
# (a2sql.testing.plugin.BEFORE_THE_DATABASE): what they check is the same on every
# engine, and each facade still runs them.
BEFORE_THE_DATABASE_ON = "sqlite_file"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the contract's before-the-database tests on all engines but one."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        engine = None if callspec is None else callspec.params.get("a2sql_conformance_url")
        if (
            engine not in (None, BEFORE_THE_DATABASE_ON)
            and item.get_closest_marker(BEFORE_THE_DATABASE) is not None
        ):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip the test for want of PostgreSQL, saying why; under ``CI=true`` fail it."""
    if in_ci():
        pytest.fail(f"PostgreSQL is required in CI (CI=true) but {reason}", pytrace=False)
    pytest.skip(reason)


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def postgres_given() -> Iterator[URL | str]:
    """The URL of the PostgreSQL database the tests were given (under pytest-xdist each
    test process uses one of its own beside it: a2sql.testing.plugin.own_database), or
    the reason there is none (a str)."""
    env_url = os.environ.get("A2SQL_TEST_POSTGRES_URL")
    if env_url:
        yield resolve_url(env_url)
        return
    if not _docker_answers():
        yield (
            "no PostgreSQL: A2SQL_TEST_POSTGRES_URL is unset and no Docker engine answers "
            "for testcontainers"
        )
        return
    from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]

    with PostgresContainer("postgres:16-alpine", driver="psycopg") as container:
        yield resolve_url(container.get_connection_url())


@pytest.fixture(
    params=[
        pytest.param(engine, marks=[pytest.mark.postgres] if engine == "postgres" else [])
        for engine in ENGINES
    ]
)
def a2sql_conformance_url(request: pytest.FixtureRequest) -> str:
    """The conformance suite's database, on each engine: a SQLite file per test (in
    pytest's temporary directory), SQLite memory, and a schema per test in the
    PostgreSQL database the tests were given."""
    if request.param == "sqlite_file":
        return "sqlite:///a2.db"
    if request.param == "sqlite_memory":
        return "sqlite://"
    given: URL | str = request.getfixturevalue("postgres_given")
    if isinstance(given, str):
        unavailable(given)
        raise AssertionError("unreachable")
    return given.render_as_string(hide_password=False)
