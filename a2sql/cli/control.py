"""Time and control commands: signal a session's waiting events, cancel a session's work."""

from __future__ import annotations

import json

import click

from a2sql.cli.common import (
    CommandFailed,
    confirm,
    json_option,
    opened,
    plural,
    refuse_unasked,
    shown,
    url_option,
)
from a2sql.cli.output import Output
from a2sql.cli.repairs import vars_of
from a2sql.core.records import JSON, SessionSummary, SignalResult

YES_HELP = "Cancel without asking (asked only on a terminal; needed elsewhere)."


def _json_payload(_ctx: click.Context, _param: click.Parameter, value: str | None) -> JSON:
    """``--payload`` parsed; text that is not JSON is a usage mistake, in one line."""
    if value is None:
        return None
    try:
        payload: JSON = json.loads(value)
    except ValueError as error:
        # json's messages are one line: "Expecting value: line 1 column 1 (char 0)".
        raise click.BadParameter(f"not JSON ({error})") from None
    return payload


def _said(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """``--reason`` with something in it, refused before anything is asked or opened."""
    if not value.strip():
        raise click.BadParameter("must say why (it is kept in each event's last_error)")
    return value


@click.command()
@click.argument("session_id")
@click.argument("name")
@click.option(
    "--payload",
    metavar="JSON",
    default=None,
    callback=_json_payload,
    help="The signal's payload, a JSON value (default: null).",
)
@click.option(
    "--id",
    "event_id",
    metavar="ID",
    default=None,
    help="The signal's event id: sent again, it appends and wakes nothing (default: a new one).",
)
@url_option
@json_option
def signal(
    session_id: str,
    name: str,
    payload: JSON,
    event_id: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Send the signal NAME to a session: wake its events waiting for it.

    Appends a settled event of type NAME (the signal) and makes the session's
    events waiting for NAME claimable at once; prints the signal's index and
    the indexes it woke. The session must exist (exit 1 otherwise).
    """
    out = Output(as_json=as_json)
    with opened(url) as store:
        out.database(shown(url))
        # A signal would start a session of its own: a mistyped id must not.
        if store.inspect.read_events(session_id, limit=1).through_index == 0:
            raise CommandFailed(f"no session {session_id!r} (it has no events): nothing signalled")
        result = store.signal(session_id, name, payload, id=event_id)
    if as_json:
        out.json({"url": shown(url), "session_id": session_id, "name": name, **vars_of(result)})
        return
    out.line(_signalled(session_id, name, result))


def _signalled(session_id: str, name: str, result: SignalResult) -> str:
    event = result.event
    if result.replayed:
        return (
            f"signal {event.id} is already {session_id} #{event.index}: "
            "nothing appended, nothing woken (a replay)"
        )
    woke = " ".join(f"#{index}" for index in result.woken) or "nothing (no event waits for it)"
    appended = f"appended #{event.index} (id {event.id})"
    return f"signalled {session_id} with {name}: {appended}, woke {woke}"


@click.command()
@click.argument("session_id")
@click.option(
    "--reason", required=True, callback=_said, help="Why, kept in each event's last_error."
)
@click.option("--yes", is_flag=True, help=YES_HELP)
@url_option
@json_option
def cancel(session_id: str, reason: str, yes: bool, url: str | None, as_json: bool) -> None:
    """Stop a session's work: mark every unprocessed event processed.

    Ready, claimed, waiting, scheduled and dead-lettered events alike, with the
    reason in their last_error; a worker's live attempt is stopped at its next
    renewal, and its completion is superseded. Events appended afterwards are
    new work. On a terminal it shows what it will cancel and asks; elsewhere it
    needs --yes.
    """
    refuse_unasked(yes, "cancel", verb="cancel", dry_run=False)
    out = Output(as_json=as_json)
    cancelled = 0
    with opened(url) as store:
        out.database(shown(url))
        summary = store.inspect.session(session_id)
        unprocessed = 0 if summary is None else summary.pending_count + summary.failed_count
        if summary is not None and unprocessed:
            if not yes:
                confirm(_question(summary, unprocessed), declined="nothing cancelled")
            cancelled = store.cancel_session(session_id, reason=reason).cancelled
    if as_json:
        out.json(
            {"url": shown(url), "session_id": session_id, "reason": reason, "cancelled": cancelled}
        )
    if summary is None:
        raise CommandFailed(f"no session {session_id!r}: nothing cancelled")
    if not cancelled:
        raise CommandFailed(f"session {session_id!r} has no unprocessed event: nothing cancelled")
    if not as_json:
        out.line(
            f"cancelled {session_id}: {plural(cancelled, 'event')} marked processed ({reason})"
        )


def _question(summary: SessionSummary, unprocessed: int) -> str:
    return (
        f"cancel session {summary.session_id}: mark {plural(unprocessed, 'unprocessed event')} "
        f"processed ({summary.pending_count} pending: {summary.claimed_count} claimed, "
        f"{summary.waiting_count} waiting, {summary.scheduled_count} scheduled; "
        f"{plural(summary.failed_count, 'dead letter')})?"
    )
