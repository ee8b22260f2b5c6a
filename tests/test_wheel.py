"""What a user installs: `python -m build` gives a wheel and an sdist, each of which,
installed into a fresh virtualenv, ships the Alembic scripts and runs `a2sql demo` from
an empty folder; the editable install `make demo` does prints nothing of a2sql's own."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAD = "0005_lean_indexes"
SCRIPTS = sorted(p.name for p in (ROOT / "a2sql" / "_migrations" / "versions").glob("*.py"))
# The contract: the conformance suite, its conftest and the pytest plugin it loads.
CONTRACT = sorted(p.name for p in (ROOT / "a2sql" / "testing" / "conformance").glob("*.py"))

# This machine's pip configuration names package folders that may not exist; pip says so
# on every install. Those lines are the machine's, not the project's.
MACHINE_PIP_NOTICE = re.compile(r"^WARNING: Location '[^']*' is ignored: .*$", re.M)


# `pip install a2sql` or `pip install 'a2sql[postgres]'`, from a package index a2sql is not
# on; `'a2sql[postgres] @ git+https://...'` names where it comes from.
FROM_AN_INDEX = re.compile(r"pip install\s+['\"]?a2sql(\[[\w,-]+\])?(?![\[\w-])(?!\s*@)")


def _env() -> dict[str, str]:
    """The environment of a user's shell: no a2sql URL, nothing added to the path."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("A2SQL_DATABASE_URL", "A2SQL_CONFORMANCE_URL", "PYTHONPATH")
    }


def _run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build` of the checkout: the sdist, then the wheel built from that sdist."""
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def _fresh_venv(where: Path) -> Path:
    """A new virtualenv (without pip: this one's pip installs into it); its python."""
    made = _run(sys.executable, "-m", "venv", "--without-pip", where)
    assert made.returncode == 0, made.stderr
    return where / "bin" / "python"


def _site_packages(python: Path) -> Path:
    done = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def _install(python: Path, *what: str | Path) -> subprocess.CompletedProcess[str]:
    """pip install into the virtualenv of ``python``, a2sql alone: its dependencies are
    then lent from this environment (below), so that no test downloads them."""
    return _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", *what)


def _lend_dependencies(python: Path) -> None:
    """Put this environment's packages after the virtualenv's own on its path: a2sql
    comes from the virtualenv, what it depends on from here."""
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (_site_packages(python) / "_lent_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")


def _project_output(done: subprocess.CompletedProcess[str]) -> str:
    return MACHINE_PIP_NOTICE.sub("", done.stdout + done.stderr).strip()


def test_the_wheel_and_the_sdist_ship_the_migrations(dist: Path) -> None:
    """The wheel ships env.py, every revision script of the checkout, script.py.mako and
    py.typed under a2sql/; the sdist holds the same sources."""
    [wheel] = dist.glob("a2sql-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert HEAD + ".py" in SCRIPTS and "0001_baseline.py" in SCRIPTS
    for name in ("env.py", "script.py.mako", *(f"versions/{s}" for s in SCRIPTS)):
        assert f"a2sql/_migrations/{name}" in names, name
    assert "a2sql/py.typed" in names
    [sdist] = dist.glob("a2sql-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "a2sql/py.typed"} <= members
    for script in SCRIPTS:
        assert f"a2sql/_migrations/versions/{script}" in members, script


def test_the_wheel_ships_the_contract(dist: Path) -> None:
    """The conformance suite ships in the wheel, with its conftest.py and the pytest
    plugin (``pytest --pyargs a2sql.testing.conformance`` runs it), and the extra
    ``testing`` names what it needs."""
    [wheel] = dist.glob("a2sql-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    assert {"conftest.py", "__init__.py", "test_smoke.py", "test_stateful.py"} <= set(CONTRACT)
    for name in CONTRACT:
        assert f"a2sql/testing/conformance/{name}" in names, name
    for module in ("__init__", "plugin", "facades", "model"):
        assert f"a2sql/testing/{module}.py" in names, module
    [metadata] = [name for name in names if name.endswith(".dist-info/METADATA")]
    requires = archive.read(metadata).decode().splitlines()
    assert "Provides-Extra: testing" in requires
    assert any(
        r.startswith("Requires-Dist: pytest") and "extra == 'testing'" in r for r in requires
    )


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installed_into_a_fresh_venv_it_runs_the_demo_and_migrates(
    dist: Path, kind: str, tmp_path: Path
) -> None:
    """Installed into a new virtualenv from the wheel, or from the sdist (which pip
    builds), a2sql is the virtualenv's own; its `a2sql demo` runs in an empty folder (and
    makes .a2/dev.db there), and its `a2sql migrate` takes a new database to head."""
    [artifact] = dist.glob("a2sql-*.whl" if kind == "wheel" else "a2sql-*.tar.gz")
    python = _fresh_venv(tmp_path / "venv")
    installed = _install(python, artifact)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    _lend_dependencies(python)
    work = tmp_path / "empty"
    work.mkdir()
    where = _run(python, "-c", "import a2sql; print(a2sql.__file__)", cwd=work)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(_site_packages(python)), where.stdout

    demo = _run(tmp_path / "venv" / "bin" / "a2sql", "demo", cwd=work)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "demo-" in demo.stdout
    assert (work / ".a2" / "dev.db").is_file()

    db = work / "new.db"
    migrated = _run(tmp_path / "venv" / "bin" / "a2sql", "migrate", "--url", f"sqlite:///{db}")
    assert migrated.returncode == 0, migrated.stderr
    assert f"empty -> {HEAD}" in migrated.stdout
    with sqlite3.connect(db) as connection:
        tables = {row[0] for row in connection.execute("select name from sqlite_master")}
        version = connection.execute("select version_num from a2sql_alembic_version").fetchall()
    assert {"a2_events", "a2_snapshots", "a2_presence", "a2_events_dispatch_free"} <= tables
    assert version == [(HEAD,)]

    # The contract, from the installed package, in an empty folder: a SQLite file per test.
    contract = _run(
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--pyargs",
        "a2sql.testing.conformance.test_smoke",
        cwd=work,
    )
    assert contract.returncode == 0, contract.stdout + contract.stderr
    assert "5 passed" in contract.stdout, contract.stdout


def test_the_editable_install_of_make_demo_prints_nothing_of_its_own(tmp_path: Path) -> None:
    """`pip install --quiet -e .`, as `make demo` installs the checkout: no warning box
    from the build backend ("!!", BuildBackendWarning), nothing at all but this
    machine's pip notices; the virtualenv then imports a2sql, and its migrations, from
    the checkout."""
    python = _fresh_venv(tmp_path / "venv")
    installed = _install(python, "--quiet", "-e", ROOT)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    output = _project_output(installed)
    assert "!!" not in output and "BuildBackendWarning" not in output, output
    assert output == ""
    _lend_dependencies(python)
    found = _run(
        python,
        "-c",
        "import a2sql.migrate; print(a2sql.migrate.script_location())",
        cwd=tmp_path,
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == ROOT / "a2sql" / "_migrations"


def test_no_page_installs_a2sql_from_a_package_index() -> None:
    """README and every docs page say to install from a clone, a URL or a built wheel."""
    assert FROM_AN_INDEX.search("pip install a2sql  # x")
    assert FROM_AN_INDEX.search("pip install 'a2sql[postgres]'")
    assert FROM_AN_INDEX.search("pip install 'a2sql[openai-agents]'")
    assert not FROM_AN_INDEX.search("pip install 'a2sql[postgres] @ git+https://h/o/a2sql.git'")
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            assert not FROM_AN_INDEX.search(line), f"{page.name}:{number}: {line}"
