"""The command's conventions: where --url goes, one exit status for a missing session
whichever command names it, what a bad number says, a reason taken literally."""

from __future__ import annotations

import pytest

from a2sql import Store
from a2sql.execution.engines import ENV_URL
from tests.cli.conftest import Cli


def test_url_before_or_after_the_command_or_from_the_environment(
    cli: Cli, populated: tuple[Store, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a2sql --url URL status``, ``a2sql status --url URL`` and A2SQL_DATABASE_URL read
    the same database; two different --url are refused in one line."""
    _, url = populated

    def read(*args: str) -> tuple[str, int]:
        found = cli(*args).json()
        return found["url"], found["sessions"]

    assert read("--url", url, "status", "--json") == (url, 3)
    assert read("status", "--url", url, "--json") == (url, 3)
    assert read("--url", url, "status", "--url", url, "--json") == (url, 3)
    monkeypatch.setenv(ENV_URL, url)
    assert read("status", "--json") == (url, 3)
    assert cli("--url", url, "events", "order-1", "--json").json()["session_id"] == "order-1"
    both = cli("--url", url, "status", "--url", "sqlite:///elsewhere.db")
    assert both.code == 2 and both.out == ""
    assert both.err.startswith("a2sql: --url is given before and after the command")
    assert len(both.err.strip().splitlines()) == 1
    copied = cli("--url", url, "copy", url, "sqlite:///elsewhere.db")
    assert copied.code == 2
    assert copied.err.startswith("a2sql: copy takes its two URLs as arguments, not --url")


def test_a_missing_session_is_exit_1_whichever_command_names_it(
    cli: Cli, populated: tuple[Store, str]
) -> None:
    """session, events, retry, skip and delete: no such session is one line and exit 1;
    an existing session with nothing after --after is an empty table and exit 0."""
    _, url = populated
    for args in (
        ["session", "nope"],
        ["events", "nope"],
        ["events", "nope", "--json"],
        ["retry", "nope", "1"],
        ["skip", "nope", "1", "--reason", "r"],
        ["delete", "nope", "--yes"],
    ):
        ran = cli(*args, "--url", url)
        assert ran.code == 1, (args, ran.err)
        last = ran.err.strip().splitlines()[-1]
        assert last.startswith("a2sql: no session 'nope'"), (args, ran.err)
    past = cli("events", "order-17", "--after", "5", "--url", url)
    assert past.code == 0 and past.lines() == ["index\ttype\tlane\tstate\tattempt\tdetail"]


def test_a_missing_event_is_exit_1(cli: Cli, populated: tuple[Store, str]) -> None:
    """retry and skip of an index past the session's end: nothing to act on, exit 1."""
    _, url = populated
    for args in (["retry", "order-1", "999"], ["skip", "order-1", "999", "--reason", "r"]):
        ran = cli(*args, "--url", url)
        assert (ran.code, ran.err.strip().splitlines()[-1]) == (
            1,
            "a2sql: no event at index 999 in session 'order-1': nothing changed",
        )


def test_a_bad_number_says_what_is_expected(cli: Cli, populated: tuple[Store, str]) -> None:
    """An index or a limit that is not one: exit 2 and what was expected."""
    _, url = populated
    for args, expected in (
        (["retry", "order-1", "abc"], "'abc': expected an event index, a whole number from 1"),
        (["skip", "order-1", "0", "--reason", "r"], "0: expected an event index"),
        (["events", "order-1", "--after", "-1"], "-1: expected an event index"),
        (["events", "order-1", "--limit", "5000"], "5000: expected a whole number from 1 to 1000"),
        (["sessions", "--limit", "x"], "'x': expected a whole number from 1"),
    ):
        ran = cli(*args, "--url", url)
        assert ran.code == 2, args
        assert expected in ran.err, (args, ran.err)
        assert "integer range" not in ran.err
        assert len(ran.err.strip().splitlines()) == 1


def test_a_reason_with_braces_is_taken_literally(cli: Cli, populated: tuple[Store, str]) -> None:
    """skip --reason '{x}': skipped, said in one line, exit 0 (not a KeyError after the
    skip was committed)."""
    store, url = populated
    ran = cli("skip", "order-1", "4", "--reason", "template {x} {event} {0}", "--url", url)
    assert ran.code == 0, ran.err
    assert ran.out == "skipped order-1 #4: template {x} {event} {0}\n"
    assert store.read("order-1")[3].last_error == "template {x} {event} {0}"
