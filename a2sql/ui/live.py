"""A timeline kept current while it is open: server-sent events with each new event's row
and each row whose state changed (claimed, completed, failed, woken...).

The page's rows are read again whenever the store says something may have
happened (``store.watch``: at once for this process's commits, on PostgreSQL
for every process's), at most every ``SPACING_S`` seconds, and at least every
``REFRESH_S`` seconds, since a claim or a failure wakes no one. Each read is the
page's last ``WINDOW`` events, by the primary key, so an open page costs the same
however long its session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from a2sql.core.errors import invalid
from a2sql.core.records import StoredEvent
from a2sql.ui.rendering import fragment, render, settings_of
from a2sql.ui.screens import TIMELINE_PAGE, Shown, describe, whole_number

# How often an open timeline reads its rows when nothing woke it, and how many of
# its last rows it keeps current.
REFRESH_S = 2.0
# The least time between two reads of one page: a store committing all the time
# wakes it on every commit, and the commits of that time are read together.
SPACING_S = 0.25
WINDOW = TIMELINE_PAGE


async def events(request: Request) -> Response:
    """``text/event-stream`` for the timeline of ``?id=`` whose last row is ``?after=``:
    an ``event`` message per new event (its row, appended), an ``update`` message per
    row whose state changed (the row, swapped in by its id)."""
    settings = settings_of(request)
    store = settings.calls.store
    session_id = request.query_params.get("id", "")
    if not session_id:
        raise invalid("id", "must name a session")
    after = whole_number(request.query_params.get("after"), "after", 0)
    head = await settings.calls(store.inspect.read_events, session_id, limit=1)
    if head.through_index == 0:
        return render(request, "missing.html", status_code=404, what=f"No session {session_id!r}.")
    # Where an action in a row returns to: the timeline, not this stream.
    back = "/session?" + urlencode({"id": session_id})
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # from whichever thread the store calls it on
        loop.call_soon_threadsafe(woken.set)

    unwatch = store.watch(wake)

    def row(event: StoredEvent, state: str, detail: str, swap: bool) -> str:
        shown = Shown(event, state, detail, [])
        html = fragment(request, "event.html", shown=shown, snapshots={}, here=back, swap=swap)
        return "".join(f"data: {line}\n" for line in html.splitlines())

    async def messages() -> AsyncIterator[str]:
        last = after
        seen: dict[int, Any] = {}
        first_read = True
        try:
            yield ": live\n\n"
            while True:
                page = await settings.calls(
                    store.inspect.read_events,
                    session_id,
                    after_index=max(0, last - WINDOW),
                    limit=WINDOW * 2,
                )
                now = datetime.now(UTC)
                for event in page.events:
                    state, detail = describe(event, now, page)
                    mark = (state, detail, event.attempt_count, event.claim_holder)
                    if event.index > last:
                        last = event.index
                        data = row(event, state, detail, False)
                        yield f"event: event\nid: {event.index}\n{data}\n"
                    elif not first_read and seen.get(event.index) != mark:
                        yield f"event: update\n{row(event, state, detail, True)}\n"
                    seen[event.index] = mark
                first_read = False
                for index in [i for i in seen if i <= last - WINDOW]:
                    del seen[index]
                if len(page.events) == WINDOW * 2:
                    continue  # more came than one read holds: read on at once
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), timeout=REFRESH_S)
                await asyncio.sleep(SPACING_S)
                woken.clear()
        finally:
            unwatch()

    return StreamingResponse(
        messages(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
