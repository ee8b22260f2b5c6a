"""``a2sql migrate``: bring the schema to a revision, or check it."""

from __future__ import annotations

import click

from a2sql import migrate as migrations
from a2sql.cli.common import CommandFailed, existing, json_option, url_option
from a2sql.cli.output import Output
from a2sql.config import build_engine, resolve_url


@click.command()
@url_option
@click.option("--revision", default="head", show_default=True, help="Revision to move to.")
@click.option("--check", is_flag=True, help="Only report; exit 1 if not at the newest revision.")
@json_option
def migrate(url: str | None, revision: str, check: bool, as_json: bool) -> None:
    """Upgrade or downgrade the database schema.

    Runs a2sql's Alembic migrations (version table a2sql_alembic_version).
    """
    out = Output(as_json=as_json)
    # A check only reads: it must not leave a new, empty file behind.
    resolved = existing(url) if check else resolve_url(url)
    shown = resolved.render_as_string(hide_password=True)
    engine = build_engine(resolved)
    try:
        head = migrations.head_revision()
        if check:
            found = migrations.database_revision(engine)
            if as_json:
                out.json({"url": shown, "revision": found, "head": head, "current": found == head})
            else:
                out.fields(
                    [("database", shown), ("revision", f"{found or 'none'} (a2sql needs {head})")]
                )
            if found == head:
                if not as_json:
                    out.line("up to date", style="green")
                return
            if found is None or found in migrations.known_revisions():
                raise CommandFailed(f"behind: run `a2sql migrate --url {shown}` to upgrade")
            raise CommandFailed("unknown revision: written by a newer a2sql?")
        before = migrations.database_revision(engine)
        after = migrations.move_to(engine, revision)
    finally:
        engine.dispose()
    if as_json:
        out.json({"url": shown, "before": before, "after": after})
    elif before == after:
        out.line(f"{shown}: already at {after}")
    else:
        out.line(f"{shown}: {before or 'empty'} -> {after}")
