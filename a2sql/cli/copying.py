"""``a2sql copy``: move sessions from one database to another (e.g. SQLite to PostgreSQL)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import click
from sqlalchemy import URL, Engine

from a2sql import migrate as migrations
from a2sql.api import copying as transfer
from a2sql.api.store import Store
from a2sql.backends import database_file
from a2sql.cli.common import CANNOT_RUN, CommandFailed, existing, json_option, plural
from a2sql.cli.output import Output
from a2sql.core.errors import listed
from a2sql.core.escaping import command_line
from a2sql.core.urls import shown_url
from a2sql.execution.engines import build_engine


def _engine(resolved: URL) -> tuple[Engine, str]:
    return build_engine(resolved), shown_url(resolved)


def _same_database(source: URL, destination: URL) -> bool:
    """The same URL, or two spellings of one SQLite file (``x.db``, ``./x.db``, an
    absolute path, a symbolic or hard link)."""
    if source == destination:
        return True
    source_file, destination_file = database_file(source), database_file(destination)
    if source_file is None or destination_file is None:
        return False
    try:
        return os.path.samefile(source_file, destination_file)
    except OSError:  # one of them does not exist: ``existing`` has said so already
        return False


@contextmanager
def _stores(source_url: str, destination_url: str) -> Iterator[tuple[Store, Store, str, str]]:
    """Both stores, after checking that both databases are at this a2sql's revision."""
    from a2sql.api.opening import create_store

    head = migrations.head_revision()
    source_resolved = existing(source_url, "source")
    destination_resolved = existing(destination_url, "destination")
    if _same_database(source_resolved, destination_resolved):
        raise CommandFailed("the source and the destination are the same database", CANNOT_RUN)
    with ExitStack() as stack:
        opened = []
        for resolved, role in ((source_resolved, "source"), (destination_resolved, "destination")):
            engine, shown = _engine(resolved)
            stack.callback(engine.dispose)
            found = migrations.database_revision(engine)
            if found != head:
                hint = command_line("a2sql", "migrate", "--url", shown)
                raise CommandFailed(
                    f"{role} {shown} is at schema revision {found or 'none'}, and copy needs "
                    f"both databases at {head}: run `{hint}` first",
                    CANNOT_RUN,
                )
            opened.append((stack.enter_context(create_store(engine, migrate=False)), shown))
        (source, source_shown), (destination, destination_shown) = opened
        yield source, destination, source_shown, destination_shown


@click.command()
@click.argument("source_url", metavar="SRC_URL")
@click.argument("destination_url", metavar="DST_URL")
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option(
    "--skip-existing",
    is_flag=True,
    help="Leave sessions the destination already has (otherwise they stop the copy).",
)
@json_option
def copy(
    source_url: str, destination_url: str, prefix: str, skip_existing: bool, as_json: bool
) -> None:
    """Copy sessions from one database to another.

    Copies the sessions of SRC_URL to DST_URL (e.g. the SQLite dev file to
    PostgreSQL): events with every processing column and snapshots, keeping
    ids, indexes and times; not presence.

    Both databases must exist at the same schema revision (`a2sql migrate
    --url DST_URL` makes a new destination ready). Each session is copied
    in one transaction, so an interrupted copy can simply be run again: the
    sessions it finished are found as the source has them and passed over.
    """
    if click.get_current_context().find_root().params.get("url") is not None:
        raise click.UsageError("copy takes its two URLs as arguments, not --url")
    out = Output(as_json=as_json)
    with _stores(source_url, destination_url) as (source, destination, src_shown, dst_shown):
        out.note(f"from {src_shown}")
        out.note(f"to   {dst_shown}")
        summaries = list(transfer.source_sessions(source, prefix))
        plan = transfer.plan(source, destination, summaries)
        if plan.different and not skip_existing:
            raise CommandFailed(
                f"the destination has {plural(len(plan.different), 'session')} that "
                f"{'differs' if len(plan.different) == 1 else 'differ'} from the source "
                f"({listed(plan.different)}): nothing copied; "
                "pass --skip-existing to copy the others",
                CANNOT_RUN,
            )
        with out.progress("copying sessions", len(plan.to_copy)) as advance:
            try:
                sessions, events, snapshots = transfer.copy_sessions(
                    source, destination, plan.to_copy, on_session=lambda _sid, _done: advance()
                )
            except transfer.CopyConflict as error:
                raise CommandFailed(str(error), CANNOT_RUN) from None
        wrong = transfer.mismatches(source, destination, plan.to_copy + plan.present)
    if wrong:
        raise CommandFailed(
            f"after the copy, {plural(len(wrong), 'session')} have other counts at the "
            f"destination (first: {wrong[0]!r}): written to during the copy? run it again",
            CANNOT_RUN,
        )
    report = transfer.CopyReport(
        copied=sessions,
        events=events,
        snapshots=snapshots,
        present=len(plan.present),
        skipped=len(plan.different),
    )
    if as_json:
        out.json({"source": src_shown, "destination": dst_shown, **_fields(report)})
        return
    out.line(
        f"copied {plural(sessions, 'session')} ({plural(events, 'event')}, "
        f"{plural(snapshots, 'snapshot')}); {report.present} already there, "
        f"{report.skipped} skipped; counts verified"
    )


def _fields(report: transfer.CopyReport) -> dict[str, object]:
    return {
        "copied": report.copied,
        "events": report.events,
        "snapshots": report.snapshots,
        "present": report.present,
        "skipped": report.skipped,
    }
