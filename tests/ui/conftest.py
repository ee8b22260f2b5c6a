"""Browser tests: Debian's Chromium driven by Playwright, and ASGI apps served by uvicorn.

``chromium_page``: a fresh page (in a browser context of its own: no cookies or
storage shared between tests) of one headless Chromium started once per test
module (``chromium_browser``, module-scoped: starting it costs about a second).
``serve_app(app) -> base_url``: serves an ASGI app (the UI's Starlette app, or
any) under uvicorn in a background thread on a free 127.0.0.1 port,
answering by the time it returns, stopped when the test ends.

The browser is Debian's ``chromium`` (``.ci/run`` and ``make`` install it through
tools/ensure-chromium.sh; Playwright's own browser download needs a host this
workplace cannot reach), found on PATH or at ``A2SQL_CHROMIUM``. Without it or
without the ``playwright`` package, the tests skip saying why; with ``CI=true``
they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.ui.browser import (
    CHROMIUM_FLAGS,
    TIMEOUT_MS,
    VIEWPORT,
    ServedApp,
    chromium_path,
    require,
    unavailable,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of this folder ``browser`` (``-m 'not browser'`` leaves them out)."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Browser]:
    """One headless Chromium for the test module (Playwright's sync API); each
    ``chromium_page`` opens a context of its own in it. Not for the whole test
    process: while Playwright's sync API is started, an event loop runs in the
    thread (on a greenlet), and every later ``asyncio.run`` in that process, such
    as an ``AsyncWorker`` test's, would fail as called from a running loop.
    Playwright launches it on a fresh temporary profile (user data dir) of its own,
    removed at close."""
    sync_api = require("playwright.sync_api")
    path = chromium_path()
    if path is None:
        unavailable(
            "Debian's chromium is not installed (tools/ensure-chromium.sh, or "
            "apt-get install chromium; A2SQL_CHROMIUM names another binary)"
        )
        raise AssertionError("unreachable")
    playwright = sync_api.sync_playwright().start()
    try:
        try:
            browser = playwright.chromium.launch(
                executable_path=path, args=list(CHROMIUM_FLAGS), timeout=60_000
            )
        except sync_api.Error as error:
            unavailable(f"Chromium at {path} did not start: {error}")
            raise AssertionError("unreachable") from error
        try:
            yield browser
        finally:
            browser.close()
    finally:
        playwright.stop()


@pytest.fixture
def chromium_page(chromium_browser: Browser) -> Iterator[Page]:
    """A blank page, 1280x800, in a browser context of its own (closed after the test);
    Playwright's waits time out after TIMEOUT_MS."""
    context = chromium_browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def serve_app() -> Iterator[Callable[..., str]]:
    """``serve_app(app, **uvicorn_config) -> base_url`` ("http://127.0.0.1:PORT", no
    trailing slash): ``app`` served until the test ends (each app served is stopped
    then, through uvicorn's ``should_exit``). Needs uvicorn (the ``ui`` extra)."""
    require("uvicorn", extra="ui")
    served: list[ServedApp] = []

    def serve(app: Any, **config: Any) -> str:
        one = ServedApp(app, **config)
        served.append(one)
        return one.start()

    try:
        yield serve
    finally:
        errors = []
        for one in reversed(served):
            try:
                one.stop()
            except RuntimeError as error:
                errors.append(str(error))
        if errors:
            raise RuntimeError("; ".join(errors))
