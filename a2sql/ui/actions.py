"""The UI's actions: retry a dead letter, skip an event, signal, cancel or delete a
session. Each is a POST from a page's form, confirmed in the browser first.

Refused (403) unless the UI was made with ``allow_actions=True``, whatever the
request carries. Otherwise a request must carry the UI's token, which only its
own pages hold (a page of another site cannot read them), and, when the browser
says where it comes from (``Origin``), come from the UI's own host. Each action
done is logged on the ``a2sql.ui`` logger, with who asked (the client's address).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from a2sql.core.errors import A2Error, invalid
from a2sql.core.jsontext import decode_json
from a2sql.ui.rendering import Settings, render, settings_of

log = logging.getLogger("a2sql.ui")


class NothingDone(Exception):
    """An action the store answered but that changed nothing (not a dead letter, already
    processed, no such session): said on the page as a failure, not as done."""


READ_ONLY = (
    "This UI is read-only. Start it with `a2sql ui --allow-actions` "
    "(or a2sql.ui.app(store, allow_actions=True)) to act on sessions."
)


async def act(request: Request) -> Response:
    """Do one action and go back to the page it was asked from, saying what it did."""
    settings = settings_of(request)
    action = request.path_params["action"]
    run = ACTIONS.get(action)
    if run is None:
        return render(request, "missing.html", status_code=404, what=f"No action {action!r}.")
    if not settings.allow_actions:
        return render(request, "refused.html", status_code=403, why=READ_ONLY)
    form = await request.form()
    if not _same_site(request) or not secrets.compare_digest(
        str(form.get("csrf", "")), settings.csrf_token
    ):
        return render(
            request,
            "refused.html",
            status_code=403,
            why="This action did not come from this UI's own page (its token is missing "
            "or wrong, or the request came from another site). Reload the page and try again.",
        )
    back = _back(form)
    try:
        said = await run(settings, form)
    except (A2Error, NothingDone) as error:
        log.warning("%s refused for %s: %s", action, _client(request), error)
        return _return(request, back, error=str(error))
    log.info("%s by %s: %s", action, _client(request), said)
    if action == "delete":
        back = "/sessions"
    return _return(request, back, done=said)


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    if not isinstance(value, str):
        raise invalid(name, "is missing")
    return value


def _index(form: FormData) -> int:
    text = _text(form, "index")
    try:
        return int(text)
    except ValueError:
        raise invalid("index", f"must be a number, not {text!r}") from None


async def _retry(settings: Settings, form: FormData) -> str:
    sid, index = _text(form, "session_id"), _index(form)
    result = await settings.calls(settings.calls.store.retry_dead_letter, sid, index=index)
    if result.outcome != "requeued":
        raise NothingDone(f"retry {sid} #{index}: not a dead letter, nothing changed")
    return f"retry {sid} #{index}: requeued"


async def _skip(settings: Settings, form: FormData) -> str:
    sid, index = _text(form, "session_id"), _index(form)
    reason = _text(form, "reason")
    result = await settings.calls(settings.calls.store.skip_event, sid, index=index, reason=reason)
    if result.outcome != "skipped":
        raise NothingDone(f"skip {sid} #{index}: already processed, nothing changed")
    return f"skip {sid} #{index}: skipped"


async def _signal(settings: Settings, form: FormData) -> str:
    sid, name = _text(form, "session_id"), _text(form, "name")
    text = str(form.get("payload") or "").strip()
    try:
        payload: Any = decode_json(text) if text else None
    except ValueError as error:
        raise invalid("payload", f"is not JSON: {error}") from None
    result = await settings.calls(settings.calls.store.signal, sid, name, payload)
    woken = ", ".join(f"#{i}" for i in result.woken) or "nothing"
    return f"signal {name!r} to {sid} (#{result.event.index}): woke {woken}"


async def _cancel(settings: Settings, form: FormData) -> str:
    sid, reason = _text(form, "session_id"), _text(form, "reason")
    result = await settings.calls(settings.calls.store.cancel_session, sid, reason=reason)
    if result.cancelled == 0:
        raise NothingDone(f"cancel {sid}: no unprocessed event, nothing changed")
    return f"cancel {sid}: {result.cancelled} events stopped"


async def _delete(settings: Settings, form: FormData) -> str:
    sid = _text(form, "session_id")
    result = await settings.calls(settings.calls.store.delete_session, sid)
    if result.events == 0 and result.snapshots == 0:
        raise NothingDone(f"delete {sid}: no such session, nothing deleted")
    return f"delete {sid}: {result.events} events, {result.snapshots} snapshots deleted"


ACTIONS: dict[str, Callable[[Settings, FormData], Awaitable[str]]] = {
    "retry": _retry,
    "skip": _skip,
    "signal": _signal,
    "cancel": _cancel,
    "delete": _delete,
}


def _same_site(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        # No Origin (an older browser, or a tool): the token alone decides.
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def _back(form: FormData) -> str:
    # Only a path of this UI, never another site's address.
    back = str(form.get("back") or "/")
    if not back.startswith("/") or back.startswith("//") or "\\" in back:
        return "/"
    return back


def _return(request: Request, back: str, **said: str) -> Response:
    root = request.scope.get("root_path", "")
    path, _, query = back.partition("?")
    kept = [part for part in query.split("&") if part and not part.startswith(("done=", "error="))]
    query = "&".join([*kept, urlencode(said)])
    return RedirectResponse(f"{root}{path}?{query}", status_code=303)


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"
