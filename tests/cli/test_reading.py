"""The reading commands, in this process, on SQLite and PostgreSQL (`--json` parsed)."""

from __future__ import annotations

from pathlib import Path

from a2sql import NewEvent, Store
from tests.cli.conftest import Cli


def test_status_counts_the_database(cli: Cli, populated: tuple[Store, str]) -> None:
    """status: URL (password hidden), engine, revision, counts, oldest pending."""
    store, url = populated
    found = cli("status", "--url", url, "--json").json()
    assert found["engine"] == store.engine.dialect.name
    assert found["revision"] == found["head"] == "0005_lean_indexes"
    assert (found["sessions"], found["events"]) == (3, 9)
    # order-1: 2 claimed, 3 waiting, 5 blocked, 6 retrying; order-17: 1.
    assert (found["pending"], found["claimed"], found["dead_letters"]) == (5, 1, 1)
    assert found["oldest_pending_at"].endswith("Z") and found["oldest_pending_age_s"] >= 0
    plain = cli("status", "--url", url)
    assert plain.code == 0
    assert "dead letters: 1" in plain.lines()


def test_sessions_by_prefix_plain_and_json(cli: Cli, populated: tuple[Store, str]) -> None:
    """sessions: a prefix is a prefix here; plain output is a tab-separated table."""
    _, url = populated
    found = cli("sessions", "--url", url, "--prefix", "order-", "--json").json()
    assert [s["session_id"] for s in found["sessions"]] == ["order-1", "order-17"]
    first = found["sessions"][0]
    assert (first["pending_count"], first["claimed_count"], first["blocked_count"]) == (4, 1, 1)
    plain = cli("sessions", "--url", url, "--limit", "1")
    header, row = plain.lines()
    assert header.split("\t") == [
        "session",
        "events",
        "pending",
        "claimed",
        "dead",
        "blocked",
        "updated",
    ]
    assert row.split("\t")[:6] == ["old", "1", "0", "0", "0", "0"]
    assert "pass --after old" in plain.err
    rest = cli("sessions", "--url", url, "--after", "old", "--json").json()
    assert [s["session_id"] for s in rest["sessions"]] == ["order-1", "order-17"]


def test_session_is_exact_and_a_missing_one_fails_in_one_line(
    cli: Cli, populated: tuple[Store, str]
) -> None:
    """session ID: the exact id; an unknown id is one line on stderr and exit 1."""
    _, url = populated
    found = cli("session", "order-1", "--url", url, "--json").json()
    assert found["session"]["event_count"] == 7
    assert [s["reducer_name"] for s in found["snapshots"]] == ["summary"]
    missing = cli("session", "order-", "--url", url)
    assert missing.code == 1
    assert missing.out == ""
    assert missing.err.strip().splitlines()[-1] == "a2sql: no session 'order-' (it has no events)"


def test_events_name_each_state(cli: Cli, populated: tuple[Store, str]) -> None:
    """events ID: processed, claimed (by whom), pending behind the lane, dead-lettered,
    blocked, retrying, settled."""
    _, url = populated
    found = cli("events", "order-1", "--url", url, "--json").json()
    states = [(e["index"], e["state"]) for e in found["events"]]
    assert states == [
        (1, "processed"),
        (2, "claimed"),
        (3, "pending"),
        (4, "dead-lettered"),
        (5, "blocked"),
        (6, "retrying"),
        (7, "settled"),
    ]
    details = {e["index"]: e["detail"] for e in found["events"]}
    assert details[1] == "by attempt 1"
    assert details[2].startswith("by w2 until ")
    assert details[4] == "after 1 failures: boom"
    assert details[6].startswith("failed once: later; claimable at ")
    page = cli("events", "order-1", "--url", url, "--after", "5", "--limit", "1").lines()
    assert page[0].split("\t")[:4] == ["index", "type", "lane", "state"]
    assert page[1].split("\t")[:4] == ["6", "audit", "-", "retrying"]


def test_dead_letters_say_what_they_block(cli: Cli, populated: tuple[Store, str]) -> None:
    """dead-letters: by session then index, with the pending events behind each."""
    _, url = populated
    found = cli("dead-letters", "--url", url, "--json").json()
    [dead] = found["dead_letters"]
    assert (dead["session_id"], dead["index"], dead["blocks"], dead["lane"]) == (
        "order-1",
        4,
        1,
        "report",
    )
    assert (
        cli("dead-letters", "--url", url, "--prefix", "order-17", "--json").json()["dead_letters"]
        == []
    )
    plain = cli("dead-letters", "--url", url)
    assert plain.lines()[1].split("\t") == ["order-1", "4", "report", "report", "1", "1", "boom"]
    assert "a2sql retry order-1 4" in plain.err


def test_a_missing_sqlite_file_is_refused_not_created(cli: Cli, tmp_path: Path) -> None:
    """A mistyped path is one line and exit 2 (3 for migrate --check: no database), and
    leaves no new file; migrate itself creates it."""
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    for args in (["status"], ["sessions"], ["events", "s"], ["migrate", "--check"]):
        ran = cli(*args, "--url", url)
        assert ran.code == (3 if "--check" in args else 2), args
        assert ran.err.strip() == (
            f"a2sql: database {url}: no such database file "
            f"(`a2sql migrate --url {url}` creates one)"
        )
    assert not (tmp_path / "typo.db").exists()
    assert cli("migrate", "--url", url).code == 0
    assert cli("status", "--url", url, "--json").json()["events"] == 0


def test_a2sql_alone_prints_its_help(cli: Cli) -> None:
    """Bare ``a2sql``: the help and exit 0, not a usage error."""
    ran = cli()
    assert ran.code == 0 and ran.out.startswith("Usage: a2sql")
    assert "dead-letters" in ran.out and ran.err == ""


def test_a_session_appended_again_shows_attempt_numbers_and_counts_claims(
    cli: Cli, populated: tuple[Store, str]
) -> None:
    """events: the attempt column is each event's latest attempt number, which after a
    deletion goes on from the deleted session's; session: attempts counts the claims
    of the session's events."""
    store, url = populated
    store.append("again", [NewEvent("t", id="again-1")])
    store.claim_available("again", holder="w", ttl_ms=60_000)
    store.delete_session("again")
    store.append("again", [NewEvent("t", id="again-1")])
    store.claim_available("again", holder="w", ttl_ms=60_000)
    header, row = cli("events", "again", "--url", url).lines()
    assert header.split("\t")[:5] == ["index", "type", "lane", "state", "attempt"]
    assert row.split("\t")[:5] == ["1", "t", "-", "claimed", "2"]
    assert cli("session", "again", "--url", url, "--json").json()["session"]["attempt_count"] == 1
    assert "attempts: 1" in cli("session", "again", "--url", url).lines()
