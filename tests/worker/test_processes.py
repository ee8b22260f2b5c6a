"""The worker as real processes: `a2sql worker` pools, SIGKILL take-over, SIGTERM release.

The database is the witness: every check reads what was committed, not what
the workers said.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

import a2sql
from a2sql import NewEvent, Store
from a2sql.worker import Worker

APP = textwrap.dedent(
    """
    import os
    import time

    from sqlalchemy import Column, Integer, MetaData, String, Table, insert

    meta = MetaData()
    handled = Table(
        "app_handled",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("session_id", String(255), nullable=False),
        Column("idx", Integer, nullable=False),
        Column("lane", String(255)),
        Column("pid", Integer, nullable=False),
    )


    def record(attempt):
        attempt.connection.execute(
            insert(handled).values(
                session_id=attempt.session_id,
                idx=attempt.event.index,
                lane=attempt.event.lane,
                pid=os.getpid(),
            )
        )


    def slow(attempt):
        time.sleep(float(attempt.event.payload))
    """
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def no_worker_left_behind() -> Iterator[None]:
    """A failing test must not leave worker processes running."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            # Its worker processes have process groups of their own.
            subprocess.run(["pkill", "-KILL", "-P", str(process.pid)], check=False)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=30)


def a2sql_worker(app_dir: Path, url: str, handler: str, *options: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "a2sql.cli", "worker", f"app:{handler}", "--url", url]
    process = subprocess.Popen(
        [*command, *options],
        cwd=app_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,  # its own process group, as a shell job has
    )
    STARTED.append(process)
    return process


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def test_four_worker_processes_process_every_event_once_in_lane_order(
    store: Store, app_dir: Path, url: str
) -> None:
    """`a2sql worker --concurrency 4` over 200 sessions with lanes: each event is
    processed exactly once (one committed row of the handler's each, one completion),
    and within each lane in index order."""
    sys.path.insert(0, str(app_dir))
    try:
        import app  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(app_dir))
    app.meta.create_all(store.engine)
    layout = ["L1", "L2", "L1", None, "L2", "L1"]
    for n in range(200):
        store.append(f"order-{n:03d}", [NewEvent("step", n, lane=lane) for lane in layout])
    process = a2sql_worker(
        app_dir,
        url,
        "record",
        "--concurrency",
        "4",
        "--until-idle",
        "--transactional",
        "--poll-interval",
        "0.1",
        "--prefix",
        "order-",
    )
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    with store.engine.connect() as connection:
        rows = connection.execute(
            text("select id, session_id, idx, lane, pid from app_handled order by id")
        ).all()
        unprocessed = connection.execute(
            text("select count(*) from a2_events where processed_by_attempt is null")
        ).scalar_one()
    assert unprocessed == 0
    assert len(rows) == 200 * len(layout)
    assert len({(r.session_id, r.idx) for r in rows}) == len(rows)  # exactly once
    order: dict[tuple[str, str], list[int]] = defaultdict(list)
    for row in rows:  # in the order the handlers committed their rows
        if row.lane is not None:
            order[(row.session_id, row.lane)].append(row.idx)
    assert all(indexes == sorted(indexes) for indexes in order.values())
    assert len({r.pid for r in rows}) >= 2, "the work was not shared between processes"
    assert err.count("outcome=completed") == len(rows)


def test_a_killed_workers_events_are_taken_over_after_the_lease(
    store: Store, app_dir: Path, url: str
) -> None:
    """SIGKILL mid-handler: nobody releases the claim; another worker takes the event
    as a new attempt once the lease (1 s) ends, not before."""
    store.append("s", [NewEvent("slow", 60)])
    process = a2sql_worker(app_dir, url, "slow", "--ttl-ms", "1000")
    try:
        wait_for(lambda: store.read("s")[0].claim_holder is not None)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    [held] = store.read("s")
    assert held.claim_expires_at is not None
    worker = Worker(store, lambda attempt: None, poll_interval=0.05)
    worker.run(until_idle=True)
    done_at = a2sql.SystemClock().now()
    [event] = store.read("s")
    assert (event.processed_by_attempt, event.attempt_count) == (2, 2)
    assert event.last_claimed_at is not None and event.last_claimed_at >= held.claim_expires_at
    assert done_at >= held.claim_expires_at


def test_a_terminated_worker_finishes_its_handler_and_releases_the_rest(
    store: Store, app_dir: Path, url: str
) -> None:
    """SIGTERM: the running handler finishes, the claims not started are released, and
    another worker takes them at once, long before their 60 s lease."""
    store.append("s", [NewEvent("slow", 0.5) for _ in range(3)])
    process = a2sql_worker(app_dir, url, "slow", "--ttl-ms", "60000")
    wait_for(lambda: all(e.claim_holder is not None for e in store.read("s")))
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]
    first, *rest = store.read("s")
    assert first.processed_by_attempt == 1
    assert all((e.claim_holder, e.attempt_count, e.processed_at) == (None, 1, None) for e in rest)
    assert err.count("outcome=released") == 2
    started = time.monotonic()
    assert Worker(store, lambda attempt: None).run_session("s") == "settled"
    assert time.monotonic() - started < 10
    assert [e.processed_by_attempt for e in store.read("s")] == [1, 2, 2]


def test_a_worker_command_with_a_missing_handler_says_so_in_one_line(
    app_dir: Path, url: str
) -> None:
    """`a2sql worker` naming a handler that does not exist exits 2 with one clear line."""
    process = a2sql_worker(app_dir, url, "nothing_here")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert err.strip().splitlines() == [
        "a2sql: INVALID_ARGUMENT: handler 'app:nothing_here': 'app' has no 'nothing_here'"
    ]


def test_ctrl_c_on_a_pool_of_processes_stops_each_gracefully(
    store: Store, app_dir: Path, url: str
) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) on
    `--concurrency 2`: every process finishes its running handler and releases the
    rest; none is cut short by the signal arriving twice (the terminal's and the
    parent's)."""
    for name in ("a", "b"):
        store.append(name, [NewEvent("slow", 0.5) for _ in range(3)])
    process = a2sql_worker(app_dir, url, "slow", "--concurrency", "2", "--ttl-ms", "60000")
    wait_for(lambda: all(e.claim_holder is not None for n in ("a", "b") for e in store.read(n)), 60)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    for name in ("a", "b"):
        first, *rest = store.read(name)
        assert first.processed_by_attempt == 1
        assert all((e.claim_holder, e.processed_at) == (None, None) for e in rest)
    assert err.count("outcome=released") == 4
