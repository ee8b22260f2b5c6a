"""Reading commands: status, sessions, session, events, tail, dead-letters."""

from __future__ import annotations

from datetime import datetime

import click

from a2sql import migrate as migrations
from a2sql.api.store import Store
from a2sql.cli.common import (
    CommandFailed,
    Whole,
    json_option,
    listen_option,
    opened,
    shown,
    url_option,
)
from a2sql.cli.output import Output, age, iso
from a2sql.cli.states import STATE_STYLES, event_state, first_line, held_state, scheduled_at
from a2sql.core.escaping import command_line
from a2sql.core.records import SessionSummary, StoredEvent


@click.command()
@url_option
@json_option
def status(url: str | None, as_json: bool) -> None:
    """The database at a glance.

    URL, engine, schema revision, sessions, events, pending (of which claimed,
    waiting for a signal, scheduled for later), dead letters and the age of the
    oldest pending event.
    """
    out = Output(as_json=as_json)
    with opened(url) as store:
        totals = store.inspect.totals()
        now = store.clock.now()
        revision = migrations.database_revision(store.engine)
        document = {
            "url": shown(url),
            "engine": store.engine.dialect.name,
            "revision": revision,
            "head": migrations.head_revision(),
            "sessions": totals.sessions,
            "events": totals.events,
            "pending": totals.pending,
            "claimed": totals.claimed,
            "waiting": totals.waiting,
            "scheduled": totals.scheduled,
            "dead_letters": totals.dead_letters,
            "oldest_pending_at": totals.oldest_pending_at,
            "oldest_pending_age_s": (
                None
                if totals.oldest_pending_at is None
                else round((now - totals.oldest_pending_at).total_seconds(), 3)
            ),
        }
    if as_json:
        out.json(document)
        return
    oldest = totals.oldest_pending_at
    out.fields(
        [
            ("url", document["url"]),
            ("engine", document["engine"]),
            ("revision", f"{revision} (newest this a2sql knows: {document['head']})"),
            ("sessions", totals.sessions),
            ("events", totals.events),
            ("pending", totals.pending),
            ("claimed", totals.claimed),
            ("waiting", totals.waiting),
            ("scheduled", totals.scheduled),
            ("dead letters", totals.dead_letters),
            (
                "oldest pending",
                "-" if oldest is None else f"{iso(oldest)} ({age(oldest, now)} ago)",
            ),
        ]
    )


def _summary_row(summary: SessionSummary) -> list[object]:
    return [
        summary.session_id,
        summary.event_count,
        summary.pending_count,
        summary.claimed_count,
        summary.failed_count,
        summary.blocked_count,
        iso(summary.updated_at),
    ]


_SUMMARY_COLUMNS = ["session", "events", "pending", "claimed", "dead", "blocked", "updated"]


def _summary_style(summary: SessionSummary) -> str | None:
    if summary.failed_count:
        return "red"
    if summary.pending_count:
        return "yellow"
    return None


@click.command()
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option("--after", default=None, metavar="ID", help="Start after this session id.")
@click.option(
    "--limit", default=50, show_default=True, type=Whole(1), help="Show at most this many."
)
@url_option
@json_option
def sessions(prefix: str, after: str | None, limit: int, url: str | None, as_json: bool) -> None:
    """Sessions by id, with their counts."""
    out = Output(as_json=as_json)
    found: list[SessionSummary] = []
    more = False
    with opened(url) as store:
        out.database(shown(url))
        cursor = after
        while len(found) < limit:
            page = store.inspect.list_sessions(
                prefix=prefix, cursor=cursor, limit=min(1000, limit - len(found))
            )
            found += page.sessions
            cursor = page.cursor
            if cursor is None:
                break
        more = cursor is not None
    if as_json:
        out.json({"url": shown(url), "sessions": found, "more": more})
        return
    out.table(
        _SUMMARY_COLUMNS,
        [_summary_row(s) for s in found],
        styles=[_summary_style(s) for s in found],
        empty="no sessions",
    )
    if more:
        last = found[-1].session_id
        out.note(f"(more after {last}: pass {command_line('--after', last)})")


@click.command()
@click.argument("session_id")
@url_option
@json_option
def session(session_id: str, url: str | None, as_json: bool) -> None:
    """One session's counts, snapshots, and waiting and scheduled events.

    SESSION_ID is the exact id, not a prefix. Its first events waiting for a
    signal (which, until when) or scheduled for later (at when) are listed,
    by index; `a2sql events` shows them all.
    """
    out = Output(as_json=as_json)
    with opened(url) as store:
        out.database(shown(url))
        # Read first: what the list finds scheduled (due after the list's own time) is
        # due after this time too, so each event it lists has its state here.
        now = store.clock.now()
        summary = store.inspect.session(session_id)
        if summary is None:
            raise CommandFailed(f"no session {session_id!r} (it has no events)")
        snapshots = store.inspect.list_snapshots(session_id)
        held = _held(store, summary, now)
    more = summary.waiting_count + summary.scheduled_count - len(held)
    if as_json:
        out.json(
            {
                "url": shown(url),
                "session": summary,
                "snapshots": snapshots,
                "waiting_and_scheduled": [_event_document(e, s, now) for e, s in held],
            }
        )
        return
    oldest = summary.oldest_pending_at
    out.fields(
        [
            ("session", summary.session_id),
            ("events", summary.event_count),
            ("pending", summary.pending_count),
            ("claimed", summary.claimed_count),
            ("waiting", summary.waiting_count),
            ("scheduled", summary.scheduled_count),
            ("dead letters", summary.failed_count),
            ("blocked", summary.blocked_count),
            ("attempts", summary.attempt_count),
            ("failures", summary.failure_count),
            ("first event", iso(summary.first_event_at)),
            ("updated", iso(summary.updated_at)),
            (
                "oldest pending",
                "-" if oldest is None else f"{iso(oldest)} ({age(oldest, now)} ago)",
            ),
        ]
    )
    out.line("")
    out.table(
        ["snapshot", "index", "updated"],
        [[s.reducer_name, s.index, iso(s.updated_at)] for s in snapshots],
        empty="no snapshots",
    )
    if not held:
        return
    out.line("")
    out.table(
        ["index", "type", "lane", "state", "detail"],
        [[e.index, e.type, e.lane or "-", state, detail] for e, (state, detail) in held],
        styles=[STATE_STYLES[state] for _, (state, _) in held],
    )
    if more > 0:
        flag = () if url is None else ("--url", shown(url))
        after = command_line("a2sql", "events", session_id, "--after", held[-1][0].index, *flag)
        out.note(f"({more} more waiting or scheduled: {after})")


HELD_SHOWN = 20
"""How many waiting and scheduled events ``a2sql session`` lists."""


def _held(
    store: Store, summary: SessionSummary, now: datetime
) -> list[tuple[StoredEvent, tuple[str, str]]]:
    """The session's first waiting and scheduled events, with their states; no read when
    its counts have none."""
    if not summary.waiting_count and not summary.scheduled_count:
        return []
    found = store.inspect.list_waiting_and_scheduled(summary.session_id, limit=HELD_SHOWN)
    return [(e, state) for e in found if (state := held_state(e, now)) is not None]


def _event_document(event: StoredEvent, state: tuple[str, str], now: datetime) -> dict[str, object]:
    """The event's fields, its state and detail, and for scripts when a waiting event times
    out (``wait_until``: null without a timeout) and a scheduled one runs (``scheduled_at``)."""
    from a2sql.cli.output import jsonable

    document: dict[str, object] = jsonable(event)
    document["state"], document["detail"] = state
    document["wait_until"] = jsonable(event.wait_until)
    document["scheduled_at"] = jsonable(scheduled_at(event, now))
    return document


def _payload(event: StoredEvent) -> str:
    import json

    text = json.dumps(event.payload, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


@click.command()
@click.argument("session_id")
@click.option(
    "--after",
    default=0,
    show_default=True,
    type=Whole(0, what="an event index"),
    help="Show the events after this index.",
)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=Whole(1, 1000),
    help="Show at most this many.",
)
@url_option
@json_option
def events(session_id: str, after: int, limit: int, url: str | None, as_json: bool) -> None:
    """A session's events, each with its state.

    pending (waits for its lane), ready, claimed (by whom, until when), waiting
    (for which signal, until when), scheduled (claimable at a time), retrying
    (failed, claimable again at a time), processed (by which attempt), settled
    (appended processed, or a signal), skipped (or cancelled), dead-lettered,
    blocked (behind a dead letter). A session with no events does not exist:
    exit 1, as for `a2sql session`.
    """
    out = Output(as_json=as_json)
    with opened(url) as store:
        out.database(shown(url))
        page = store.inspect.read_events(session_id, after_index=after, limit=limit)
        if page.through_index == 0:
            raise CommandFailed(f"no session {session_id!r} (it has no events)")
        now = store.clock.now()
    states = [event_state(event, page, now) for event in page.events]
    if as_json:
        out.json(
            {
                "url": shown(url),
                "session_id": session_id,
                "through_index": page.through_index,
                "events": [
                    _event_document(e, s, now) for e, s in zip(page.events, states, strict=True)
                ],
            }
        )
        return
    out.table(
        ["index", "type", "lane", "state", "attempt", "detail"],
        [
            [e.index, e.type, e.lane or "-", state, e.attempt_count, detail]
            for e, (state, detail) in zip(page.events, states, strict=True)
        ],
        styles=[STATE_STYLES[state] for state, _ in states],
        empty=f"no events in {session_id!r} after index {after}",
    )
    last = page.events[-1].index if page.events else after
    if last < page.through_index:
        out.note(f"(more after index {last}: pass --after {last})")


@click.command()
@click.argument("session_id")
@click.option(
    "--from",
    "start",
    default=0,
    show_default=True,
    type=Whole(0, what="an event index"),
    help="Start after this index (0: from the first event).",
)
@url_option
@listen_option
@json_option
def tail(session_id: str, start: int, url: str | None, listen: str | None, as_json: bool) -> None:
    """Follow a session's events until Ctrl-C.

    Prints the events after --from, then each new one as it is appended.
    """
    out = Output(as_json=as_json)
    with opened(url, listen) as store:
        out.database(shown(url))
        if store.inspect.session(session_id) is None:
            out.note(f"no events in {session_id!r} yet: waiting for them (Ctrl-C stops)")
        stream = store.stream(session_id, start_after=start)
        try:
            for event in stream:
                if as_json:
                    out.json(event)
                else:
                    out.line(
                        f"{iso(event.created_at)}  #{event.index}  {event.type}"
                        f"{'  [' + event.lane + ']' if event.lane else ''}  {_payload(event)}"
                    )
        except KeyboardInterrupt:
            pass
        finally:
            stream.close()


def _all_dead_letters(
    store: Store, prefix: str, limit: int
) -> tuple[list[StoredEvent], list[int], bool]:
    found: list[StoredEvent] = []
    blocking: list[int] = []
    cursor = None
    while len(found) < limit:
        page = store.inspect.list_dead_letters(
            prefix=prefix, cursor=cursor, limit=min(1000, limit - len(found))
        )
        found += page.events
        blocking += page.blocking
        cursor = page.cursor
        if cursor is None:
            break
    return found, blocking, cursor is not None


@click.command("dead-letters")
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=Whole(1),
    help="Show at most this many.",
)
@url_option
@json_option
def dead_letters(prefix: str, limit: int, url: str | None, as_json: bool) -> None:
    """Dead-lettered events and what each one blocks.

    By session then index; blocks: the pending events of its lane waiting behind it.
    """
    out = Output(as_json=as_json)
    with opened(url) as store:
        out.database(shown(url))
        found, blocked, more = _all_dead_letters(store, prefix, limit)
        now = store.clock.now()
    if as_json:
        out.json(
            {
                "url": shown(url),
                "dead_letters": [
                    {**_event_document(e, ("dead-lettered", ""), now), "blocks": blocked[i]}
                    for i, e in enumerate(found)
                ],
                "more": more,
            }
        )
        return
    out.table(
        ["session", "index", "type", "lane", "failures", "blocks", "last error"],
        [
            [
                e.session_id,
                e.index,
                e.type,
                e.lane or "-",
                e.failure_count,
                blocked[i],
                first_line(e.last_error),
            ]
            for i, e in enumerate(found)
        ],
        empty="no dead letters",
    )
    if found:
        first = found[0]
        flag = () if url is None else ("--url", shown(url))
        retry = command_line("a2sql", "retry", first.session_id, first.index, *flag)
        skip = command_line("a2sql", "skip", first.session_id, first.index, *flag, "--reason")
        out.note(f"retry one: {retry}   skip one: {skip} TEXT")
    if more:
        out.note(f"(more than {limit}: pass a larger --limit)")
