"""Live streams on real engines: other writers, wake-ups, closing (SPEC §3 stream; issue 4).

Not conformance tests: these use real time, real threads and real processes
(SQLite has no cross-process wake-up, PostgreSQL wakes on LISTEN/NOTIFY).
Every wait is bounded, so a broken wake-up fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import multiprocessing
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import a2sql
from a2sql import EventStream, NewEvent, Store, StoredEvent
from a2sql.execution.transactions import KEEP_IDLE
from a2sql.notify import wakeups
from a2sql.testing.facades import BlockingAsyncStore
from tests.statement_gate import StatementGate, connections_back
from tests.statement_gate import checked_out as in_use

ROOT = Path(__file__).resolve().parent.parent
# A poll interval no test waits out: delivery before it proves a wake-up.
LONG_POLL_S = 30.0
# How long a woken stream may take to deliver, far below LONG_POLL_S.
WAKE_DEADLINE_S = 3.0
# Time for a reader to read an empty session and start waiting.
SETTLE_S = 0.5

# Another process appending: opens a store, says "ready", appends the batches
# (sizes in argv) on "go", says "done".
WRITER = """
import json, sys
import a2sql
from a2sql import NewEvent

url, session_id, sizes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with a2sql.create_store(url, migrate=False) as store:
    print("ready", flush=True)
    sys.stdin.readline()
    n = 0
    for size in sizes:
        store.append(session_id, [NewEvent("burst", {"n": n + k}) for k in range(size)])
        n += size
    print("done", flush=True)
"""


def burst_sizes(total: int) -> list[int]:
    """Batch sizes mixing single appends and batches, summing to ``total``."""
    pattern = [1, 1, 5, 1, 20, 1, 1, 3, 1, 50, 1, 2]
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(min(pattern[len(sizes) % len(pattern)], total - sum(sizes)))
    return sizes


class Writer:
    """A writer in another process (``subprocess``), started and waited on with timeouts."""

    def __init__(self, url: str, session_id: str, sizes: list[int]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", WRITER, url, session_id, json.dumps(sizes)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.expect("ready", timeout=20)

    def expect(self, word: str, *, timeout: float) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        line = stdout.readline().strip() if ready else ""
        if line != word:
            self.kill()
            stderr = self._process.stderr.read() if self._process.stderr else ""
            raise AssertionError(f"writer did not say {word!r} (got {line!r}): {stderr}")

    def go(self) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write("go\n")
        stdin.flush()

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait(timeout=10)

    def finish(self, *, timeout: float) -> None:
        self.expect("done", timeout=timeout)
        assert self._process.wait(timeout=timeout) == 0


class Reader:
    """Iterates a stream in a thread, recording each event and when it arrived."""

    def __init__(self, stream: EventStream, want: int) -> None:
        self.stream = stream
        self.want = want
        self.events: list[StoredEvent] = []
        self.arrivals: list[float] = []
        self.error: BaseException | None = None
        self.finished = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for each in self.stream:
                self.events.append(each)
                self.arrivals.append(time.monotonic())
                if len(self.events) >= self.want:
                    break
        except BaseException as error:
            self.error = error
        finally:
            self.finished.set()

    def wait(self, timeout: float) -> bool:
        """Whether the reader got its events in time; if not, its stream is closed."""
        done = self.finished.wait(timeout)
        if not done:
            self.stream.close()
            self.finished.wait(5)
        assert self.error is None, self.error
        return done

    @property
    def indexes(self) -> list[int]:
        return [each.index for each in self.events]


# --- fixtures -----------------------------------------------------------------


@pytest.fixture(params=["sync", "async"])
def facade(request: pytest.FixtureRequest) -> str:
    """The two facades (the conformance suite also runs an observed ``Store``)."""
    return str(request.param)


@pytest.fixture(params=["sqlite_file", "postgres"])
def live_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database several connections and processes can share."""
    if request.param == "sqlite_file":
        return f"sqlite:///{tmp_path / 'live.db'}"
    return str(request.getfixturevalue("postgres_url"))


def _open(facade: str, url: str) -> Store:
    if facade == "async":
        return BlockingAsyncStore(url, migrate=True)  # type: ignore[return-value]
    return a2sql.create_store(url, migrate=True)


def checked_out(store: Store) -> int:
    """Connections of the store's pool in use right now: checked out, less those the sync
    store keeps idle between its transactions (at most
    ``a2sql.execution.transactions.KEEP_IDLE``)."""
    if isinstance(store, BlockingAsyncStore):
        async_store = store.async_store
        on_loop = async_store._on_loop  # idle between the calls sent from the loop
        idle = 0 if on_loop is None else on_loop.idle
        return int(async_store.engine.sync_engine.pool.checkedout()) - idle
    idle = store._pooled.idle
    assert idle <= KEEP_IDLE
    return int(store.engine.pool.checkedout()) - idle  # type: ignore[attr-defined]


@pytest.fixture
def open_live(live_url: str) -> Iterator[Callable[[str], Store]]:
    """Open stores of a facade (``sync`` or ``async``) on ``live_url``; closed afterwards."""
    opened: list[Store] = []

    def open_one(facade: str) -> Store:
        store = _open(facade, live_url)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


@pytest.fixture
def live(open_live: Callable[[str], Store], facade: str) -> Store:
    return open_live(facade)


# --- other writers ----------------------------------------------------------------


def test_burst_of_1000_appends_from_another_process_arrives_in_order_once(
    live: Store, live_url: str
) -> None:
    """stream: 1000 events appended by another process (singles and batches) while the
    stream reads arrive in index order, none skipped, none repeated."""
    sizes = burst_sizes(1000)
    assert 1 in sizes and max(sizes) > 1
    writer = Writer(live_url, "s", sizes)
    with live.stream("s") as stream:
        reader = Reader(stream, want=1000)
        writer.go()
        writer.finish(timeout=30)
        assert reader.wait(10), f"stream delivered {len(reader.events)} of 1000"
        assert reader.indexes == list(range(1, 1001))
        assert [each.payload for each in reader.events] == [{"n": n} for n in range(1000)]
        assert len({each.id for each in reader.events}) == 1000
        assert {each.session_id for each in reader.events} == {"s"}
        assert stream.poll() == []
    assert reader.events == live.read("s")


def test_stream_start_after_k_begins_at_k_plus_1_then_follows_another_process(
    live: Store, live_url: str
) -> None:
    """stream: start_after=k yields index k+1 first, then what another process appends."""
    live.append("s", [NewEvent("early", i) for i in range(10)])
    writer = Writer(live_url, "s", [1, 4, 1])
    with live.stream("s", start_after=7) as stream:
        reader = Reader(stream, want=9)
        writer.go()
        writer.finish(timeout=30)
        assert reader.wait(10), reader.indexes
    assert reader.indexes == list(range(8, 17))
    assert [each.type for each in reader.events] == ["early"] * 3 + ["burst"] * 6


# --- wake-ups -------------------------------------------------------------------


def _delivery_after_append(stream: EventStream, append: Callable[[], object]) -> float:
    """Seconds from the start of ``append()`` to the stream's delivery of the new event."""
    reader = Reader(stream, want=1)
    time.sleep(SETTLE_S)
    assert reader.events == []
    started = time.monotonic()
    append()
    assert reader.wait(WAKE_DEADLINE_S), "the stream was not woken: it waited for its poll"
    return reader.arrivals[0] - started


def test_append_by_another_store_of_this_process_wakes_stream_before_poll_interval(
    live: Store, open_live: Callable[[str], Store], facade: str
) -> None:
    """stream: a commit through another store object of this process wakes a waiting
    stream at once, long before its poll interval."""
    other = open_live(facade)
    with live.stream("s", poll_interval=LONG_POLL_S) as stream:
        latency = _delivery_after_append(stream, lambda: other.append("s", [NewEvent("t")]))
    assert latency < WAKE_DEADLINE_S


def test_append_through_the_other_facade_wakes_stream_before_poll_interval(
    live: Store, open_live: Callable[[str], Store], facade: str
) -> None:
    """stream: an AsyncStore commit wakes a Store stream of this process on the same
    database, and a Store commit an AsyncStore stream (one in-process wake-up registry)."""
    other = open_live("sync" if facade == "async" else "async")
    with live.stream("s", poll_interval=LONG_POLL_S) as stream:
        latency = _delivery_after_append(stream, lambda: other.append("s", [NewEvent("t")]))
    assert latency < WAKE_DEADLINE_S


@pytest.mark.parametrize("live_url", ["postgres"], indirect=True)
def test_postgres_append_from_another_process_wakes_stream_via_listen_notify(
    live: Store, live_url: str
) -> None:
    """stream on PostgreSQL: a commit in another process wakes a waiting stream through
    LISTEN/NOTIFY, long before its poll interval."""
    writer = Writer(live_url, "s", [1])
    try:
        with live.stream("s", poll_interval=LONG_POLL_S) as stream:
            latency = _delivery_after_append(stream, writer.go)
        writer.finish(timeout=10)
    finally:
        writer.kill()
    assert latency < WAKE_DEADLINE_S


def _stream_in_forked_child(store: Store, ready: Any, delivered: Any) -> None:
    """In a forked child: wait for one event on the store inherited from the parent."""
    # SQLAlchemy's advice for a forked child: drop the pool's inherited connections.
    store.engine.dispose(close=False)
    with store.stream("s", poll_interval=LONG_POLL_S) as stream:
        reader = Reader(stream, want=1)
        time.sleep(SETTLE_S)
        ready.set()
        delivered.put(reader.wait(WAKE_DEADLINE_S * 2))


@pytest.mark.parametrize("live_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("facade", ["sync"], indirect=True)
def test_postgres_a_forked_childs_stream_wakes_via_listen_notify(live: Store) -> None:
    """stream on PostgreSQL after fork(): the parent's LISTEN thread does not run in the
    child, which listens on a connection of its own and is woken by the parent's commit
    long before its poll interval."""
    live.stream("s", poll_interval=LONG_POLL_S).close()  # the parent listens from now on
    context = multiprocessing.get_context("fork")
    ready, delivered = context.Event(), context.Queue()
    child = context.Process(target=_stream_in_forked_child, args=(live, ready, delivered))
    child.start()
    try:
        assert ready.wait(20), "the child did not start streaming"
        live.append("s", [NewEvent("t")])
        assert delivered.get(timeout=WAKE_DEADLINE_S * 4), "the child's stream waited for its poll"
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


def test_many_waiting_streams_hold_no_pooled_connection_and_all_wake(live: Store) -> None:
    """stream: waiting streams hold no connection of the pool (one listener per store on
    PostgreSQL); one commit wakes all of them."""
    before = checked_out(live)
    streams = [live.stream("s", poll_interval=LONG_POLL_S) for _ in range(20)]
    try:
        readers = [Reader(stream, want=1) for stream in streams]
        time.sleep(SETTLE_S * 2)
        assert checked_out(live) == before
        live.append("s", [NewEvent("t", id="e1")])
        deadline = time.monotonic() + WAKE_DEADLINE_S
        for reader in readers:
            assert reader.wait(max(0.0, deadline - time.monotonic()))
            assert [each.id for each in reader.events] == ["e1"]
    finally:
        for stream in streams:
            stream.close()
    assert checked_out(live) == before


# --- closing --------------------------------------------------------------------------


def test_close_returns_a_blocked_next_in_another_thread_and_releases_connection(
    live: Store,
) -> None:
    """stream: close() from another thread ends a next() waiting for events promptly;
    the pool is back to its checked-out count from before the stream."""
    live.append("s", [NewEvent("t", id="e1")])
    before = checked_out(live)
    stream = live.stream("s", poll_interval=LONG_POLL_S)
    reader = Reader(stream, want=2)
    time.sleep(SETTLE_S)
    assert [each.id for each in reader.events] == ["e1"]
    assert not reader.finished.is_set()
    closed_at = time.monotonic()
    stream.close()
    assert reader.finished.wait(WAKE_DEADLINE_S), "next() still blocked after close()"
    assert time.monotonic() - closed_at < WAKE_DEADLINE_S
    assert reader.error is None and len(reader.events) == 1
    assert checked_out(live) == before
    live.append("s", [NewEvent("t", id="e2")])
    assert stream.poll() == []


def test_close_after_reading_a_burst_releases_connection(live: Store) -> None:
    """stream: a stream closed midway through several pages leaves no connection checked out."""
    live.append("s", [NewEvent("t", i) for i in range(450)])
    before = checked_out(live)
    with live.stream("s") as stream:
        assert [next(stream).index for _ in range(170)] == list(range(1, 171))
    assert checked_out(live) == before


# --- cancelling an async stream's task ------------------------------------------------


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAKE_DEADLINE_S)


def test_cancelling_async_stream_task_releases_connection(live_url: str) -> None:
    """AsyncStore.stream: cancelling the task that iterates it, while it waits and while
    it reads a page, leaves the pool's checked-out count as before."""

    async def scenario() -> None:
        async with a2sql.create_async_store(live_url, migrate=True) as store:
            await store.append("s", [NewEvent("t", i) for i in range(3)])
            before = in_use(store)
            got: list[int] = []

            async def consume() -> None:
                async for each in store.stream("s", poll_interval=LONG_POLL_S):
                    got.append(each.index)

            waiting = asyncio.create_task(consume())
            await asyncio.sleep(SETTLE_S)
            assert got == [1, 2, 3] and not waiting.done()
            await _cancel(waiting)
            assert in_use(store) == before

            gate = StatementGate(store, lambda sql: "from a2_events" in sql)
            try:
                reading = asyncio.create_task(consume())
                await asyncio.wait_for(gate.reached.wait(), WAKE_DEADLINE_S)
                assert in_use(store) == before + 1
                await _cancel(reading)
            finally:
                gate.remove()
            await connections_back(store, before)
            await store.append("s", [NewEvent("t", 3)])
            assert [each.index for each in await store.read("s")] == [1, 2, 3, 4]

    asyncio.run(scenario())


def test_aclose_from_another_task_ends_a_waiting_async_stream(live_url: str) -> None:
    """AsyncStore.stream: aclose() ends an iteration waiting for events promptly and
    releases its connection."""

    async def scenario() -> None:
        async with a2sql.create_async_store(live_url, migrate=True) as store:
            pool = store.engine.sync_engine.pool
            before = pool.checkedout()
            stream = store.stream("s", poll_interval=LONG_POLL_S)
            got: list[int] = []

            async def consume() -> None:
                async for each in stream:
                    got.append(each.index)

            task = asyncio.create_task(consume())
            await asyncio.sleep(SETTLE_S)
            assert not task.done()
            await stream.aclose()
            await asyncio.wait_for(task, WAKE_DEADLINE_S)
            assert got == []
            assert pool.checkedout() == before

    asyncio.run(scenario())


def test_a_listen_url_that_never_answers_is_retried_less_and_less_often(
    postgres_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listen URL nobody answers on: the listener says which URL it cannot connect to,
    waiting twice as long after each failure (it tried every pause before, a warning a
    second for ever), and the stream still finds events by polling."""
    monkeypatch.setattr(wakeups, "RECONNECT_PAUSE_S", 0.05)
    nowhere = "postgresql://postgres@127.0.0.1:1/nowhere"
    with (
        caplog.at_level(logging.WARNING, logger="a2sql"),
        a2sql.create_store(postgres_url, migrate=True, listen=nowhere) as store,
    ):
        stream = store.stream("s", poll_interval=0.1)
        try:
            store.append("s", [NewEvent("t", id="e1")])
            assert next(iter(stream)).id == "e1"
            time.sleep(1.6)
        finally:
            stream.close()
    failures = [r for r in caplog.records if "cannot connect to" in r.getMessage()]
    # Tried at 0, 0.05, 0.15, 0.35, 0.75 and 1.55 s: six; at a steady pause, about 30.
    assert 3 <= len(failures) <= 8, [r.getMessage() for r in failures]
    assert "127.0.0.1:1/nowhere" in failures[0].getMessage()
    gaps = [b.created - a.created for a, b in itertools.pairwise(failures)]
    assert gaps[-1] > 3 * gaps[0], gaps
