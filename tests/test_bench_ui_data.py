"""``python -m bench.ui_data``: what it writes is what the store reads, on both engines.

A few hundred sessions of every kind (done, dead letters with blocked lanes, live and
expired claims, ready, retrying, waiting, scheduled, cancelled); the counts the
generator reports are checked against the store's own reads: totals, dead letters
and what they block, claims in flight, the overview, and each kind's example session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import a2sql
from bench import ui_data


def test_the_store_reads_what_the_generator_wrote(url: str) -> None:
    written = ui_data.load(url, sessions=400, events_per_session=6, seed=7)
    assert written.sessions == 400
    assert written.events == 400 * 6
    for kind in ui_data.KINDS:
        assert written.sessions_by_kind[kind] >= 1, kind
        assert kind in written.examples
    assert written.dead_letters >= 4 and written.blocked >= 1
    assert written.claimed >= 4 and written.expired_claims >= 1
    assert written.waiting >= 4 and written.scheduled >= 4
    assert written.snapshots + written.presence > 0

    found = ui_data.check(url, written)  # raises when the store reads otherwise
    assert found["totals"]["dead_letters"] == written.dead_letters

    with a2sql.create_store(url, migrate=False) as store:
        totals = store.inspect.totals()
        assert (totals.sessions, totals.events) == (written.sessions, written.events)
        assert totals.pending == written.pending
        assert totals.claimed == written.claimed
        assert totals.dead_letters == written.dead_letters
        assert totals.waiting == written.waiting
        assert totals.scheduled == written.scheduled
        assert totals.oldest_pending_at == written.oldest_pending_at

        flight = store.inspect.in_flight(limit=1000)
        assert len(flight.live) == written.claimed
        assert len(flight.expired) == written.expired_claims
        assert all(ev.claim_holder and ev.attempt_count == 1 for ev in flight.live)

        overview = store.inspect.overview()
        assert overview.dead_letters == written.dead_letters
        assert overview.claimed == written.claimed
        assert overview.scheduled == written.scheduled
        # The overview's waiting are those whose timeout is ahead; a passed one is ready.
        assert overview.waiting == written.waiting - written.waiting_timeout_passed
        assert overview.ready == (
            written.ready + written.expired_claims + written.waiting_timeout_passed
        )

        dead = store.inspect.list_dead_letters(limit=1000)
        assert len(dead.events) == written.dead_letters and dead.cursor is None
        assert sum(dead.blocking) == written.blocked
        assert all(ev.failure_count == ev.attempt_count >= 3 for ev in dead.events)

        blocked = store.inspect.session(written.examples["blocked"])
        assert blocked is not None and blocked.blocked_count >= 1

        waiting = store.inspect.list_waiting_and_scheduled(written.examples["waiting"])
        assert [ev.waiting for ev in waiting] == [True]
        scheduled = store.inspect.list_waiting_and_scheduled(written.examples["scheduled"])
        assert len(scheduled) == 1 and not scheduled[0].waiting
        assert scheduled[0].claim_expires_at is not None
        assert scheduled[0].claim_expires_at > written.now  # type: ignore[operator]

        # A done session: every event processed by its attempt, causes as the store writes.
        events = store.read(written.examples["done"])
        assert all(ev.processed_at is not None for ev in events)
        for ev in events:
            if ev.cause is not None:
                parent = events[ev.cause.index - 1]
                assert ev.id in (parent.returned_event_ids or [])
                assert parent.processed_by_attempt == ev.cause.attempt


def test_a_database_with_events_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/filled.db"
    ui_data.load(url, sessions=20, events_per_session=2, seed=1, analyze=False)
    with pytest.raises(SystemExit, match="already has rows"):
        ui_data.load(url, sessions=20, events_per_session=2, seed=1)


def test_the_same_seed_writes_the_same_sessions() -> None:
    """Deterministic for a seed and a time: the same plan, kinds and counts."""
    one, two = (
        ui_data.Generator(sessions=300, events_per_session=5, seed=3, now_ms=1_800_000_000_000)
        for _ in range(2)
    )
    rows = [[row for batch in g.batches(10_000) for row in batch[0]] for g in (one, two)]
    assert rows[0] == rows[1]
    assert len(rows[0]) == 1500
    assert one.written == two.written
