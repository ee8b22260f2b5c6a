"""The contract's own fixtures (``clock``, ``store``, ``open_store``), over the hooks of
a2sql's pytest plugin (a2sql.testing.plugin: ``a2sql_make_store`` and what it opens
stores on), which this conftest registers as a plugin rather than defining its
fixtures here: a plugin's fixtures are the defaults that a ``conftest.py`` of the
directory pytest runs from overrides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from a2sql import Store
from a2sql.testing import FakeClock

PLUGIN = "a2sql.testing.plugin"


def pytest_configure(config: pytest.Config) -> None:
    # Already registered where pytest was told to load it (-p a2sql.testing.plugin).
    config.pluginmanager.import_plugin(PLUGIN)


@pytest.fixture
def clock() -> FakeClock:
    """The clock of the test's stores: it moves only when the test moves it."""
    return FakeClock()


@pytest.fixture
def store(a2sql_make_store: Callable[..., Store], clock: FakeClock) -> Store:
    """A store on the test's fresh database, through the facade of the test, on ``clock``.

    Tests are typed against ``Store``; every facade answers the same calls."""
    return a2sql_make_store(clock=clock)


@pytest.fixture
def open_store(a2sql_make_store: Callable[..., Store], clock: FakeClock) -> Callable[..., Store]:
    """Open another store with ``create_store``'s keywords (on ``clock`` unless given):
    on the same database as ``store``, or on SQLite memory a database of its own."""

    def open_(**keywords: Any) -> Store:
        keywords.setdefault("clock", clock)
        return a2sql_make_store(**keywords)

    return open_
