"""A timeline's new events, sent to the open page as they are appended (server-sent
events, fed by the store's ``stream``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from a2sql.ui.rendering import fragment, settings_of
from a2sql.ui.screens import Shown, describe


async def events(request: Request) -> Response:
    """``text/event-stream`` of the session's events after ``?after=``, each an
    ``event`` message whose data is the event's row as the timeline shows it."""
    settings = settings_of(request)
    session_id = request.query_params.get("id", "")
    after = max(0, int(request.query_params.get("after") or 0))
    # Where an action in a row returns to: the timeline, not this stream.
    back = "/session?" + urlencode({"id": session_id})

    async def messages() -> AsyncIterator[str]:
        yield ": live\n\n"
        async for event in settings.calls.follow(session_id, after):
            state, detail = describe(event, datetime.now(UTC))
            shown = Shown(event, state, detail, [])
            row = fragment(request, "event.html", shown=shown, snapshots={}, here=back)
            data = "".join(f"data: {line}\n" for line in row.splitlines())
            yield f"event: event\nid: {event.index}\n{data}\n"

    return StreamingResponse(
        messages(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
