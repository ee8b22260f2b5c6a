"""SPEC §7 schedules: each slot's event appended once, by every worker that runs the
schedule, with no leader; at most ``catch_up`` late slots after a pause.

The slot arithmetic is checked on its own; workers run on both engines (the ``url``
fixture) with a fake clock moved by the test, and, at the end, three worker
processes on one real clock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, Schedule, Store
from a2sql.testing import FakeClock
from a2sql.worker import AsyncWorker, Backoff, Worker

T0 = datetime(2026, 12, 7, 16, 0, 7, 300_000, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def every(seconds: int, **options: object) -> Schedule:
    return Schedule(
        "tick", every=timedelta(seconds=seconds), session_id="s", type="tick", **options
    )  # type: ignore[arg-type]


# --- slots ----------------------------------------------------------------------------


def test_slots_of_a_period_are_counted_from_the_epoch() -> None:
    """A slot of ``every`` starts at a multiple of it since 1970-01-01 UTC; ``due`` gives
    the most recent ``catch_up`` that have started, oldest first."""
    schedule = every(5, catch_up=3)
    assert schedule.due(T0) == [
        datetime(2026, 12, 7, 15, 59, 55, tzinfo=UTC),
        datetime(2026, 12, 7, 16, 0, 0, tzinfo=UTC),
        datetime(2026, 12, 7, 16, 0, 5, tzinfo=UTC),
    ]
    assert schedule.next_slot(T0) == datetime(2026, 12, 7, 16, 0, 10, tzinfo=UTC)
    start = datetime(2026, 12, 7, 16, 0, 5, tzinfo=UTC)
    assert schedule.due(start)[-1] == start  # a slot is due from its first instant
    assert schedule.event_id(start) == "tick@2026-12-07T16:00:05Z"


def test_slots_of_a_cron_expression_are_its_times_in_utc() -> None:
    """``cron`` names the slots, in UTC: the nightly one at 02:00."""
    nightly = Schedule("nightly", cron="0 2 * * *", session_id="digests", type="digest", catch_up=2)
    assert nightly.due(T0) == [
        datetime(2026, 12, 6, 2, tzinfo=UTC),
        datetime(2026, 12, 7, 2, tzinfo=UTC),
    ]
    assert nightly.next_slot(T0) == datetime(2026, 12, 8, 2, tzinfo=UTC)
    at_two = datetime(2026, 12, 8, 2, tzinfo=UTC)
    assert nightly.due(at_two)[-1] == at_two
    event = nightly.event(at_two)
    assert (event.type, event.id, event.lane) == ("digest", "nightly@2026-12-08T02:00:00Z", None)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({}, "either every= or cron="),
        ({"every": SECOND, "cron": "* * * * *"}, "either every= or cron="),
        ({"every": timedelta(milliseconds=1500)}, "whole number of seconds"),
        ({"every": timedelta(0)}, "at least one second"),
        ({"cron": "0 2 * * * *"}, "must have five fields"),  # cronsim would read seconds
        ({"cron": "@daily"}, "must have five fields"),
        ({"every": 5}, "must be a timedelta"),
        ({"cron": "every day at two"}, "must have five fields"),
        ({"cron": "0 25 * * *"}, "is not a cron expression"),
        ({"every": SECOND, "catch_up": 0}, "catch_up"),
        ({"every": SECOND, "payload": {1, 2}}, "payload"),
    ],
)
def test_a_bad_schedule_is_refused_when_made(options: dict[str, object], says: str) -> None:
    """A schedule is checked when it is made: INVALID_ARGUMENT, saying what is wrong."""
    with pytest.raises(A2Error) as raised:
        Schedule("x", session_id="s", type="t", **options)  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.INVALID_ARGUMENT
    assert says in raised.value.message


def test_a_worker_refuses_two_schedules_of_one_name(tmp_path: Path) -> None:
    """Their events' ids would collide: ``schedules=`` names each once."""
    with (
        a2sql.create_store(f"sqlite:///{tmp_path / 'a.db'}") as store,
        pytest.raises(A2Error) as raised,
    ):
        Worker(store, lambda attempt: None, schedules=[every(1), every(2)])
    assert "repeats the name 'tick'" in raised.value.message


# --- workers on a moved clock -----------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(url: str, clock: FakeClock) -> Iterator[Store]:
    with a2sql.create_store(url, clock=clock, migrate=True) as opened:
        yield opened


def ids(store: Store) -> list[str]:
    return [event.id for event in store.read("s")]


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def running(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_workers_append_each_slot_once_between_them(store: Store, clock: FakeClock) -> None:
    """Three workers run one schedule: each slot's event is appended once, with its slot
    in its id, and the handlers get each once."""
    handled: list[str] = []
    lock = threading.Lock()

    def handler(attempt: a2sql.worker.Attempt) -> None:
        with lock:
            handled.append(attempt.event.id)

    workers = [
        Worker(store, handler, schedules=[every(1)], poll_interval=0.05, backoff=Backoff.none())
        for _ in range(3)
    ]
    threads = [running(worker) for worker in workers]
    try:
        wait_for(lambda: ids(store) == ["tick@2026-12-07T16:00:07Z"])
        for appended in range(2, 6):
            clock.advance(ms=1000)
            wait_for(lambda n=appended: len(ids(store)) == n)
        wait_for(lambda: len(handled) == 5)
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(30)
    assert ids(store) == [f"tick@2026-12-07T16:00:{second:02d}Z" for second in range(7, 12)]
    assert sorted(handled) == ids(store)


def test_after_a_pause_at_most_catch_up_late_slots_are_appended(
    store: Store, clock: FakeClock
) -> None:
    """No worker ran for ten slots: the next appends the most recent ``catch_up`` of them
    (the one due now among them), not the ten."""
    worker = Worker(store, lambda attempt: None, schedules=[every(1, catch_up=3)])
    thread = running(worker)
    wait_for(lambda: len(ids(store)) == 3)
    worker.stop()
    thread.join(30)
    assert ids(store) == [f"tick@2026-12-07T16:00:{second:02d}Z" for second in (5, 6, 7)]

    clock.advance(ms=10_000)
    again = Worker(store, lambda attempt: None, schedules=[every(1, catch_up=3)])
    thread = running(again)
    wait_for(lambda: len(ids(store)) == 6)
    again.stop()
    thread.join(30)
    assert ids(store)[3:] == [f"tick@2026-12-07T16:00:{second:02d}Z" for second in (15, 16, 17)]


def test_an_async_worker_runs_schedules_too(url: str) -> None:
    """``AsyncWorker(schedules=...)``: the same slots, the same ids."""
    clock = FakeClock(T0)

    async def main() -> list[str]:
        async with a2sql.create_async_store(url, clock=clock, migrate=True) as store:

            async def handler(attempt: a2sql.worker.AsyncAttempt) -> None:
                return None

            worker = AsyncWorker(store, handler, schedules=[every(1)], poll_interval=0.05)
            serving = asyncio.create_task(worker.run())
            for _ in range(200):
                if len(await store.read("s")) == 1:
                    break
                await asyncio.sleep(0.02)
            clock.advance(ms=1000)
            for _ in range(200):
                if len(await store.read("s")) == 2:
                    break
                await asyncio.sleep(0.02)
            worker.stop()
            await asyncio.wait_for(serving, 30)
            return [event.id for event in await store.read("s")]

    assert asyncio.run(main()) == ["tick@2026-12-07T16:00:07Z", "tick@2026-12-07T16:00:08Z"]


def test_a_schedule_event_holds_its_payload_and_lane(store: Store) -> None:
    """The slot's event is ``type`` with ``payload`` in ``lane``, as a handler would get it."""
    schedule = Schedule(
        "digest", every=SECOND, session_id="s", type="digest", payload={"k": 1}, lane="L"
    )
    worker = Worker(store, lambda attempt: None, schedules=[schedule])
    thread = running(worker)
    wait_for(lambda: len(ids(store)) == 1)
    worker.stop()
    thread.join(30)
    [event] = store.read("s")
    assert (event.type, event.payload, event.lane) == ("digest", {"k": 1}, "L")
    assert store.append("s", [NewEvent("x")]).events[0].index == 2


# --- three processes, one real clock ----------------------------------------------------

APP = """
from datetime import timedelta

import a2sql

tick = a2sql.Schedule("tick", every=timedelta(seconds=1), session_id="ticks", type="tick")


def handle(attempt):
    return None
"""


def _start(url: str, folder: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "a2sql.cli",
            "worker",
            "app:handle",
            "--url",
            url,
            "--schedule",
            "app:tick",
            "--poll-interval",
            "0.2",
        ],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def _slots(url: str) -> Counter[str]:
    with a2sql.create_store(url) as store:
        return Counter(event.id for event in store.read("ticks"))


def test_three_worker_processes_append_one_event_a_second(url: str, tmp_path: Path) -> None:
    """Three `a2sql worker --schedule` processes run a 1 s schedule for 10 s: 10 ± 1
    events, never two for one slot. All stopped for 5 s, then started again: at most
    ``catch_up`` (1) late slot is appended for the five missed."""
    (tmp_path / "app.py").write_text(APP)
    a2sql.create_store(url, migrate=True).close()
    processes = [_start(url, tmp_path) for _ in range(3)]
    try:
        wait_for(lambda: len(_slots(url)) >= 1, timeout=30)
        first = time.monotonic()
        time.sleep(10 - (time.monotonic() - first))
        counted = _slots(url)
    finally:
        _stop(processes)
    assert 10 <= sum(counted.values()) <= 12, counted  # the first, then ten seconds of them
    assert set(counted.values()) == {1}, counted

    stopped = _slots(url)
    time.sleep(5)
    processes = [_start(url, tmp_path) for _ in range(3)]
    try:
        wait_for(lambda: len(_slots(url)) > len(stopped), timeout=30)
        restarted_at = datetime.now(UTC)
    finally:
        _stop(processes)
    after = _slots(url)
    assert set(after.values()) == {1}, after
    late = sorted(set(after) - set(stopped))
    # The slots the restart appended: the one due when it started (catch_up=1), and any
    # that began while it ran; none of the ones missed before it.
    last_before = max(stopped)
    for slot in late:
        started = datetime.strptime(slot.split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert started > datetime.strptime(last_before.split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=UTC
        ) + timedelta(seconds=4), (late, last_before)
        assert started <= restarted_at
