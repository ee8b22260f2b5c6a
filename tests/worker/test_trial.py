"""The agent runtime trial, small: a pool whose handlers wait on a model call and commit
the app's row with ``Outcome(write=...)``, one of its processes SIGKILLed mid-run.

The database is the witness: every event processed, the app's table written exactly
once per event, lanes in index order. No timing is asserted here; ``bench.worker_trial``
runs the trial at size and times it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

import a2sql
from a2sql import NewEvent, Store
from a2sql.sql.schema import events
from bench.worker_trial import kill_holding_a_claim, load_app, write_app
from tests.worker.test_processes import (
    a2sql_worker,
    no_worker_left_behind,  # noqa: F401 (autouse: kills what a failing test left running)
    wait_for,
    wait_for_children,
)

SESSIONS = 20
LANES = ("L1", "L2", "L1")  # 60 events: two in L1, one in L2, per session


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


def processed(store: Store) -> int:
    with store.engine.connect() as connection:
        return int(
            connection.execute(
                select(func.count()).select_from(events).where(events.c.processed_at.is_not(None))
            ).scalar_one()
        )


def test_a_pool_writes_the_apps_rows_exactly_once_though_a_process_is_killed(
    store: Store, url: str, tmp_path: Path
) -> None:
    """`a2sql worker --processes 3 --ttl-ms 1500` over 60 events in 20 sessions with
    lanes, handlers sleeping 20-60 ms and returning ``Outcome(events=[reply],
    write=insert a usage row)``; child 1 is SIGKILLed while it holds a claim, once some
    events are processed. Every event ends processed with one reply, the claims the
    killed child held are completed by later attempts, and ``usage`` (no unique
    constraint) holds exactly one row per event, inserted in index order within each
    lane."""
    app = load_app(write_app(tmp_path, (0.02, 0.06)))
    app.meta.create_all(store.engine)
    keys = []
    for n in range(SESSIONS):
        session_id = f"chat-{n:02d}"
        store.append(
            session_id,
            [
                NewEvent("message", i, id=f"{session_id}/{i}", lane=lane)
                for i, lane in enumerate(LANES)
            ],
        )
        keys += [(session_id, index) for index in range(1, len(LANES) + 1)]
    log = tmp_path / "pool.log"
    process = a2sql_worker(
        tmp_path,
        url,
        "outcome",
        "--processes",
        "3",
        "--ttl-ms",
        "1500",
        "--until-idle",
        "--poll-interval",
        "0.05",
        log=log,
    )
    victim = wait_for_children(log, 3)[1]
    killed: list[dict[tuple[str, int], int]] = []

    def killed_holding_a_claim() -> bool:
        if processed(store) >= 6:
            held = kill_holding_a_claim(victim, store.engine)
            if held is not None:
                killed.append(held)
        return bool(killed)

    wait_for(killed_holding_a_claim, 60)
    process.communicate(timeout=120)
    assert process.returncode == 0, log.read_text()[-3000:]
    assert f"(pid {victim}) ended: signal SIGKILL" in log.read_text()

    with store.engine.connect() as connection:
        handled = connection.execute(
            select(
                events.c.session_id,
                events.c.idx,
                events.c.lane,
                events.c.processed_by_attempt,
                events.c.failed_at,
                events.c.claim_holder,
            )
            .where(events.c.event_type == "message")
            .order_by(events.c.session_id, events.c.idx)
        ).all()
        replies = connection.execute(
            select(func.count()).select_from(events).where(events.c.event_type == "reply")
        ).scalar_one()
        usage = connection.execute(
            select(app.usage.c.session_id, app.usage.c.idx).order_by(app.usage.c.id)
        ).all()
    assert [(e.session_id, e.idx) for e in handled] == keys
    assert all(e.processed_by_attempt is not None for e in handled), "not all processed"
    assert all((e.failed_at, e.claim_holder) == (None, None) for e in handled)
    assert replies == len(keys)
    attempts = {(e.session_id, e.idx): e.processed_by_attempt for e in handled}
    [held] = killed
    assert held and all(attempts[key] > attempt for key, attempt in held.items())
    written = Counter((row.session_id, row.idx) for row in usage)
    assert sorted(written) == keys, "a usage row missing, or one not of an event"
    assert {key: n for key, n in written.items() if n != 1} == {}, "written more than once"
    lane_of = {(e.session_id, e.idx): e.lane for e in handled}
    order: dict[tuple[str, str], list[int]] = defaultdict(list)
    for row in usage:  # in the order the rows were inserted
        order[(row.session_id, lane_of[(row.session_id, row.idx)])].append(row.idx)
    assert all(indexes == sorted(indexes) for indexes in order.values())
    assert sum(len(indexes) > 1 for indexes in order.values()) == SESSIONS  # L1's pairs
