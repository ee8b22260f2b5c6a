"""A password in the URL is never printed, wherever it sits in the URL.

libpq (and so psycopg) reads a password from the URL's user part and from
its query (``?password=``, ``?sslpassword=``); the commands' output and
a2sql's errors show ``***`` for each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import make_url

import a2sql
from a2sql import A2Error, ErrorCode
from tests.cli.conftest import Cli, run_a2sql

SECRET = "s3cret-Pa55"


def _with_secrets(url: str) -> str:
    parsed = make_url(url)
    return parsed.update_query_dict({"password": SECRET, "sslpassword": SECRET}).render_as_string(
        hide_password=False
    )


@pytest.fixture
def secret_url(postgres_url: str) -> str:
    """The test database's URL with a password in its query (the server trusts us: unused)."""
    return _with_secrets(postgres_url)


def _shown_without_secret(text: str) -> None:
    assert SECRET not in text, text
    assert "password=***" in text, text


def test_migrate_check_migrate_stamp_and_status_hide_a_query_password(
    cli: Cli, secret_url: str
) -> None:
    behind = cli("migrate", "--check", "--url", secret_url)
    assert behind.code != 0
    _shown_without_secret(behind.out + behind.err)
    for args in (
        ("migrate", "--url", secret_url),
        ("migrate", "--check", "--url", secret_url),
        ("migrate", "--check", "--json", "--url", secret_url),
        ("stamp", "head", "--url", secret_url),
        ("status", "--url", secret_url),
        ("status", "--json", "--url", secret_url),
    ):
        ran = cli(*args)
        assert ran.code == 0, (args, ran.err)
        _shown_without_secret(ran.out + ran.err)


def test_errors_naming_the_database_hide_a_query_password(secret_url: str) -> None:
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(secret_url, migrate=False)
    assert raised.value.code is ErrorCode.SCHEMA_MISMATCH
    _shown_without_secret(raised.value.message)


def test_a_missing_sqlite_file_is_named_without_a_query_password(cli: Cli, tmp_path: Path) -> None:
    ran = cli("status", "--url", f"sqlite:///{tmp_path / 'missing.db'}?password={SECRET}")
    assert ran.code != 0
    _shown_without_secret(ran.out + ran.err)


def test_the_worker_start_line_hides_a_query_password(
    cli: Cli, secret_url: str, tmp_path: Path
) -> None:
    assert cli("migrate", "--url", secret_url).code == 0
    (tmp_path / "app.py").write_text("def handle(attempt):\n    return None\n")
    served = run_a2sql("worker", "app:handle", "--url", secret_url, "--until-idle", cwd=tmp_path)
    assert served.code == 0, served.err
    assert "serving" in served.err, served.err
    _shown_without_secret(served.out + served.err)
