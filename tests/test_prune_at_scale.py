"""prune over 2,500 settled and 100 live sessions, on SQLite and PostgreSQL (SPEC §6): more
than one call's worth (1,000 sessions), so prune is called until it is done.
``python -m bench.operations`` prunes 10,000 sessions and times it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event

import a2sql
from a2sql import NewEvent, Store
from a2sql.testing import FakeClock

OLD_SETTLED = 2_500
LIVE = 100
NEW_SETTLED = 100


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    clock = FakeClock()
    with a2sql.create_store(url, clock=clock, migrate=True) as opened:
        yield opened


def _fill(store: Store, clock: FakeClock) -> None:
    """Old settled sessions (some with a snapshot), live ones (pending, claimed, dead-lettered),
    then after the cut settled ones that are too new. One transaction per group."""
    with store.begin() as connection:
        view = store.using(connection)
        for n in range(OLD_SETTLED):
            view.append(f"s/{n:05}", [NewEvent("done", settled=True), NewEvent("x", settled=True)])
            if n % 10 == 0:
                view.put_snapshot(f"s/{n:05}", "r", 2, {"n": n})
        for n in range(LIVE):
            sid = f"s/live-{n:03}"
            view.append(sid, [NewEvent("done", settled=True), NewEvent("work")])
            if n % 3 == 1:
                view.claim_available(sid, holder="w", ttl_ms=60_000)
            elif n % 3 == 2:
                [claimed] = view.claim_available(sid, holder="w", ttl_ms=60_000).events
                view.fail_attempt(
                    sid, index=2, attempt=claimed.attempt_count, error="x", max_failures=1
                )
    clock.advance(seconds=60)
    with store.begin() as connection:
        view = store.using(connection)
        for n in range(NEW_SETTLED):
            view.append(f"s/new-{n:03}", [NewEvent("done", settled=True)])


def test_prune_deletes_exactly_the_old_settled_sessions_one_transaction_each(
    store: Store,
) -> None:
    """§6 prune: exactly the settled sessions older than the cut go; each session is
    deleted in a transaction that touches no other session."""
    clock = store.clock
    assert isinstance(clock, FakeClock)
    _fill(store, clock)
    cut = clock.now() - timedelta(seconds=30)

    transactions: list[set[Any]] = [set()]

    def statement(_conn: Any, _cursor: Any, sql: str, params: Any, *_rest: Any) -> None:
        if sql.lstrip().upper().startswith("DELETE"):
            values = params.values() if isinstance(params, dict) else params
            transactions[-1].update(values)

    def ended(_conn: Any) -> None:
        transactions.append(set())

    event.listen(store.engine, "before_cursor_execute", statement)
    event.listen(store.engine, "commit", ended)
    event.listen(store.engine, "rollback", ended)
    totals = []
    while (result := store.prune(settled_before=cut, prefix="s/")).sessions:
        assert result.sessions <= 1000
        totals.append(result)
    event.remove(store.engine, "before_cursor_execute", statement)

    assert sum(r.sessions for r in totals) == OLD_SETTLED
    assert sum(r.events for r in totals) == 2 * OLD_SETTLED
    assert sum(r.snapshots for r in totals) == OLD_SETTLED // 10
    deleting = [sessions for sessions in transactions if sessions]
    assert len(deleting) == OLD_SETTLED
    assert all(len(sessions) == 1 for sessions in deleting)

    remaining = []
    cursor = None
    while True:
        page = store.inspect.list_sessions(prefix="s/", cursor=cursor, limit=1000)
        remaining += [s.session_id for s in page.sessions]
        if (cursor := page.cursor) is None:
            break
    assert remaining == [f"s/live-{n:03}" for n in range(LIVE)] + [
        f"s/new-{n:03}" for n in range(NEW_SETTLED)
    ]
