"""``a2sql migrate``: bring the schema to a revision, or check it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

import click
from sqlalchemy import URL, create_engine
from sqlalchemy.pool import NullPool

from a2sql import migrate as migrations
from a2sql.backends import database_file
from a2sql.cli.common import (
    NO_DATABASE,
    CommandFailed,
    existing,
    json_option,
    missing_file,
    no_such_file,
    url_option,
)
from a2sql.cli.output import Output
from a2sql.core.escaping import command_line
from a2sql.core.urls import shown_url
from a2sql.execution.engines import build_engine, resolve_url


@click.command()
@url_option
@click.option("--revision", default="head", show_default=True, help="Revision to move to.")
@click.option(
    "--check",
    is_flag=True,
    help="Only report, writing nothing: exit 1 if not at the newest revision, 3 if no database.",
)
@click.option(
    "--sql",
    "offline",
    is_flag=True,
    help="Print the SQL instead of running it (FROM:TO in --revision for a range).",
)
@json_option
def migrate(url: str | None, revision: str, check: bool, offline: bool, as_json: bool) -> None:
    """Upgrade or downgrade the database schema.

    Runs a2sql's Alembic migrations (version table a2sql_alembic_version).
    With --sql it connects to nothing: it prints the SQL that brings an empty
    database of --url's engine to --revision, for review and to apply by hand
    (psql -f, sqlite3).
    """
    if offline:
        target = resolve_url(url).render_as_string(hide_password=False)
        click.echo(migrations.offline_sql(target, revision), nl=False)
        return
    out = Output(as_json=as_json)
    resolved = resolve_url(url)
    shown = shown_url(resolved)
    if check:
        _check(resolved, out, as_json)
        return
    migrations.check_revision(revision)  # before the engine, which makes a missing file
    engine = build_engine(resolved)
    try:
        before, after = migrations.migrate_database(engine, revision)
    finally:
        engine.dispose()
    if as_json:
        out.json({"url": shown, "before": before, "after": after})
    elif before == after:
        out.line(f"{shown}: already at {after or 'base'}")
    else:
        out.line(f"{shown}: {before or 'empty'} -> {after or 'base'}")


def _check(resolved: URL, out: Output, as_json: bool) -> None:
    """``migrate --check``: read the revision, write nothing (not even a new, empty file,
    the default .a2/dev.db included)."""
    shown = shown_url(resolved)
    head = migrations.head_revision()
    if missing_file(resolved):
        if as_json:
            out.json(
                {"url": shown, "exists": False, "revision": None, "head": head, "current": False}
            )
        raise no_such_file(resolved, code=NO_DATABASE)
    path = database_file(resolved)
    if path is not None:
        found = _read_only_revision(path)
    else:
        engine = build_engine(resolved)
        try:
            found = migrations.database_revision(engine)
        finally:
            engine.dispose()
    if as_json:
        document = {"url": shown, "exists": True, "revision": found, "head": head}
        out.json({**document, "current": found == head})
    else:
        out.fields([("database", shown), ("revision", f"{found or 'none'} (a2sql needs {head})")])
    if found == head:
        if not as_json:
            out.line("up to date", style="green")
        return
    if found is None or found in migrations.known_revisions():
        raise CommandFailed(
            f"behind: run `{command_line('a2sql', 'migrate', '--url', shown)}` to upgrade"
        )
    raise CommandFailed("unknown revision: written by a newer a2sql?")


def _read_only_revision(path: Path) -> str | None:
    """The revision of a SQLite file, read on a read-only connection: a store's
    connection would switch the file to WAL, which writes to it."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    engine = create_engine(
        "sqlite://", creator=lambda: sqlite3.connect(uri, uri=True), poolclass=NullPool
    )
    try:
        with engine.connect() as connection:
            return migrations.current_revision(connection)
    finally:
        engine.dispose()


@click.command()
@click.argument("revision")
@url_option
@json_option
def stamp(revision: str, url: str | None, as_json: bool) -> None:
    """Record a schema revision without migrating.

    Writes REVISION (e.g. 0002_dispatch_age, head or base) into a2sql's version
    table, a2sql_alembic_version, and runs nothing else. For a database whose
    a2sql tables exist but whose revision was recorded elsewhere, such as an
    application's own alembic_version.
    """
    out = Output(as_json=as_json)
    resolved = existing(url)
    shown = shown_url(resolved)
    engine = build_engine(resolved)
    try:
        before = migrations.stamp_database(engine, revision)
        after = migrations.database_revision(engine)
    finally:
        engine.dispose()
    if as_json:
        out.json({"url": shown, "before": before, "after": after})
    else:
        out.line(f"{shown}: stamped {after or 'base'} (was {before or 'none'}); nothing migrated")
