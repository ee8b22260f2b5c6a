"""The UI's Starlette application: its routes, templates and settings."""

from __future__ import annotations

from datetime import timedelta

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from a2sql.api.async_store import AsyncStore
from a2sql.api.store import Store
from a2sql.core.errors import A2Error
from a2sql.ui import actions, live, screens
from a2sql.ui.calls import StoreCalls
from a2sql.ui.rendering import HERE, Settings, render


async def _invalid(request: Request, error: Exception) -> Response:
    # An argument a page passed on that the store refused (a bad cursor, say):
    # said on the page, as the store says it.
    return render(request, "invalid.html", status_code=400, message=str(error))


def app(
    store: Store | AsyncStore,
    *,
    allow_actions: bool = False,
    long_claim: timedelta = timedelta(minutes=5),
    bound: int = 10_000,
) -> Starlette:
    """The UI over ``store`` as a Starlette application, to serve or mount.

    ``allow_actions``: whether the pages offer retry, skip, signal, cancel and
    delete (each a confirmed POST, checked against cross-site requests, logged
    on the ``a2sql.ui`` logger); without it every action answers 403.
    ``long_claim``: how long a claim is held before the in-flight screen marks
    it. ``bound``: how far the overview counts (``inspect.overview``).

    Mount it under a path of your own application, behind its authentication::

        app.mount("/a2sql", a2sql.ui.app(store))
    """
    routes = [
        Route("/", screens.overview, name="overview"),
        Route("/sessions", screens.sessions, name="sessions"),
        Route("/session", screens.timeline, name="session"),
        Route("/session/live", live.events, name="live"),
        Route("/dead-letters", screens.dead_letters, name="dead_letters"),
        Route("/in-flight", screens.in_flight, name="in_flight"),
        Route("/metrics", screens.metrics, name="metrics"),
        Route("/actions/{action}", actions.act, methods=["POST"], name="action"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    application = Starlette(routes=routes, exception_handlers={A2Error: _invalid})
    application.state.a2sql_ui = Settings(
        calls=StoreCalls(store),
        allow_actions=allow_actions,
        long_claim=long_claim,
        bound=bound,
    )
    return application
