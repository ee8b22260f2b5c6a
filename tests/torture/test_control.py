"""Waits, later events, signals and cancels racing a2sql's Workers (SPEC §7), briefly
(bench/torture/control.py; ``python -m bench.torture --scenario control`` runs it for
longer).

Worker processes handle events whose handlers return waiting and later events;
controller processes signal (some signals sent again with their id, some to no
waiter) and cancel sessions meanwhile. Checked with the database as the witness:
no event processed twice (the handlers' effects, committed with their completions,
at most once, never for a cancelled event), no wait left behind by a signal that
came after its cause nor claimed before its signal or timeout, every event there
before a cancel processed by it, and the usual: gapless indexes, times never going
back, lanes first in first out.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert, update

import a2sql
from a2sql.core.records import NO_TIMEOUT
from a2sql.sql.schema import events as E
from bench.torture.common import Report, Target, read_logs
from bench.torture.control import (
    EFFECTS,
    ControlCheck,
    ControlConfig,
    kind_of,
    payload_of,
    run_control,
    waits_left_problems,
    writes_effect,
)
from tests.torture.conftest import assert_clean


def test_signals_and_cancels_racing_workers_lose_no_wake_up_and_process_nothing_twice(
    torture_target: Target, seed: int, tmp_path: Path
) -> None:
    """§7 under contention: every invariant holds, and the run did what it claims
    (wakes by signal, at append and by timeout; replays; signals to no waiter;
    cancels landing on claimed events)."""
    report = run_control(
        ControlConfig(
            target=torture_target,
            workers=3 if torture_target.engine == "sqlite" else 4,
            duration=5,
            seed=seed,
            drain_timeout=30,
            log_dir=str(tmp_path / "logs"),
        )
    )
    assert_clean(report)
    figures = report.figures
    assert figures["processed"] >= 50, figures
    assert figures["effects"] > 0 and figures["outcome_superseded"] > 0, figures
    assert figures["wakes"] > 0 and figures["woken_on_append"] > 0, figures
    assert figures["waits_timed_out"] > 0 and figures["laters"] > 0, figures
    assert figures["signals_replayed"] > 0 and figures["signals_waking_none"] > 0, figures
    assert figures["cancelled"] > 0 and figures["cancelled_after_a_claim"] > 0, figures
    assert figures["cancels_with_marker"] > 0, figures


def test_control_checks_catch_forged_doubles_lost_wake_ups_and_late_cancels(
    seed: int, tmp_path: Path
) -> None:
    """The checks have teeth: an effect committed twice, an effect of a cancelled event, a
    superseded attempt's event, a wait left behind by a signal after its cause, a wait a
    signal passed over, and an event processed after a cancel it was there for."""
    target = Target("sqlite", f"sqlite:///{tmp_path / 'forged.db'}")
    log_dir = tmp_path / "logs"
    config = ControlConfig(
        target=target, workers=2, duration=3, seed=seed, drain_timeout=30, log_dir=str(log_dir)
    )
    report = run_control(config)
    assert_clean(report)
    records, _ = read_logs(log_dir)
    woken = {(r["s"], i): r["idx"] for r in records if r["k"] == "signal" for i in r["woken"]}
    marked = [r for r in records if r["k"] == "cancel" and r["marker"] is not None]
    with a2sql.create_store(target.url) as store:
        sessions = store.inspect.list_sessions(prefix=report.prefix, limit=1000).sessions
        events = [e for s in sessions for e in store.read(s.session_id)]
        work = [e for e in events if kind_of(e) is not None]
        with_effect = next(e for e in work if e.processed_by_attempt and writes_effect(seed, e.id))
        cancelled = next(e for e in work if e.processed_at and e.processed_by_attempt is None)
        child = next(e for e in work if e.cause is not None)
        signalled = next(e for e in work if (e.session_id, e.index) in woken)
        # A wait a signal woke once it was appended, as if the signal had not woken it.
        at = {(e.session_id, e.index): e for e in events}
        passed = next(
            (e, r)
            for r in records
            if r["k"] == "signal"
            for e in work
            if e.session_id == r["s"]
            and e.index in r["woken"]
            and e != signalled
            and e.first_claimed_at is not None
            and e.first_claimed_at > at[(r["s"], r["idx"])].created_at
        )
        passed[1]["woken"].remove(passed[0].index)
        # An event there before a cancel whose marker says where it fell.
        before, cancel = next(
            (e, r)
            for r in marked
            for e in work
            if e.session_id == r["s"] and e.index < r["marker"] and e != signalled
        )
        marker_at = next(
            e.created_at
            for e in events
            if e.session_id == cancel["s"] and e.index == cancel["marker"]
        )
        # One of two or more events a cancel stopped, left carrying its reason unprocessed
        # (the check once crashed comparing that missing time with its neighbours').
        forged_already = {
            (e.session_id, e.index)
            for e in (with_effect, cancelled, child, signalled, passed[0], before)
        }
        stopped_by: dict[str | None, list[a2sql.StoredEvent]] = defaultdict(list)
        for e in work:
            if e.processed_at and e.processed_by_attempt is None:
                stopped_by[e.last_error].append(e)
        unprocessed = next(
            e
            for group in stopped_by.values()
            if len(group) > 1
            for e in group
            if (e.session_id, e.index) not in forged_already
        )
        with store.engine.begin() as connection:
            connection.execute(
                update(E)
                .where(E.c.session_id == unprocessed.session_id, E.c.idx == unprocessed.index)
                .values(processed_at=None)
            )
            for event in (with_effect, cancelled):
                connection.execute(
                    insert(EFFECTS).values(
                        session_id=event.session_id,
                        idx=event.index,
                        attempt=event.processed_by_attempt or 1,
                        event_id=event.id,
                        holder="forger",
                    )
                )
            assert child.cause is not None
            connection.execute(
                update(E)
                .where(E.c.session_id == child.session_id, E.c.idx == child.index)
                .values(
                    cause=f'{{"index":{child.cause.index},"attempt":{child.cause.attempt + 7}}}'
                )
            )
            connection.execute(
                update(E)
                .where(E.c.session_id == before.session_id, E.c.idx == before.index)
                .values(processed_at=marker_at + timedelta(seconds=5))
            )
            # Left waiting although the signal that woke it came after its cause.
            connection.execute(
                update(E)
                .where(E.c.session_id == signalled.session_id, E.c.idx == signalled.index)
                .values(
                    processed_at=None,
                    processed_by_attempt=None,
                    first_claimed_at=None,
                    claim_holder=None,
                    claim_expires_at=NO_TIMEOUT,
                    wake_on=payload_of(signalled)["waits"],
                )
            )
        forged = {s.session_id: store.read(s.session_id) for s in sessions}
        left = "\n".join(waits_left_problems(forged, time_of_check=0))
        recheck = Report("recheck", "sqlite", seed)
        ControlCheck(store, config, report.prefix, records, recheck).run()
    found = "\n".join(recheck.anomalies)
    assert "a lost wake-up" in left, left
    assert "its effect committed 2 times" in found, found
    assert "cancelled, yet effects of attempts" in found, found
    assert "a superseded attempt's events" in found, found
    assert "never processed" in found, found
    assert "was there before the cancel" in found, found
    assert f"#{passed[0].index} ({passed[0].id!r}): waited for" in found, found
    assert "did not wake it" in found, found
    assert f"events [{unprocessed.index}] carry its reason, not processed" in found, found
