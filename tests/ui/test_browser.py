"""The UI in a real browser (Debian's Chromium, driven by Playwright), on both engines,
with real data: every screen clicked through from the navigation, a timeline that
shows an event appended while it is open, and actions confirmed in the browser.

``A2SQL_WRITE_SCREENSHOTS=1`` writes each screen's picture into docs/images/ui/ for
the UI's documentation page.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import a2sql
import a2sql.ui
from a2sql import NewEvent
from tests.ui.scenery import populate

if TYPE_CHECKING:
    from playwright.sync_api import Page

SCREENSHOTS = Path(__file__).parents[2] / "docs" / "images" / "ui"


@pytest.fixture
def store(url: str) -> Iterator[a2sql.Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        populate(opened)
        yield opened


def _shoot(page: Page, name: str, engine: str) -> None:
    if os.environ.get("A2SQL_WRITE_SCREENSHOTS") and engine == "postgresql":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_every_screen_from_the_navigation(
    store: a2sql.Store, chromium_page: Page, serve_app: Callable[..., str]
) -> None:
    from playwright.sync_api import expect

    engine = store.engine.dialect.name
    page = chromium_page
    page.goto(serve_app(a2sql.ui.app(store)) + "/")
    expect(page.locator('[data-count="dead_letters"] .n')).to_have_text("2")
    expect(page.locator('[data-count="claimed"] .n')).to_have_text("1")
    _shoot(page, "overview", engine)

    page.get_by_role("link", name="Sessions", exact=True).click()
    expect(page.locator("main")).to_have_attribute("data-screen", "sessions")
    expect(page.locator("#sessions tbody tr")).to_have_count(4)
    page.locator('select[name="state"]').select_option("waiting")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    _shoot(page, "sessions", engine)

    page.get_by_role("link", name="chat/1").click()
    expect(page.locator("main")).to_have_attribute("data-screen", "timeline")
    expect(page.locator("li.event")).to_have_count(6)
    expect(page.locator("#e-2")).to_have_attribute("data-state", "dead")
    expect(page.locator("#e-4 .detail")).to_contain_text("waiting for 'approval'")
    page.locator("#e-1 details.payload summary").click()
    expect(page.locator("#e-1 details.payload pre")).to_contain_text("book a table for two")
    page.locator("#e-6 .links a").first.click()
    expect(page).to_have_url(re.compile(r"#e-1$"))
    _shoot(page, "timeline", engine)

    page.get_by_role("link", name="Dead letters").click()
    expect(page.locator("#dead-letters tbody tr")).to_have_count(2)
    expect(page.locator('[data-session="chat/1"] [data-blocks]')).to_contain_text("1 in lane")
    _shoot(page, "dead-letters", engine)

    page.get_by_role("link", name="In flight").click()
    expect(page.locator("#live-claims")).to_contain_text("worker-b")
    expect(page.locator("#expired-claims")).to_contain_text("worker-gone")
    _shoot(page, "in-flight", engine)
    # Read-only: nothing on any page to act with.
    assert page.locator("form[data-action]").count() == 0


def test_an_open_timeline_shows_new_events_without_a_reload(
    store: a2sql.Store, chromium_page: Page, serve_app: Callable[..., str]
) -> None:
    from playwright.sync_api import expect

    page = chromium_page
    page.goto(serve_app(a2sql.ui.app(store)) + "/session?id=chat/1")
    expect(page.locator("li.event")).to_have_count(6)
    page.evaluate("window.notReloaded = true")
    store.append("chat/1", [NewEvent("user_message", {"text": "make it three"})])
    expect(page.locator("#e-7")).to_contain_text("make it three", timeout=15_000)
    expect(page.locator("#e-7")).to_have_attribute("data-state", "ready")
    store.signal("chat/1", "approval", {"ok": True})
    expect(page.locator("#e-8")).to_have_attribute("data-state", "signal", timeout=15_000)
    # A new event in the lane a dead letter blocks arrives blocked.
    store.append("chat/1", [NewEvent("tool_call", {"tool": "pay"}, lane="tools")])
    expect(page.locator("#e-9")).to_have_attribute("data-state", "blocked", timeout=15_000)
    # Rows already there change as their events do: woken, claimed, completed.
    expect(page.locator("#e-4")).to_have_attribute("data-state", "ready", timeout=15_000)
    claimed = store.claim_available("chat/1", holder="worker-c", ttl_ms=60_000)
    assert 6 in [e.index for e in claimed.events]
    expect(page.locator("#e-6")).to_have_attribute("data-state", "claimed", timeout=15_000)
    expect(page.locator("#e-6 .detail")).to_contain_text("worker-c")
    store.complete_attempt("chat/1", index=6, attempt=1, events=[])
    expect(page.locator("#e-6")).to_have_attribute("data-state", "completed", timeout=15_000)
    assert page.locator("li.event").count() == 9
    assert page.evaluate("window.notReloaded") is True


def test_actions_confirmed_in_the_browser(
    store: a2sql.Store, chromium_page: Page, serve_app: Callable[..., str]
) -> None:
    from playwright.sync_api import expect

    page = chromium_page
    base = serve_app(a2sql.ui.app(store, allow_actions=True))
    dialogs: list[str] = []

    def answer(dialog: object) -> None:
        dialogs.append(dialog.message)  # type: ignore[attr-defined]
        # The first question is declined: nothing happens.
        (dialog.dismiss if len(dialogs) == 1 else dialog.accept)()  # type: ignore[attr-defined]

    page.on("dialog", answer)
    page.goto(base + "/dead-letters")
    row = page.locator('tr[data-session="chat/1"]')
    row.locator('form[data-action="retry"] button').click()
    assert dialogs == ["Retry chat/1 #2?"]
    assert store.read("chat/1")[1].failed_at is not None
    row.locator('form[data-action="retry"] button').click()
    expect(page.locator(".flash.done")).to_contain_text("retry chat/1 #2: requeued")
    assert store.read("chat/1")[1].failed_at is None

    page.goto(base + "/session?id=chat/1")
    signal = page.locator('form[data-action="signal"]')
    signal.locator('input[name="name"]').fill("approval")
    signal.locator('input[name="payload"]').fill('{"ok": true}')
    signal.locator("button").click()
    expect(page.locator(".flash.done")).to_contain_text("woke #4")
    expect(page.locator("#e-4")).not_to_have_attribute("data-state", "waiting")

    cancel = page.locator('form[data-action="cancel"]')
    cancel.locator('input[name="reason"]').fill("the user hung up")
    cancel.locator("button").click()
    expect(page.locator(".flash.done")).to_contain_text("events stopped")
    assert all(e.processed_at is not None for e in store.read("chat/1"))

    page.locator('form[data-action="delete"] button').click()
    expect(page.locator("main")).to_have_attribute("data-screen", "sessions")
    expect(page.locator(".flash.done")).to_contain_text("delete chat/1")
    assert store.read("chat/1") == []
    assert len(dialogs) == 5
