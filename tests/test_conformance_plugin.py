"""The contract as others run it: ``pytest --pyargs a2sql.testing.conformance`` from a
folder of their own, against the database ``A2SQL_CONFORMANCE_URL`` names, and a
conftest.py that overrides the plugin's hooks (a2sql.testing.plugin)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pytest(folder: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    """pytest in ``folder`` (an empty one: no conftest, no configuration of this
    repository's), a2sql from this checkout and nothing else of it on the path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("A2SQL_CONFORMANCE_URL", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")
    }
    env["PYTHONPATH"] = str(ROOT)
    if url is not None:
        env["A2SQL_CONFORMANCE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_import_a2sql_imports_neither_pytest_nor_the_plugin() -> None:
    code = (
        "import sys, a2sql, a2sql.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', "
        "'hypothesis') or m.startswith('a2sql.testing.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_contract_runs_from_an_empty_folder_on_every_facade(tmp_path: Path) -> None:
    """A SQLite file URL: a file per test, in the folder the URL names; each test through
    every facade; nothing of tests/ imported."""
    files = tmp_path / "files"
    files.mkdir()
    # A plugin that fails the run if anything of this repository's tests/ or bench/ was
    # imported.
    (tmp_path / "tests_not_imported.py").write_text(
        "import sys\n\n"
        "def pytest_sessionfinish(session):\n"
        "    found = [m for m in sys.modules if m.split('.')[0] in ('tests', 'bench')]\n"
        "    assert not found, found\n"
    )
    done = _pytest(
        tmp_path,
        "--pyargs",
        "a2sql.testing.conformance.test_smoke",
        "-p",
        "tests_not_imported",
        "-vv",
        url=f"sqlite:///{files}/",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for facade in ("sync", "async", "observed", "async_observed", "using"):
        assert f"[{facade}] PASSED" in done.stdout, done.stdout
    assert f"a2sql conformance: sqlite:///{files}/: a SQLite file per test in {files}" in (
        done.stdout
    )
    assert list(files.iterdir()) == []  # each test's file removed after it


def test_without_a_url_it_runs_on_sqlite_files_in_pytests_temporary_directory(
    tmp_path: Path,
) -> None:
    done = _pytest(tmp_path, "--pyargs", "a2sql.testing.conformance.test_smoke")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout
    assert (
        "a2sql conformance: sqlite:///a2.db: a SQLite file per test (a2.db) in pytest's "
        "temporary directory"
    ) in done.stdout


OVERRIDES = """
from typing import Any

import pytest

import a2sql

pytest_plugins = ["a2sql.testing.plugin"]
OPENED = []


@pytest.fixture(params=["sync"])
def a2sql_facade(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def a2sql_make_store(tmp_path: Any) -> Any:
    stores = []

    def make(**keywords: Any) -> a2sql.Store:
        OPENED.append(keywords)
        keywords.setdefault("migrate", True)
        store = a2sql.create_store(f"sqlite:///{tmp_path / 'mine.db'}", **keywords)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def pytest_sessionfinish(session: Any) -> None:
    print(f"opened by the conftest: {len(OPENED)}")
"""


def test_a_conftest_overrides_how_stores_are_opened(tmp_path: Path) -> None:
    """A backend of another engine plugs in as this conftest.py does: its own
    ``a2sql_make_store`` (here on a SQLite file of its own) and facades; the URL, which
    names an engine the plugin makes no databases for, is then never used."""
    (tmp_path / "conftest.py").write_text(OVERRIDES)
    done = _pytest(
        tmp_path,
        "--pyargs",
        "a2sql.testing.conformance.test_smoke",
        "a2sql.testing.conformance.test_clock_and_ids",
        "-s",
        url="mysql://nobody@nowhere/db",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    passed = int(done.stdout.split(" passed")[0].rsplit(maxsplit=1)[-1])
    assert passed == 1 + 10 + 1 + 2  # smoke; refused clocks and ids; accepted; the ids test
    assert "opened by the conftest: " in done.stdout


def test_an_override_the_plugins_default_would_shadow_stops_the_run(tmp_path: Path) -> None:
    """The same conftest.py without ``pytest_plugins``: the plugin, loaded later by the
    suite's own conftest, must not silently win (pytest 9 ranks fixtures so)."""
    (tmp_path / "conftest.py").write_text(OVERRIDES.replace("pytest_plugins", "_unused"))
    done = _pytest(tmp_path, "--pyargs", "a2sql.testing.conformance.test_smoke")
    if "opened by the conftest: 1" in done.stdout:
        return  # a pytest that ranks a conftest's fixtures above any plugin's (pytest 8)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "is shadowed by the default of a2sql.testing.plugin" in done.stdout + done.stderr


def test_an_engine_the_plugin_makes_no_databases_for_says_what_to_override(
    tmp_path: Path,
) -> None:
    done = _pytest(
        tmp_path,
        "--pyargs",
        "a2sql.testing.conformance.test_smoke",
        url="mysql://nobody@nowhere/db",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a2sql supports sqlite and postgresql, not 'mysql'" in done.stdout
    assert "override the fixture a2sql_database, or a2sql_make_store" in done.stdout
