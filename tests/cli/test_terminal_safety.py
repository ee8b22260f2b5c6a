"""Stored text reaches the operator's terminal escaped: whoever wrote a session id, an
event type, a lane, a holder, a reducer name or a handler's error cannot send the
terminal escape sequences or rich markup through the command, and the commands it
suggests are quoted for the shell. ``--json`` keeps every value exact."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import a2sql
from a2sql import NewEvent
from a2sql.core.escaping import command_line, printable
from tests.cli.conftest import Cli

# An OSC that sets the window title, a screen clear, an 8-bit CSI, a bell, a
# right-to-left override, and rich markup.
SESSION = "evil\x1b]0;pwned\x07[bold]x[/bold]\u202e"
TYPE = "t\x1b[2Jype"
LANE = "l\x9b31mane"
HOLDER = "w\x1b[8m[red]h[/red]"
REDUCER = "r\x1b[2J[blink]"
ERROR = "boom\x1b[2J[bold]loud[/bold]\x9b1m"
HOSTILE = ("\x1b]", "\x1b[2J", "\x1b[8m", "\x9b", "\x07", "\u202e")


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[str]:
    """A SQLite file whose session, event type, lane, holder, reducer name and handler
    error carry escape sequences and markup: a dead letter, a live claim, a snapshot."""
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    with a2sql.create_store(url) as store:
        store.append(
            SESSION,
            [NewEvent(TYPE, {"s": "\x9b\u202e"}, lane=LANE), NewEvent("second", lane="other")],
        )
        [first] = store.claim_available(SESSION, holder=HOLDER, ttl_ms=60_000, limit=1).events
        store.fail_attempt(
            SESSION, index=1, attempt=first.attempt_count, error=ERROR, max_failures=1
        )
        store.claim_available(SESSION, holder=HOLDER, ttl_ms=60_000)
        store.put_snapshot(SESSION, REDUCER, 2, {})
    yield url


def _commands(url: str) -> list[list[str]]:
    return [
        ["sessions", "--url", url],
        ["session", SESSION, "--url", url],
        ["events", SESSION, "--url", url],
        ["dead-letters", "--url", url],
        ["retry", SESSION, "2", "--url", url],  # not a dead letter: the error names it
        ["events", SESSION + "\x1b[2Jmissing", "--url", url],  # no such session: idem
    ]


def _no_raw_controls(text: str) -> None:
    for sequence in HOSTILE:
        assert sequence not in text, (sequence, text)


def test_plain_output_escapes_control_characters(cli: Cli, hostile: str) -> None:
    """Off a terminal: no escape sequence of the stored text is printed, on stdout or
    stderr; each control character is shown as its escape."""
    for args in _commands(hostile):
        ran = cli(*args)
        _no_raw_controls(ran.out + ran.err)
    events = cli("events", SESSION, "--url", hostile)
    assert printable(TYPE) in events.out and printable(LANE) in events.out
    assert printable(HOLDER) in events.out
    assert f"after 1 failures: {printable(ERROR)}" in events.out
    session = cli("session", SESSION, "--url", hostile)
    assert f"session: {printable(SESSION)}" in session.out
    assert printable(REDUCER) in session.out
    assert "\\x1b]0;pwned\\x07[bold]x[/bold]\\u202e" in session.out


def test_a_terminal_shows_markup_literally(
    cli: Cli, hostile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a terminal (rich): stored text is not markup, and its escapes are escaped;
    only rich's own colour sequences reach the terminal."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "300")
    for args in _commands(hostile):
        ran = cli(*args)
        _no_raw_controls(ran.out + ran.err)
        shown = re.sub(r"\x1b\[[0-9;]*m", "", ran.out)  # rich's own styles
        assert "\x1b" not in shown, (args, ran.out)
    events = re.sub(r"\x1b\[[0-9;]*m", "", cli("events", SESSION, "--url", hostile).out)
    assert "[bold]loud[/bold]" in events and "[red]h[/red]" in events
    session = re.sub(r"\x1b\[[0-9;]*m", "", cli("session", SESSION, "--url", hostile).out)
    assert "[bold]x[/bold]" in session and "[blink]" in session


def test_json_keeps_every_value_exact(cli: Cli, hostile: str) -> None:
    """--json: the values parse back exactly; the text itself carries no raw control
    character (JSON escapes them)."""
    events = cli("events", SESSION, "--url", hostile, "--json")
    _no_raw_controls(events.out)
    found = events.json()
    assert found["session_id"] == SESSION
    first, second = found["events"]
    assert (first["type"], first["lane"], first["last_error"]) == (TYPE, LANE, ERROR)
    assert first["payload"] == {"s": "\x9b\u202e"}
    assert second["claim_holder"] == HOLDER
    snapshots = cli("session", SESSION, "--url", hostile, "--json")
    _no_raw_controls(snapshots.out)
    assert [s["reducer_name"] for s in snapshots.json()["snapshots"]] == [REDUCER]


def test_suggested_commands_are_quoted_for_the_shell(cli: Cli, tmp_path: Path) -> None:
    """dead-letters suggests `a2sql retry ID INDEX`: a session id with spaces and shell
    syntax is one quoted word, and one with control characters is written so that the
    shell gives back the exact id."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    for session_id in ("a b;touch pwned", SESSION):
        with a2sql.create_store(url) as store:
            store.append(session_id, [NewEvent("e")])
            [event] = store.claim_available(session_id, holder="w", ttl_ms=60_000).events
            store.fail_attempt(session_id, index=1, attempt=1, error="x", max_failures=1)
            assert event.index == 1
        ran = cli("dead-letters", "--url", url, "--prefix", session_id)
        _no_raw_controls(ran.err)
        suggested = ran.err.split("retry one: ", 1)[1].split("   skip one:", 1)[0]
        assert suggested == command_line("a2sql", "retry", session_id, 1, "--url", url)
        # The shell reads the id back exactly (bash, for $'...').
        echoed = subprocess.run(
            ["bash", "-c", f"printf '%s\\0' {suggested.removeprefix('a2sql ')}"],
            capture_output=True,
            check=True,
            cwd=tmp_path,
        ).stdout.split(b"\0")
        assert echoed[:2] == [b"retry", session_id.encode()]
        assert not (tmp_path / "pwned").exists()
        if session_id == "a b;touch pwned":
            assert shlex.split(suggested)[2] == session_id
        with a2sql.create_store(url) as store:
            store.delete_session(session_id)


def test_reasons_and_errors_are_escaped(cli: Cli, tmp_path: Path) -> None:
    """A skip's reason is printed escaped (and taken literally: braces included)."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with a2sql.create_store(url) as store:
        store.append("s", [NewEvent("e")])
    ran = cli("skip", "s", "1", "--reason", "{x} \x1b[2J{event}", "--url", url)
    assert ran.code == 0, ran.err
    assert ran.out == "skipped s #1: {x} \\x1b[2J{event}\n"
    assert json.loads(cli("events", "s", "--url", url, "--json").out)["events"][0][
        "last_error"
    ] == ("{x} \x1b[2J{event}")
