"""How the UI's pages are rendered: its settings, templates and links."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from a2sql.ui.calls import StoreCalls
from a2sql.ui.formatting import FILTERS
from a2sql.ui.throughput import Throughput

HERE = Path(__file__).parent


@dataclass
class Settings:
    """What every request of one UI shares."""

    calls: StoreCalls
    allow_actions: bool
    long_claim: timedelta
    bound: int
    # How often /metrics reads the store, at most (seconds).
    metrics_interval: float = 15.0
    throughput: Throughput = field(default_factory=Throughput)
    # The token every action's form carries: a page of another site cannot read
    # it, so it cannot make a browser post an action here (a2sql.ui.actions).
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    templates: Environment = field(
        default_factory=lambda: _templates(),
    )


def _templates() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(FILTERS)
    return environment


def settings_of(request: Request) -> Settings:
    """The settings of the UI serving ``request``."""
    found: Settings = request.app.state.a2sql_ui
    return found


def fragment(request: Request, template: str, **context: Any) -> str:
    """``template`` rendered with ``context``, the UI's settings and the request: a
    whole page or a piece of one."""
    settings = settings_of(request)
    common: dict[str, Any] = {
        "request": request,
        "url": lambda name, **params: link(request, name, **params),
        "static": lambda file: static(request, file),
        "allow_actions": settings.allow_actions,
        "csrf_token": settings.csrf_token,
        "here": here(request),
        "done": request.query_params.get("done"),
        "error": request.query_params.get("error"),
    }
    return settings.templates.get_template(template).render({**common, **context})


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """The page ``template`` rendered (as ``fragment``) as a response."""
    return HTMLResponse(fragment(request, template, **context), status_code=status_code)


def link(request: Request, name: str, **params: Any) -> str:
    """The path of route ``name`` under wherever the UI is mounted, with ``params`` as
    its query (those that are ``None`` left out)."""
    path = request.url_for(name).path
    query = urlencode({key: str(value) for key, value in params.items() if value is not None})
    return f"{path}?{query}" if query else path


def static(request: Request, file: str) -> str:
    """The path of one of the UI's static files."""
    return request.url_for("static", path=file).path


def here(request: Request) -> str:
    """The page's path and query relative to the UI's root: where an action returns to."""
    root = request.scope.get("root_path", "")
    path = request.url.path[len(root) :] if request.url.path.startswith(root) else request.url.path
    return path + (f"?{request.url.query}" if request.url.query else "")
