"""The UI's pages and actions over HTTP, on both engines, with real data: what each screen
shows, that the UI is read-only unless told, and how actions are guarded."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import a2sql
import a2sql.ui
from tests.ui.scenery import populate

ACTIONS = {
    "retry": {"session_id": "chat/1", "index": "2"},
    "skip": {"session_id": "chat/1", "index": "2", "reason": "search is down"},
    "signal": {"session_id": "chat/1", "name": "approval", "payload": '{"ok": true}'},
    "cancel": {"session_id": "job/live", "reason": "the user hung up"},
    "delete": {"session_id": "job/expired"},
}


@pytest.fixture
def store(url: str) -> Iterator[a2sql.Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        populate(opened)
        yield opened


def _client(store: a2sql.Store, **options: object) -> TestClient:
    return TestClient(a2sql.ui.app(store, **options))  # type: ignore[arg-type]


def _token(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no action form on the page"
    return found.group(1)


def test_every_screen_shows_the_work(store: a2sql.Store) -> None:
    client = _client(store)
    overview = client.get("/").text
    for count, value in [
        ("ready", 2),  # chat/1 #6, returned by #1; job/expired #1, its claim over
        ("claimed", 1),
        ("waiting", 1),
        ("scheduled", 1),
        ("dead_letters", 2),
        ("blocked_lanes", 1),
    ]:
        assert re.search(rf'data-count="{count}"[^>]*><span class="n">{value}</span>', overview), (
            count
        )
    sessions = client.get("/sessions").text
    for sid in ("chat/1", "job/dead", "job/expired", "job/live"):
        assert f'data-session="{sid}"' in sessions
    dead = client.get("/sessions", params={"state": "dead_letters"}).text
    assert re.findall(r'data-session="([^"]+)"', dead) == ["chat/1", "job/dead"]
    waiting = client.get("/sessions", params={"state": "waiting", "prefix": "chat/"}).text
    assert re.findall(r'data-session="([^"]+)"', waiting) == ["chat/1"]

    timeline = client.get("/session", params={"id": "chat/1"}).text
    states = dict(re.findall(r'data-index="(\d+)" data-state="(\w+)"', timeline))
    assert states == {
        "1": "completed",
        "2": "dead",
        "3": "blocked",
        "4": "waiting",
        "5": "scheduled",
        "6": "ready",
    }
    assert "search: timed out after 30 s" in timeline
    assert 'caused by <a href="#e-1">#1</a>' in timeline
    assert "waiting for &#39;approval&#39;" in timeline
    assert 'data-reducer="transcript"' in timeline and "user-42" in timeline
    assert 'sse-connect="/session/live?id=chat%2F1&amp;after=6"' in timeline

    letters = client.get("/dead-letters").text
    assert re.findall(r'data-session="([^"]+)" data-index="(\d+)"', letters) == [
        ("chat/1", "2"),
        ("job/dead", "1"),
    ]
    assert 'data-blocks="1"' in letters and "disk full" in letters

    flight = client.get("/in-flight").text
    live, _, expired = flight.partition('id="expired-claims"')
    assert 'data-session="job/live"' in live and "worker-b" in live
    assert 'data-session="job/expired"' in expired and "worker-gone" in expired


def test_pages_say_what_is_missing_or_wrong(store: a2sql.Store) -> None:
    client = _client(store)
    missing = client.get("/session", params={"id": "no/such"})
    assert missing.status_code == 404 and "No session &#39;no/such&#39;" in missing.text
    wrong = client.get("/sessions", params={"state": "sleeping"})
    assert wrong.status_code == 400 and "state: must be one of" in wrong.text
    bad_cursor = client.get("/dead-letters", params={"cursor": "nonsense"})
    assert bad_cursor.status_code == 400
    assert client.get("/actions/retry").status_code == 405


def test_read_only_refuses_every_action_even_with_the_token(store: a2sql.Store) -> None:
    """Without allow_actions no page offers an action and every action answers 403, with
    or without a valid token; nothing in the store changes."""
    before = {sid: store.read(sid) for sid in ("chat/1", "job/live", "job/expired")}
    client = _client(store)
    page = client.get("/session", params={"id": "chat/1"}).text
    assert "data-action=" not in page and 'name="csrf"' not in page
    token = client.app.state.a2sql_ui.csrf_token  # type: ignore[attr-defined]
    for action, form in ACTIONS.items():
        for extra in ({}, {"csrf": token}):
            answer = client.post(f"/actions/{action}", data={**form, **extra})
            assert answer.status_code == 403, action
            assert "read-only" in answer.text
    assert {sid: store.read(sid) for sid in before} == before


def test_actions_work_with_the_flag_and_are_logged(
    store: a2sql.Store, caplog: pytest.LogCaptureFixture
) -> None:
    client = _client(store, allow_actions=True)
    token = _token(client.get("/session", params={"id": "chat/1"}).text)
    caplog.set_level(logging.INFO, logger="a2sql.ui")

    def act(action: str, **form: str) -> str:
        answer = client.post(
            f"/actions/{action}",
            data={**form, "csrf": token, "back": "/session?id=chat%2F1"},
            follow_redirects=False,
        )
        assert answer.status_code == 303, answer.text
        return answer.headers["location"]

    assert act("signal", **ACTIONS["signal"]).startswith("/session?id=chat%2F1&done=")
    assert store.read("chat/1")[3].wake_on is None  # the wait was woken
    act("retry", **ACTIONS["retry"])
    assert store.read("chat/1")[1].failed_at is None
    act("cancel", **ACTIONS["cancel"])
    assert store.read("job/live")[0].processed_at is not None
    assert act("delete", **ACTIONS["delete"]).startswith("/sessions?done=")
    assert store.read("job/expired") == []
    refused = act("skip", session_id="chat/1", index="1", reason="")
    assert "error=INVALID_ARGUMENT" in refused
    said = [r.getMessage() for r in caplog.records if r.name == "a2sql.ui"]
    assert any(m.startswith("signal by testclient: signal 'approval'") for m in said), said
    assert any("delete by testclient: delete job/expired" in m for m in said), said


def test_actions_refuse_a_request_from_another_site(store: a2sql.Store) -> None:
    """The token only the UI's pages carry, and the browser's Origin when it gives one."""
    client = _client(store, allow_actions=True)
    token = _token(client.get("/dead-letters").text)
    form = ACTIONS["retry"]
    assert client.post("/actions/retry", data=form).status_code == 403
    assert client.post("/actions/retry", data={**form, "csrf": "guess"}).status_code == 403
    foreign = client.post(
        "/actions/retry",
        data={**form, "csrf": token},
        headers={"Origin": "https://evil.example"},
    )
    assert foreign.status_code == 403
    assert store.read("chat/1")[1].failed_at is not None
    own = client.post(
        "/actions/retry",
        data={**form, "csrf": token, "back": "//evil.example/x"},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert own.status_code == 303 and own.headers["location"].startswith("/?done=")


def test_mounted_under_a_path_every_link_stays_under_it(store: a2sql.Store) -> None:
    outer = Starlette(routes=[Mount("/ops/a2sql", a2sql.ui.app(store, allow_actions=True))])
    client = TestClient(outer)
    for path in ("/", "/sessions", "/session?id=chat/1", "/dead-letters", "/in-flight"):
        page = client.get(f"/ops/a2sql{path}")
        assert page.status_code == 200, path
        links = re.findall(r'(?:href|action|src|sse-connect|hx-get)="(/[^"]*)"', page.text)
        assert links and all(link.startswith("/ops/a2sql/") for link in links), links
    token = _token(client.get("/ops/a2sql/dead-letters").text)
    answer = client.post(
        "/ops/a2sql/actions/retry",
        data={**ACTIONS["retry"], "csrf": token, "back": "/dead-letters"},
        follow_redirects=False,
    )
    assert answer.headers["location"].startswith("/ops/a2sql/dead-letters?done=")


def test_an_async_store_serves_the_same_pages(url: str) -> None:
    with a2sql.create_store(url, migrate=True) as sync:
        populate(sync)
        expected = _client(sync).get("/session", params={"id": "chat/1"}).text

    async def run() -> None:
        async with a2sql.create_async_store(url) as store:
            client = TestClient(a2sql.ui.app(store))
            page = client.get("/session", params={"id": "chat/1"}).text
            states = re.findall(r'data-state="(\w+)"', page)
            assert states == re.findall(r'data-state="(\w+)"', expected)
            assert client.get("/").status_code == 200
            assert "a2sql_store_ready_events" in client.get("/metrics").text

    import asyncio

    asyncio.run(run())


def test_metrics_text_has_the_store_gauges(store: a2sql.Store) -> None:
    client = _client(store)
    text = client.get("/metrics").text
    assert 'a2sql_store_dead_letters{prefix=""} 2.0' in text
    assert 'a2sql_store_claimed_events{prefix=""} 1.0' in text
    assert 'a2sql_store_waiting_events{prefix=""} 1.0' in text


def test_the_live_stream_refuses_what_it_cannot_follow(store: a2sql.Store) -> None:
    client = _client(store)
    assert client.get("/session/live", params={"id": "chat/1", "after": "abc"}).status_code == 400
    assert client.get("/session/live", params={"id": "chat/1", "after": "-1"}).status_code == 400
    assert client.get("/session/live").status_code == 400
    missing = client.get("/session/live", params={"id": "no/such"})
    assert missing.status_code == 404


def test_a_timeline_past_its_end_shows_its_last_page(store: a2sql.Store) -> None:
    page = _client(store).get("/session", params={"id": "chat/1", "after": "999"}).text
    assert re.findall(r'data-index="(\d+)"', page) == ["1", "2", "3", "4", "5", "6"]
    assert "#1\u2013#6 of 6" in page  # an en dash


def test_a_skipped_event_says_its_reason_apart_from_its_last_failure(store: a2sql.Store) -> None:
    store.skip_event("chat/1", index=2, reason="search is down for the day")
    page = _client(store).get("/session", params={"id": "chat/1"}).text
    row = page[page.index('id="e-2"') : page.index('id="e-3"')]
    assert 'data-state="skipped"' in row
    assert "skipped without an attempt: search is down for the day" in row
    assert "<th>last failed</th>" in row and "last error" not in row


def test_an_action_that_changes_nothing_says_so_as_a_failure(store: a2sql.Store) -> None:
    client = _client(store, allow_actions=True)
    token = _token(client.get("/dead-letters").text)
    for action, form, said in [
        ("retry", {"session_id": "chat/1", "index": "1"}, "not a dead letter"),
        ("skip", {"session_id": "chat/1", "index": "1", "reason": "x"}, "already processed"),
        ("cancel", {"session_id": "no/such", "reason": "x"}, "no unprocessed event"),
        ("delete", {"session_id": "no/such"}, "no such session"),
    ]:
        answer = client.post(
            f"/actions/{action}", data={**form, "csrf": token}, follow_redirects=False
        )
        location = answer.headers["location"]
        assert "error=" in location and "done=" not in location, (action, location)
        assert said.replace(" ", "+") in location, (action, location)
