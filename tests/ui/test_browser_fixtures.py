"""The browser fixtures work: a Starlette app served by ``serve_app``, driven in Chromium
(``chromium_page``) through a click whose JavaScript asks the server and changes the
page, and a screenshot of the result."""

from __future__ import annotations

import struct
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.ui.browser import require

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

PAGE = """<!doctype html>
<html><head><title>fixtures</title></head>
<body>
  <h1>a2sql browser fixtures</h1>
  <button id="ask" type="button">Ask the server</button>
  <p id="answer">nothing yet</p>
  <script>
    document.getElementById("ask").addEventListener("click", async () => {
      const response = await fetch("/count", {method: "POST"});
      const body = await response.json();
      const answer = document.getElementById("answer");
      answer.textContent = "clicked " + body.count + " time(s)";
      answer.dataset.count = String(body.count);
    });
  </script>
</body></html>
"""


def _app() -> Any:
    """A Starlette app: the page above, and a click counter it POSTs to."""
    applications = require("starlette.applications", extra="ui")
    responses = require("starlette.responses", extra="ui")
    routing = require("starlette.routing", extra="ui")
    clicks = {"count": 0}

    async def index(request: Any) -> Any:
        return responses.HTMLResponse(PAGE)

    async def count(request: Any) -> Any:
        clicks["count"] += 1
        return responses.JSONResponse(clicks)

    return applications.Starlette(
        routes=[routing.Route("/", index), routing.Route("/count", count, methods=["POST"])]
    )


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_a_click_runs_javascript_that_asks_the_server_and_changes_the_page(
    chromium_page: Page, serve_app: Callable[..., str], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base_url = serve_app(_app())
    assert base_url.startswith("http://127.0.0.1:")
    chromium_page.goto(base_url + "/")
    expect(chromium_page).to_have_title("fixtures")
    answer = chromium_page.locator("#answer")
    expect(answer).to_have_text("nothing yet")

    button = chromium_page.get_by_role("button", name="Ask the server")
    button.click()
    expect(answer).to_have_text("clicked 1 time(s)")
    button.click()
    expect(answer).to_have_attribute("data-count", "2")

    shot = tmp_path / "fixtures.png"
    data = chromium_page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes() == data
    width, height = _png_size(data)
    assert width == 1280 and height >= 800


def test_pages_of_two_contexts_share_no_storage(
    chromium_page: Page, chromium_browser: Browser, serve_app: Callable[..., str]
) -> None:
    """What one test's page stores, another test's page (another context) does not see."""
    base_url = serve_app(_app())
    chromium_page.goto(base_url + "/")
    chromium_page.evaluate("localStorage.setItem('mark', 'first')")
    other = chromium_browser.new_context()
    try:
        page = other.new_page()
        page.goto(base_url + "/")
        assert page.evaluate("localStorage.getItem('mark')") is None
    finally:
        other.close()
    assert chromium_page.evaluate("localStorage.getItem('mark')") == "first"


def test_two_apps_served_at_once(serve_app: Callable[..., str]) -> None:
    """Without a browser: each app on a port of its own, answering."""
    first, second = serve_app(_app()), serve_app(_app())
    assert first != second
    for url in (first, second):
        with urllib.request.urlopen(url + "/", timeout=5) as response:
            assert b"a2sql browser fixtures" in response.read()
