"""retry, skip, delete and prune from the command line, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from a2sql import Store
from tests.cli.conftest import Cli


def test_retry_requeues_a_dead_letter_and_refuses_anything_else(
    cli: Cli, populated: tuple[Store, str]
) -> None:
    """retry ID INDEX: requeued; not a dead letter is exit 1 and one line."""
    store, url = populated
    done = cli("retry", "order-1", "4", "--url", url)
    assert done.code == 0 and done.out.startswith("requeued order-1 #4")
    event = store.read("order-1")[3]
    assert (event.failed_at, event.failure_count, event.last_error) == (None, 0, "boom\n  at x")
    again = cli("retry", "order-1", "4", "--url", url)
    assert again.code == 1
    assert again.err.strip().splitlines()[-1] == (
        "a2sql: order-1 #4 is not a dead letter: nothing changed"
    )
    missing = cli("retry", "order-1", "99", "--url", url)
    assert (missing.code, missing.err.strip().splitlines()[-1]) == (
        1,
        "a2sql: no event at index 99 in session 'order-1': nothing changed",
    )


def test_skip_needs_a_reason_and_frees_the_lane(cli: Cli, populated: tuple[Store, str]) -> None:
    """skip ID INDEX --reason: the blocked event behind becomes claimable."""
    _, url = populated
    assert cli("skip", "order-1", "4", "--url", url).code == 2  # --reason is required
    blank = cli("skip", "order-1", "4", "--reason", " ", "--url", url)
    assert blank.code == 2 and "reason: must say why" in blank.err
    done = cli("skip", "order-1", "4", "--reason", "no template", "--url", url, "--json").json()
    assert done["outcome"] == "skipped"
    states = {
        e["index"]: e["state"]
        for e in cli("events", "order-1", "--url", url, "--json").json()["events"]
    }
    assert (states[4], states[5]) == ("skipped", "ready")
    assert cli("skip", "order-1", "4", "--reason", "x", "--url", url).code == 1


def test_delete_removes_one_session(cli: Cli, populated: tuple[Store, str]) -> None:
    """delete ID: the exact session, counts printed; a missing one is exit 1."""
    store, url = populated
    done = cli("delete", "order-1", "--yes", "--url", url, "--json").json()
    assert (done["events"], done["snapshots"]) == (7, 1)
    assert store.read("order-1") == [] and len(store.read("order-17")) == 1
    assert cli("delete", "order-1", "--yes", "--url", url).code == 1
    nothing = cli("delete", "order-1", "--yes", "--url", url, "--json")
    assert nothing.code == 1 and json.loads(nothing.out)["events"] == 0


def test_prune_dry_run_then_prune(cli: Cli, populated: tuple[Store, str]) -> None:
    """prune --older-than: the dry run counts, deletes nothing; then the old settled session
    goes and the live ones stay."""
    store, url = populated
    dry = cli("prune", "--older-than", "3d", "--dry-run", "--url", url, "--json").json()
    assert (dry["sessions"], dry["events"], dry["dry_run"]) == (1, 1, True)
    assert len(store.read("old")) == 1
    assert (
        cli("prune", "--older-than", "8d", "--yes", "--url", url, "--json").json()["sessions"] == 0
    )
    done = cli("prune", "--older-than", "3d", "--yes", "--url", url)
    assert done.code == 0 and done.out.startswith("deleted 1 session (1 event, 0 snapshots)")
    assert store.read("old") == []
    assert [s.session_id for s in store.inspect.list_sessions().sessions] == [
        "order-1",
        "order-17",
    ]
