"""Repairing and retention commands: retry, skip, delete, prune."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import click

from a2sql.api.store import Store
from a2sql.cli.common import (
    EVENT_INDEX,
    Age,
    CommandFailed,
    confirm,
    json_option,
    opened,
    plural,
    refuse_unasked,
    shown,
    url_option,
)
from a2sql.cli.output import Output, iso
from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.records import PruneResult, RetryResult, SkipResult

YES_HELP = "Delete without asking (asked only on a terminal; needed elsewhere)."


@click.command()
@click.argument("session_id")
@click.argument("index", type=EVENT_INDEX)
@url_option
@json_option
def retry(session_id: str, index: int, url: str | None, as_json: bool) -> None:
    """Requeue a dead letter as a new attempt.

    The event is claimable at once and its failure count starts again at 0;
    when it completes, the events behind it in its lane move on.
    """
    _repair(
        url,
        as_json,
        lambda store: store.retry_dead_letter(session_id, index=index),
        (session_id, index),
        done="requeued",
        said=lambda event: f"requeued {event}: the next claim takes it as a new attempt",
        refused="is not a dead letter",
    )


@click.command()
@click.argument("session_id")
@click.argument("index", type=EVENT_INDEX)
@click.option("--reason", required=True, help="Why, kept in the event's last_error.")
@url_option
@json_option
def skip(session_id: str, index: int, reason: str, url: str | None, as_json: bool) -> None:
    """Mark an event processed without running it.

    The reason is kept in the event's last_error; the next event of its lane
    becomes claimable, and a late completion of it is superseded.
    """
    _repair(
        url,
        as_json,
        lambda store: store.skip_event(session_id, index=index, reason=reason),
        (session_id, index),
        done="skipped",
        said=lambda event: f"skipped {event}: {reason}",
        refused="is already processed",
    )


@click.command()
@click.argument("session_id")
@click.option("--yes", is_flag=True, help=YES_HELP)
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@url_option
@json_option
def delete(session_id: str, yes: bool, dry_run: bool, url: str | None, as_json: bool) -> None:
    """Delete a session's events and snapshots.

    Its event ids may then be appended again, and its indexes start over at 1.
    On a terminal it shows what it will delete and asks; elsewhere it needs
    --yes. Touches a2sql's tables only.
    """
    if not dry_run:
        refuse_unasked(yes, "delete")
    out = Output(as_json=as_json)
    with opened(url) as store:
        out.database(shown(url))
        summary = store.inspect.session(session_id)
        if summary is None:
            if as_json:
                out.json({"url": shown(url), "session_id": session_id, "events": 0, "snapshots": 0})
            raise CommandFailed(f"no session {session_id!r}: nothing deleted")
        snapshots = len(store.inspect.list_snapshots(session_id))
        what = (
            f"session {session_id}: {plural(summary.event_count, 'event')} "
            f"({summary.pending_count} pending, {summary.claimed_count} claimed, "
            f"{plural(summary.failed_count, 'dead letter')}), {plural(snapshots, 'snapshot')}"
        )
        if dry_run:
            if as_json:
                out.json(
                    {
                        "url": shown(url),
                        "session_id": session_id,
                        "dry_run": True,
                        "events": summary.event_count,
                        "snapshots": snapshots,
                    }
                )
            else:
                out.line(f"would delete {what}")
            return
        if not yes:
            confirm(f"delete {what}?")
        result = store.delete_session(session_id)
    if as_json:
        out.json({"url": shown(url), "session_id": session_id, **vars_of(result)})
    if result.events == 0 and result.snapshots == 0:
        raise CommandFailed(f"no session {session_id!r}: nothing deleted")
    if not as_json:
        out.line(
            f"deleted {session_id}: {plural(result.events, 'event')}, "
            f"{plural(result.snapshots, 'snapshot')}"
        )


@click.command()
@click.option(
    "--older-than",
    "older_than",
    type=Age(),
    required=True,
    help="Settled for at least this long, e.g. 30d, 12h.",
)
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@click.option("--yes", is_flag=True, help=YES_HELP)
@url_option
@json_option
def prune(
    older_than: timedelta, prefix: str, dry_run: bool, yes: bool, url: str | None, as_json: bool
) -> None:
    """Delete settled sessions older than --older-than.

    Settled: no unprocessed event (a dead letter counts as unprocessed); older:
    nothing in it happened for that long. Each session is deleted in a short
    transaction of its own. On a terminal it shows what it will delete and
    asks; elsewhere it needs --yes. Touches a2sql's tables only.
    """
    if not dry_run:
        refuse_unasked(yes, "prune")
    out = Output(as_json=as_json)
    with opened(url) as store:
        out.database(shown(url))
        cut = store.clock.now() - older_than
        planned = store.inspect.prunable(settled_before=cut, prefix=prefix)
        if dry_run or planned.sessions == 0:
            done = planned
        else:
            if not yes:
                confirm(
                    f"delete {plural(planned.sessions, 'session')} "
                    f"({plural(planned.events, 'event')}, {plural(planned.snapshots, 'snapshot')})"
                    f" settled before {iso(cut)}{f' under {prefix!r}' if prefix else ''}?"
                )
            sessions = events = snapshots = 0
            with out.progress("pruning", planned.sessions) as advance:
                while (step := store.prune(settled_before=cut, prefix=prefix)).sessions:
                    sessions += step.sessions
                    events += step.events
                    snapshots += step.snapshots
                    advance(step.sessions)
            done = PruneResult(sessions=sessions, events=events, snapshots=snapshots)
    if as_json:
        out.json({"url": shown(url), "settled_before": cut, "dry_run": dry_run, **vars_of(done)})
        return
    verb = "would delete" if dry_run else "deleted"
    out.line(
        f"{verb} {plural(done.sessions, 'session')} ({plural(done.events, 'event')}, "
        f"{plural(done.snapshots, 'snapshot')}) settled before {iso(cut)}"
    )


def _repair(
    url: str | None,
    as_json: bool,
    call: Callable[[Store], RetryResult | SkipResult],
    at: tuple[str, int],
    *,
    done: str,
    said: Callable[[str], str],
    refused: str,
) -> None:
    """Run one repair; an outcome other than ``done``, or no such event, changed
    nothing: exit 1 saying so."""
    out = Output(as_json=as_json)
    session_id, index = at
    event = f"{session_id} #{index}"
    with opened(url) as store:
        out.database(shown(url))
        try:
            result = call(store)
        except A2Error as error:
            if error.code != ErrorCode.EVENT_NOT_FOUND:
                raise
            if store.inspect.session(session_id) is None:
                raise CommandFailed(f"no session {session_id!r}: nothing changed") from None
            raise CommandFailed(
                f"no event at index {index} in session {session_id!r}: nothing changed"
            ) from None
    if as_json:
        out.json({"url": shown(url), "session_id": session_id, "index": index, **vars_of(result)})
    if result.outcome != done:
        raise CommandFailed(f"{event} {refused}: nothing changed")
    if not as_json:
        out.line(said(event))


def vars_of(record: object) -> dict[str, object]:
    from a2sql.cli.output import jsonable

    value = jsonable(record)
    assert isinstance(value, dict)
    return value
