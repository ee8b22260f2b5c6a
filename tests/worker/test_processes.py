"""The worker as real processes: `a2sql worker` pools, SIGKILL take-over, SIGTERM release,
a pool's supervision (restarts, crashes at start, its parent's death).

The database is the witness: every check reads what was committed, not what
the workers said. Processes are found and checked by pid, through /proc.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
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
    import asyncio
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


    async def aslow(attempt):
        await asyncio.sleep(float(attempt.event.payload))
    """
)

# A handler module that a pool's children keep failing to import: the first child to
# import it lives, every later one exits 3 at once (the parent imports it fine).
CRASHING_APP = textwrap.dedent(
    """
    import multiprocessing
    import os
    import time

    if multiprocessing.parent_process() is not None:
        try:
            os.close(os.open("survivor", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            os._exit(3)


    def slow(attempt):
        time.sleep(float(attempt.event.payload))
    """
)


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "crashing.py").write_text(CRASHING_APP)
    return tmp_path


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        yield opened


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def no_worker_left_behind() -> Iterator[None]:
    """A failing test must not leave worker processes running: each `a2sql worker` has a
    process group of its own, its pool's children in it, which may outlive it."""
    yield
    while STARTED:
        process = STARTED.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)


def a2sql_worker(
    app_dir: Path,
    url: str,
    handler: str,
    *options: str,
    module: str = "app",
    log: Path | None = None,
    ignoring_sigint: bool = False,
) -> subprocess.Popen[str]:
    """`a2sql worker module:handler` started in ``app_dir``; its output to ``log`` if given:
    a file, where pipes would stay open after the parent's end, with a pool's children."""
    command = [sys.executable, "-m", "a2sql.cli", "worker", f"{module}:{handler}", "--url", url]
    if ignoring_sigint:  # as a shell's `trap '' INT` leaves it for the command it runs
        command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
    with contextlib.ExitStack() as files:
        output = files.enter_context(log.open("w")) if log is not None else subprocess.PIPE
        process = subprocess.Popen(
            [*command, *options],
            cwd=app_dir,
            stdout=output,
            stderr=output,
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


def started_children(log: Path) -> dict[int, int]:
    """The pool's children by number, as its log has started them: the latest pid of each."""
    found = re.findall(r"child (\d+) started: pid (\d+)", log.read_text())
    return {int(number): int(pid) for number, pid in found}


def wait_for_children(log: Path, count: int) -> dict[int, int]:
    wait_for(lambda: len(started_children(log)) == count, 60)
    return started_children(log)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (one dead and not yet reaped, a zombie, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    """The processes ``pid`` started, now: its workers and multiprocessing's helper."""
    return [int(each) for each in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def create_app_tables(store: Store, app_dir: Path) -> None:
    sys.path.insert(0, str(app_dir))
    try:
        import app  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(app_dir))
    app.meta.create_all(store.engine)


def test_four_worker_processes_process_every_event_once_in_lane_order(
    store: Store, app_dir: Path, url: str
) -> None:
    """`a2sql worker --processes 4` over 200 sessions with lanes: each event is
    processed exactly once (one committed row of the handler's each, one completion),
    and within each lane in index order."""
    create_app_tables(store, app_dir)
    layout = ["L1", "L2", "L1", None, "L2", "L1"]
    for n in range(200):
        store.append(f"order-{n:03d}", [NewEvent("step", n, lane=lane) for lane in layout])
    process = a2sql_worker(
        app_dir,
        url,
        "record",
        "--processes",
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


def test_concurrency_runs_handlers_at_once_and_timeout_fails_a_hung_one(
    store: Store, app_dir: Path, url: str
) -> None:
    """`--concurrency 5 --timeout 3`: four 1 s handlers of four sessions run at once in
    one process (each was claimed before any finished), and the hung fifth is failed
    after 3 s and, with `--max-failures 1`, dead-lettered; the process then exits."""
    for n in range(4):
        store.append(f"p{n}", [NewEvent("slow", 1.0)])
    store.append("hung", [NewEvent("slow", 600)])
    process = a2sql_worker(
        app_dir,
        url,
        "slow",
        "--concurrency",
        "5",
        "--timeout",
        "3",
        "--max-failures",
        "1",
        "--until-idle",
        "--poll-interval",
        "0.1",
    )
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]
    quick = [store.read(f"p{n}")[0] for n in range(4)]
    assert all(e.processed_by_attempt == 1 for e in quick)
    last_claimed = max(e.last_claimed_at for e in quick if e.last_claimed_at is not None)
    assert all(e.processed_at is not None and last_claimed < e.processed_at for e in quick)
    [hung] = store.read("hung")
    assert hung.failed_at is not None and hung.processed_at is None
    assert "HandlerTimeout" in (hung.last_error or "")
    assert "outcome=dead_lettered" in err and "error=HandlerTimeout" in err


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


@pytest.mark.parametrize(
    ("to_group", "signum"),
    [(True, signal.SIGINT), (False, signal.SIGTERM), (True, signal.SIGTERM)],
    ids=["ctrl-c", "sigterm-to-parent", "sigterm-to-group"],
)
def test_a_pool_stopped_by_a_signal_stops_each_process_gracefully(
    store: Store, app_dir: Path, url: str, to_group: bool, signum: signal.Signals
) -> None:
    """`--processes 2` stopped by Ctrl-C (SIGINT to the whole process group, as a
    terminal sends it), by SIGTERM to the parent, or by SIGTERM to the whole group:
    every process finishes its running handler and releases the rest, and the pool
    exits 0; none is cut short by the signal arriving twice (the group's and the
    parent's word)."""
    for name in ("a", "b"):
        # The first handler runs long enough for the other process to start and claim
        # the other session meanwhile, even on a busy machine.
        store.append(name, [NewEvent("slow", 3), NewEvent("slow", 0.5), NewEvent("slow", 0.5)])
    process = a2sql_worker(app_dir, url, "slow", "--processes", "2", "--ttl-ms", "60000")
    wait_for(lambda: all(e.claim_holder is not None for n in ("a", "b") for e in store.read(n)), 60)
    if to_group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    for name in ("a", "b"):
        first, *rest = store.read(name)
        assert first.processed_by_attempt == 1
        assert all((e.claim_holder, e.processed_at) == (None, None) for e in rest)
    assert err.count("outcome=released") == 4


def test_a_killed_child_of_a_pool_is_replaced_and_its_replacement_claims_work(
    store: Store, app_dir: Path, url: str
) -> None:
    """SIGKILL to one of `--processes 3`: the parent logs which child ended, why and the
    restart, and a new process (a new pid) handles events within 5 s of the kill."""
    create_app_tables(store, app_dir)
    log = app_dir / "pool.log"
    process = a2sql_worker(
        app_dir,
        url,
        "record",
        "--processes",
        "3",
        "--transactional",
        "--poll-interval",
        "0.1",
        log=log,
    )
    victim = wait_for_children(log, 3)[1]
    feeding = threading.Event()

    def feed() -> None:  # work keeps coming, for whichever process is there to claim it
        n = 0
        while not feeding.wait(0.02):
            store.append(f"w-{n:05d}", [NewEvent("step", n)])
            n += 1

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        wait_for(lambda: handled_by(store, victim), 60)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 5
        wait_for(lambda: started_children(log)[1] != victim, deadline - time.monotonic())
        replacement = started_children(log)[1]
        wait_for(lambda: handled_by(store, replacement), deadline - time.monotonic())
    finally:
        feeding.set()
        feeder.join()
    assert not alive(victim)
    assert re.search(
        rf"child 1 \(pid {victim}\) ended: signal SIGKILL; restart 1 in 1 s", log.read_text()
    )
    assert f"child 1 started: pid {replacement} (restart 1)" in log.read_text()
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == 0, log.read_text()[-3000:]


def handled_by(store: Store, pid: int) -> bool:
    """Whether process ``pid`` committed a handled event (the app's `record` rows)."""
    with store.engine.connect() as connection:
        rows = connection.execute(
            text("select count(*) from app_handled where pid = :pid"), {"pid": pid}
        ).scalar_one()
    return bool(rows)


def test_the_children_of_a_killed_pool_stop_within_5_seconds(
    store: Store, app_dir: Path, url: str
) -> None:
    """SIGKILL to the parent of `--processes 3` while each child runs a long handler:
    no process it started is left 5 s later (each child notices and exits; the
    handler's claim is left to its lease)."""
    for name in ("a", "b", "c"):
        store.append(name, [NewEvent("slow", 60)])
    log = app_dir / "pool.log"
    process = a2sql_worker(app_dir, url, "slow", "--processes", "3", log=log)
    workers = set(wait_for_children(log, 3).values())
    wait_for(lambda: all(store.read(n)[0].claim_holder is not None for n in ("a", "b", "c")), 60)
    started = children_of(process.pid)
    assert workers <= set(started)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    wait_for(lambda: not any(alive(pid) for pid in started), 5)
    assert log.read_text().count(f"parent process {process.pid} is gone") == 3


def test_a_pool_whose_child_keeps_crashing_at_start_stops_and_exits_1(
    store: Store, app_dir: Path, url: str
) -> None:
    """`--processes 2` where every child but the first dies as it imports the handler:
    that child is restarted twice, then the pool says why it gives up, the surviving
    child finishes its running handler and releases the rest, and the pool exits 1."""
    store.append("s", [NewEvent("slow", 1) for _ in range(30)])
    log = app_dir / "pool.log"
    process = a2sql_worker(
        app_dir, url, "slow", "--processes", "2", "--ttl-ms", "60000", module="crashing", log=log
    )
    process.communicate(timeout=120)
    err = log.read_text()
    assert process.returncode == 1, err[-3000:]
    assert re.search(
        r"child \d \(pid \d+\) ended \(exit code 3\) within 10 s of its start 3 times in a "
        r"row: stopping the pool",
        err,
    ), err[-3000:]
    assert len(re.findall(r"ended: exit code 3; restart \d in", err)) == 2
    events = store.read("s")
    assert all(e.claim_holder is None for e in events)
    assert any(e.processed_at is not None for e in events)
    assert "outcome=released" in err


def test_a_second_signal_to_a_pool_kills_its_children(
    store: Store, app_dir: Path, url: str
) -> None:
    """SIGTERM twice to the parent while its children run long handlers: the second
    kills them at once (their claims are left to their leases) and the pool exits 1."""
    for name in ("a", "b"):
        store.append(name, [NewEvent("slow", 60)])
    log = app_dir / "pool.log"
    process = a2sql_worker(app_dir, url, "slow", "--processes", "2", log=log)
    workers = wait_for_children(log, 2).values()
    wait_for(lambda: all(store.read(n)[0].claim_holder is not None for n in ("a", "b")), 60)
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: log.read_text().count("asked to stop by the parent") == 2)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 1, log.read_text()[-3000:]
    assert not any(alive(pid) for pid in workers)
    assert "SIGTERM again: killing the children" in log.read_text()
    assert all(store.read(n)[0].claim_holder is not None for n in ("a", "b"))


@pytest.mark.parametrize("handler", ["slow", "aslow"])
def test_a_worker_started_with_sigint_ignored_leaves_it_ignored(
    store: Store, app_dir: Path, url: str, handler: str
) -> None:
    """A worker started with SIGINT ignored (`trap '' INT`, as a pool's children are)
    keeps claiming after a SIGINT, and still stops on SIGTERM: sync and async."""
    store.append("before", [NewEvent("slow", 0)])
    process = a2sql_worker(app_dir, url, handler, "--poll-interval", "0.1", ignoring_sigint=True)
    wait_for(lambda: store.read("before")[0].processed_at is not None, 60)
    process.send_signal(signal.SIGINT)
    store.append("after", [NewEvent("slow", 0)])
    wait_for(lambda: store.read("after")[0].processed_at is not None, 10)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]
