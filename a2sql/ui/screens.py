"""The UI's pages: overview, sessions, a session's timeline, dead letters, in flight.

Each page reads through the store's public inspection calls, every one bounded
(a page of sessions or events, counts that stop at a bound), so a page costs
the same on a database of a thousand events or of a billion.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from starlette.requests import Request
from starlette.responses import Response

from a2sql.core.errors import invalid
from a2sql.core.records import EventPage, SnapshotInfo, StoredEvent
from a2sql.ui.exposition import metrics_response
from a2sql.ui.rendering import render, settings_of

# Events on one page of a timeline, sessions or dead letters on one page of a list.
TIMELINE_PAGE = 100
LIST_PAGE = 50
IN_FLIGHT_LIMIT = 200


async def overview(request: Request) -> Response:
    """The work of the whole store (or under ``?prefix=``) and the last hour's appends."""
    settings = settings_of(request)
    store = settings.calls.store
    prefix = request.query_params.get("prefix", "")
    view = await settings.calls(store.inspect.overview, prefix=prefix, bound=settings.bound)
    if not prefix:
        settings.throughput.record(view.at, view.appended_total)
    oldest = None if view.oldest_ready_at is None else view.at - view.oldest_ready_at
    return render(
        request,
        "overview.html",
        view=view,
        prefix=prefix,
        oldest_ready_age=oldest,
        chart=settings.throughput.chart(view.at),
    )


async def sessions(request: Request) -> Response:
    """A page of sessions by id, under a prefix, in a state."""
    settings = settings_of(request)
    store = settings.calls.store
    prefix = request.query_params.get("prefix", "")
    state = request.query_params.get("state") or None
    cursor = request.query_params.get("cursor") or None
    page = await settings.calls(
        store.inspect.list_sessions, prefix=prefix, cursor=cursor, limit=LIST_PAGE, state=state
    )
    return render(
        request,
        "sessions.html",
        page=page,
        prefix=prefix,
        state=state or "",
        cursor=cursor,
    )


@dataclass(frozen=True, slots=True)
class Shown:
    """An event as the timeline shows it: its state's name and a line saying it."""

    event: StoredEvent
    state: str
    detail: str
    children: list[int]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def describe(event: StoredEvent, now: datetime, page: EventPage | None = None) -> tuple[str, str]:
    """The state of ``event`` at ``now`` (a CSS class and a badge) and a line on it;
    ``page``: the page it was read in, which says whether its lane waits."""
    if event.processed_at is not None:
        if event.processed_by_attempt is not None:
            return "completed", f"completed by attempt {event.processed_by_attempt}"
        if event.is_signal:
            return "signal", "signal"
        if event.last_error is not None:
            # skip_event and cancel_session: processed without an attempt, the
            # reason kept in last_error (the CLI calls both skipped too).
            return "skipped", f"skipped without an attempt: {event.last_error}"
        return "settled", "settled when appended"
    if event.failed_at is not None:
        failures = _plural(event.failure_count, "failure")
        return "dead", f"dead letter after {failures}: {event.last_error}"
    expires = event.claim_expires_at
    if page is not None and event.index in page.blocked:
        return "blocked", "blocked: its lane waits on a dead letter"
    if event.claim_holder is not None and expires is not None:
        if expires > now:
            return "claimed", f"claimed by {event.claim_holder}, attempt {event.attempt_count}"
        return "ready", (
            f"ready to claim again: the claim of {event.claim_holder} expired at "
            f"{expires:%Y-%m-%d %H:%M:%S}Z"
        )
    if event.wake_on is not None and event.first_claimed_at is None and (expires or now) > now:
        until = event.wait_until
        return "waiting", f"waiting for {event.wake_on!r}" + (
            "" if until is None else f" until {until:%Y-%m-%d %H:%M:%S}Z"
        )
    if expires is not None and expires > now:
        if event.first_claimed_at is None:
            return "scheduled", f"scheduled for {expires:%Y-%m-%d %H:%M:%S}Z"
        return "retrying", f"retrying at {expires:%Y-%m-%d %H:%M:%S}Z"
    if page is not None and event.index in page.waiting:
        return "queued", "behind an earlier event of its lane"
    return "ready", "ready to claim"


async def timeline(request: Request) -> Response:
    """One session's events down the page, with their attempts, waits and children,
    its snapshots and presence; new events arrive live on the last page."""
    settings = settings_of(request)
    store = settings.calls.store
    session_id = request.query_params.get("id", "")
    summary = await settings.calls(store.inspect.session, session_id)
    if summary is None:
        return render(request, "missing.html", status_code=404, what=f"No session {session_id!r}.")
    last = summary.event_count
    latest = max(0, last - TIMELINE_PAGE)
    # Past the end: the last page, not an empty one.
    after = min(whole_number(request.query_params.get("after"), "after", latest), latest)
    page = await settings.calls(
        store.inspect.read_events, session_id, after_index=after, limit=TIMELINE_PAGE
    )
    snapshots = await settings.calls(store.inspect.list_snapshots, session_id)
    presence = await settings.calls(store.presence.read, session_id)
    now = datetime.now(tz=summary.updated_at.tzinfo)
    children: dict[int, list[int]] = defaultdict(list)
    for event in page.events:
        if event.cause is not None:
            children[event.cause.index].append(event.index)
    shown = [Shown(e, *describe(e, now, page), children[e.index]) for e in page.events]
    end = page.events[-1].index if page.events else after
    return render(
        request,
        "timeline.html",
        summary=summary,
        shown=shown,
        after=after,
        end=end,
        last=page.through_index,
        earlier=max(0, after - TIMELINE_PAGE) if after > 0 else None,
        later=end if end < page.through_index else None,
        live=end >= page.through_index,
        snapshots=_by_index(snapshots),
        snapshot_list=snapshots,
        presence=presence,
        now=now,
    )


async def dead_letters(request: Request) -> Response:
    """Dead letters by session, each with how many events of its lane it blocks."""
    settings = settings_of(request)
    store = settings.calls.store
    prefix = request.query_params.get("prefix", "")
    cursor = request.query_params.get("cursor") or None
    page = await settings.calls(
        store.inspect.list_dead_letters, prefix=prefix, cursor=cursor, limit=LIST_PAGE
    )
    blocking = page.blocking or [0] * len(page.events)
    return render(
        request,
        "dead_letters.html",
        rows=list(zip(page.events, blocking, strict=True)),
        cursor=page.cursor,
        prefix=prefix,
    )


async def in_flight(request: Request) -> Response:
    """Live claims (those held long marked) and claims expired but not taken again."""
    settings = settings_of(request)
    store = settings.calls.store
    view = await settings.calls(store.inspect.in_flight, limit=IN_FLIGHT_LIMIT)
    held = sorted(view.live, key=lambda e: e.last_claimed_at or view.at)
    return render(
        request,
        "in_flight.html",
        view=view,
        live=view.live,
        longest=[e for e in held if _held(e, view.at) >= settings.long_claim][:20],
        long_claim=settings.long_claim,
        held=_held,
        limit=IN_FLIGHT_LIMIT,
    )


def _by_index(snapshots: list[SnapshotInfo]) -> dict[int, list[SnapshotInfo]]:
    marks: dict[int, list[SnapshotInfo]] = defaultdict(list)
    for snapshot in snapshots:
        marks[snapshot.index].append(snapshot)
    return marks


def _held(event: StoredEvent, now: datetime) -> timedelta:
    return now - (event.last_claimed_at or now)


async def metrics(request: Request) -> Response:
    """The store's gauges as Prometheus text (a2sql.metrics)."""
    return await metrics_response(request)


def whole_number(text: str | None, name: str, default: int) -> int:
    """A query parameter that is a whole number from 0, ``default`` when not given."""
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise invalid(name, f"must be a number, not {text!r}") from None
    if value < 0:
        raise invalid(name, f"must be 0 or more, not {value}")
    return value
