"""Time and control from the command line, on SQLite and PostgreSQL: `signal`, `cancel`,
and the waiting and scheduled events that `status`, `session` and `events` show."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

import a2sql
from a2sql import NewEvent, Store
from a2sql.core.escaping import command_line
from tests.cli.conftest import Cli, run_a2sql
from tests.cli.test_deleting import _on_a_terminal

HOUR = timedelta(hours=1)


@pytest.fixture
def held(url: str) -> Iterator[tuple[Store, str]]:
    """A store at ``url`` whose session ``flow`` holds two waiting events (one without a
    timeout), two scheduled ones (one behind its lane) and a live claim, and a session
    ``other`` with one ready event."""
    # Real time: the command's own store reads the system clock.
    now = datetime.now(UTC)
    with a2sql.create_store(url, migrate=True) as store:
        store.append(
            "flow",
            [
                NewEvent("approve?", wake_on="approval"),  # 1: waits, no timeout
                NewEvent("remind", wake_on="approval", available_at=now + HOUR),  # 2: waits
                NewEvent("follow-up", available_at=now + 2 * HOUR),  # 3: scheduled
                NewEvent("job", lane="L"),  # 4: claimed below
                NewEvent("next", lane="L", available_at=now + 3 * HOUR),  # 5: scheduled
            ],
        )
        [job] = store.claim_available("flow", holder="w", ttl_ms=600_000).events
        assert job.index == 4
        store.append("other", [NewEvent("x")])
        yield store, url


def test_status_counts_waiting_and_scheduled_events(cli: Cli, held: tuple[Store, str]) -> None:
    """status: waiting and scheduled events are counted, and counted as pending, never as
    claimed."""
    _, url = held
    found = cli("status", "--url", url, "--json").json()
    assert (found["pending"], found["claimed"]) == (6, 1)
    assert (found["waiting"], found["scheduled"]) == (2, 2)
    lines = cli("status", "--url", url).lines()
    assert lines[lines.index("claimed: 1") + 1 :][:2] == ["waiting: 2", "scheduled: 2"]


def test_session_lists_what_waits_and_what_is_scheduled(cli: Cli, held: tuple[Store, str]) -> None:
    """session: the counts, and each waiting event (for which signal, until when, or no
    timeout) and scheduled one (at when), by index, in plain and JSON output."""
    store, url = held
    [_, remind, follow_up, _, later] = store.read("flow")
    found = cli("session", "flow", "--url", url, "--json").json()
    summary = found["session"]
    assert (summary["pending_count"], summary["claimed_count"]) == (5, 1)
    assert (summary["waiting_count"], summary["scheduled_count"]) == (2, 2)
    listed = [
        (e["index"], e["state"], e["wake_on"], e["wait_until"], e["scheduled_at"])
        for e in found["waiting_and_scheduled"]
    ]
    assert listed == [
        (1, "waiting", "approval", None, None),
        (2, "waiting", "approval", _iso(remind.claim_expires_at), None),
        (3, "scheduled", None, None, _iso(follow_up.claim_expires_at)),
        (5, "scheduled", None, None, _iso(later.claim_expires_at)),
    ]
    lines = cli("session", "flow", "--url", url).lines()
    assert lines[lines.index("claimed: 1") + 1 :][:2] == ["waiting: 2", "scheduled: 2"]
    header = lines.index("index\ttype\tlane\tstate\tdetail")
    remind_until = _iso(remind.claim_expires_at)
    assert [line.split("\t") for line in lines[header + 1 :]] == [
        ["1", "approve?", "-", "waiting", "for signal approval, no timeout"],
        ["2", "remind", "-", "waiting", f"for signal approval until {remind_until}"],
        ["3", "follow-up", "-", "scheduled", f"at {_iso(follow_up.claim_expires_at)}"],
        ["5", "next", "L", "scheduled", f"at {_iso(later.claim_expires_at)}"],
    ]
    other = cli("session", "other", "--url", url)
    assert other.code == 0 and "index\ttype\tlane\tstate\tdetail" not in other.out
    assert cli("session", "other", "--url", url, "--json").json()["waiting_and_scheduled"] == []


def test_session_lists_the_first_twenty_and_says_how_many_more(
    cli: Cli, held: tuple[Store, str]
) -> None:
    """session: 20 waiting or scheduled events at most; the rest are counted, with the
    `events` command that shows them."""
    store, url = held
    store.append("many", [NewEvent("wait", wake_on="go") for _ in range(25)])
    plain = cli("session", "many", "--url", url)
    lines = plain.lines()
    assert len(lines) - lines.index("index\ttype\tlane\tstate\tdetail") - 1 == 20
    events = command_line("a2sql", "events", "many", "--after", 20, "--url", url)
    assert f"(5 more waiting or scheduled: {events})" in plain.err
    found = cli("session", "many", "--url", url, "--json").json()
    assert [e["index"] for e in found["waiting_and_scheduled"]] == list(range(1, 21))
    assert found["session"]["waiting_count"] == 25


def test_events_say_what_each_event_waits_for(cli: Cli, held: tuple[Store, str]) -> None:
    """events: waiting (for which signal, until when), scheduled (at when), with the
    times as fields in JSON; a signal's own event is settled, "a signal"."""
    store, url = held
    [_, remind, follow_up, _, later] = store.read("flow")
    found = cli("events", "flow", "--url", url, "--json").json()
    assert [(e["index"], e["state"]) for e in found["events"]] == [
        (1, "waiting"),
        (2, "waiting"),
        (3, "scheduled"),
        (4, "claimed"),
        (5, "scheduled"),
    ]
    first, second, third, fourth, fifth = found["events"]
    assert (first["detail"], first["wait_until"]) == ("for signal approval, no timeout", None)
    assert second["wait_until"] == _iso(remind.claim_expires_at)
    assert third["scheduled_at"] == _iso(follow_up.claim_expires_at)
    assert (fourth["wait_until"], fourth["scheduled_at"]) == (None, None)
    assert fifth["detail"] == (
        f"at {_iso(later.claim_expires_at)}; also behind the earlier events of lane L"
    )
    assert cli("signal", "flow", "approval", "--url", url).code == 0
    after = cli("events", "flow", "--url", url, "--after", "5").lines()
    assert after[1].split("\t") == ["6", "approval", "-", "settled", "0", "a signal"]


def test_signal_appends_and_says_what_it_woke(cli: Cli, held: tuple[Store, str]) -> None:
    """signal SESSION NAME: the signal's index and id, and the indexes it woke, which are
    then ready; the same id again is a replay (exit 0), waking nothing."""
    store, url = held
    args = ["signal", "flow", "approval", "--payload", '{"by": "ana"}', "--id", "sig-1"]
    done = cli(*args, "--url", url)
    assert (done.code, done.out) == (
        0,
        "signalled flow with approval: appended #6 (id sig-1), woke #1 #2\n",
    )
    signal = store.read("flow")[5]
    assert (signal.type, signal.payload, signal.is_signal) == ("approval", {"by": "ana"}, True)
    states = [e["state"] for e in cli("events", "flow", "--url", url, "--json").json()["events"]]
    assert states[:2] == ["ready", "ready"]
    again = cli(*args, "--url", url)
    assert (again.code, again.out) == (
        0,
        "signal sig-1 is already flow #6: nothing appended, nothing woken (a replay)\n",
    )
    nobody = cli("signal", "other", "approval", "--url", url)
    assert nobody.code == 0
    assert nobody.out.startswith("signalled other with approval: appended #2 (id ")
    assert nobody.out.endswith("), woke nothing (no event waits for it)\n")


def test_signal_json(cli: Cli, held: tuple[Store, str]) -> None:
    """signal --json: the signal's event, the woken indexes, whether it was a replay."""
    _, url = held
    found = cli("signal", "flow", "approval", "--payload", "[1, 2]", "--url", url, "--json").json()
    assert (found["session_id"], found["name"], found["woken"], found["replayed"]) == (
        "flow",
        "approval",
        [1, 2],
        False,
    )
    event = found["event"]
    assert (event["index"], event["type"], event["payload"], event["wake_on"]) == (
        6,
        "approval",
        [1, 2],
        "approval",
    )


def test_signal_refuses_bad_json_and_a_missing_session(cli: Cli, held: tuple[Store, str]) -> None:
    """signal: a payload that is not JSON is a usage mistake (exit 2), a session that does
    not exist is nothing to act on (exit 1); each one line, nothing appended."""
    store, url = held
    bad = cli("signal", "flow", "approval", "--payload", "{oops", "--url", url)
    assert (bad.code, bad.out) == (2, "")
    [line] = bad.err.strip().splitlines()
    assert line.startswith("a2sql: Invalid value for '--payload': not JSON (Expecting ")
    missing = cli("signal", "nope", "approval", "--url", url)
    assert (missing.code, missing.out) == (1, "")
    assert missing.err.strip().splitlines()[-1] == (
        "a2sql: no session 'nope' (it has no events): nothing signalled"
    )
    assert len(store.read("flow")) == 5 and store.read("nope") == []


def test_cancel_with_yes_marks_the_unprocessed_events_processed(
    cli: Cli, held: tuple[Store, str]
) -> None:
    """cancel --yes: every unprocessed event (waiting, scheduled, claimed) processed with
    the reason; cancelling again, or a missing session, is exit 1 and one line."""
    store, url = held
    done = cli("cancel", "flow", "--reason", "customer left", "--yes", "--url", url)
    assert (done.code, done.out) == (
        0,
        "cancelled flow: 5 events marked processed (customer left)\n",
    )
    events = store.read("flow")
    assert all(e.processed_at is not None and e.last_error == "customer left" for e in events)
    counts = cli("status", "--url", url, "--json").json()
    assert (counts["pending"], counts["claimed"], counts["waiting"], counts["scheduled"]) == (
        1,
        0,
        0,
        0,
    )
    again = cli("cancel", "flow", "--reason", "r", "--yes", "--url", url, "--json")
    assert again.code == 1 and json.loads(again.out)["cancelled"] == 0
    assert again.err.strip().splitlines()[-1] == (
        "a2sql: session 'flow' has no unprocessed event: nothing cancelled"
    )
    missing = cli("cancel", "nope", "--reason", "r", "--yes", "--url", url)
    assert (missing.code, missing.err.strip().splitlines()[-1]) == (
        1,
        "a2sql: no session 'nope': nothing cancelled",
    )
    found = cli("cancel", "other", "--reason", "r", "--yes", "--url", url, "--json").json()
    assert (found["session_id"], found["reason"], found["cancelled"]) == ("other", "r", 1)


def test_cancel_needs_a_reason_and_off_a_terminal_yes(held: tuple[Store, str], cli: Cli) -> None:
    """cancel: a blank reason is a usage mistake; from a script without --yes it refuses
    in one line (exit 2); either way nothing is cancelled."""
    store, url = held
    blank = cli("cancel", "flow", "--reason", " ", "--yes", "--url", url)
    assert blank.code == 2
    assert blank.err == (
        "a2sql: Invalid value for '--reason': must say why (it is kept in each event's "
        "last_error) (see `a2sql cancel --help`)\n"
    )
    ran = run_a2sql("cancel", "flow", "--reason", "r", "--url", url)
    assert (ran.code, ran.out) == (2, "")
    assert ran.err == (
        "a2sql: cancel cancels and asks first, but stdin is not a terminal: "
        "pass --yes to cancel without asking\n"
    )
    assert all(e.processed_at is None for e in store.read("flow"))


def test_on_a_terminal_cancel_shows_what_it_cancels_and_asks(held: tuple[Store, str]) -> None:
    """cancel on a terminal: how many unprocessed events, of which kinds, then [y/N]; no
    keeps them (exit 1), yes cancels."""
    store, url = held
    args = ["cancel", "flow", "--reason", "stop", "--url", url]
    code, shown = _on_a_terminal(args, "n")
    assert code == 1, shown
    assert (
        "cancel session flow: mark 5 unprocessed events processed (5 pending: 1 claimed, "
        "2 waiting, 2 scheduled; 0 dead letters)? [y/N]"
    ) in shown
    assert "a2sql: nothing cancelled" in shown
    assert all(e.processed_at is None for e in store.read("flow"))
    code, shown = _on_a_terminal(args, "y")
    assert code == 0, shown
    assert "cancelled flow: 5 events marked processed (stop)" in shown
    assert all(e.last_error == "stop" for e in store.read("flow"))


def _iso(value: datetime | None) -> str:
    assert value is not None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
