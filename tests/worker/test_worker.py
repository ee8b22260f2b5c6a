"""The reference worker (a2sql.worker): chains, retries, dead letters, leases, lost replies.

Every test runs on a SQLite file and on PostgreSQL, with real stores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, event, insert, select, text
from sqlalchemy.exc import DBAPIError

import a2sql
from a2sql import A2Error, ErrorCode, EventCause, NewEvent, Store
from a2sql.testing import FakeClock
from a2sql.worker import Attempt, Backoff, Worker
from tests.worker.quick import quick

app = MetaData()
handled = Table(
    "app_handled",
    app,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(255), nullable=False),
    Column("idx", Integer, nullable=False),
)


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        app.create_all(opened.engine)
        yield opened


def test_a_chain_settles_with_the_right_causes(store: Store) -> None:
    """A returns B, B returns a settled C: every event processed once, causes point back."""

    def handler(attempt: Attempt) -> list[NewEvent] | None:
        if attempt.event.type == "A":
            return [NewEvent("B", {"from": attempt.event.index})]
        if attempt.event.type == "B":
            return [NewEvent("C", settled=True)]
        raise AssertionError(f"unexpected {attempt.event.type}")

    store.append("chain", [NewEvent("A")])
    worker = quick(store, handler)
    assert worker.run_session("chain") == "settled"
    a, b, c = store.read("chain")
    assert [e.type for e in (a, b, c)] == ["A", "B", "C"]
    assert b.cause == EventCause(a.index, 1) and c.cause == EventCause(b.index, 1)
    assert a.returned_event_ids == [b.id] and b.returned_event_ids == [c.id]
    assert (a.processed_by_attempt, b.processed_by_attempt) == (1, 1)
    assert c.processed_at is not None and c.attempt_count == 0
    assert worker.outcomes["completed"] == 2


def test_pool_mode_serves_every_session_until_idle(store: Store) -> None:
    """run(until_idle=True) drains every session under the prefix, and only those."""
    for n in range(5):
        store.append(f"job-{n}", [NewEvent("t"), NewEvent("t", lane="L"), NewEvent("t", lane="L")])
    store.append("other", [NewEvent("t")])
    worker = quick(store, lambda attempt: None, prefix="job-")
    worker.run(until_idle=True)
    assert worker.outcomes["completed"] == 15
    for n in range(5):
        assert all(e.processed_by_attempt == 1 for e in store.read(f"job-{n}"))
    assert store.read("other")[0].processed_at is None


def test_failures_back_off_then_dead_letter_and_block_only_their_lane(url: str) -> None:
    """A failing handler is retried after the backoff's delay (by the store's clock), then
    dead-lettered at max_failures; its lane stays blocked, other lanes go on, and
    claim_next never hands the blocked session out."""
    clock = FakeClock()
    with a2sql.create_store(url, clock=clock, migrate=True) as store:
        store.append("s", [NewEvent("bad", lane="L"), NewEvent("after", lane="L"), NewEvent("ok")])

        def handler(attempt: Attempt) -> None:
            if attempt.event.type == "bad":
                raise ValueError(f"bad input {attempt.number}")

        backoff = Backoff(base_ms=1000, factor=2, max_ms=10_000, jitter=0)
        worker = quick(store, handler, backoff=backoff, max_failures=3)
        assert worker.run_session("s") == "idle"  # "ok" done, "bad" waits 1 s
        bad, after, ok = store.read("s")
        assert ok.processed_by_attempt == 1
        assert (bad.failure_count, bad.claim_holder) == (1, None)
        assert bad.claim_expires_at == clock.now() + timedelta(milliseconds=1000)
        assert "ValueError: bad input 1" in (bad.last_error or "")
        assert "in handler" in (bad.last_error or "")  # the frame that raised
        clock.advance(ms=999)
        assert store.claim_next(holder="x", ttl_ms=10).outcome == "idle"
        clock.advance(ms=1)
        assert worker.run_session("s") == "idle"  # second failure: waits 2 s
        assert store.read("s")[0].claim_expires_at == clock.now() + timedelta(milliseconds=2000)
        clock.advance(ms=2000)
        assert worker.run_session("s") == "settled"
        bad, after, _ = store.read("s")
        assert (bad.failure_count, bad.failed_at is not None, bad.attempt_count) == (3, True, 3)
        assert after.attempt_count == 0 and after.processed_at is None  # blocked behind it
        assert store.claim_next(holder="x", ttl_ms=10) == a2sql.Dispatch("idle")
        assert worker.outcomes == {"completed": 1, "failed": 2, "dead_lettered": 1}


def test_a_dead_letter_is_logged_as_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead letter is a WARNING naming the session, the index and the error."""
    store.append("s", [NewEvent("t")])

    def handler(attempt: Attempt) -> None:
        raise RuntimeError("kaputt")

    with caplog.at_level("INFO", logger="a2sql.worker"):
        quick(store, handler, max_failures=1).run_session("s")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("session=s index=1" in m and "kaputt" in m for m in warnings), warnings
    lines = [r.getMessage() for r in caplog.records if "outcome=dead_lettered" in r.getMessage()]
    assert lines and "attempt=1" in lines[0] and "duration_ms=" in lines[0]


def test_a_handler_returning_a_bad_value_fails_the_attempt(store: Store) -> None:
    """Returning something other than NewEvents (or an id already taken) is a failure."""
    store.append("s", [NewEvent("a"), NewEvent("b", id="taken")])

    def handler(attempt: Attempt) -> Any:
        if attempt.event.type == "a":
            return "not events"
        return [NewEvent("child", id="taken")]

    quick(store, handler, max_failures=1).run_session("s")
    a, b = store.read("s")
    assert "TypeError" in (a.last_error or "") and a.failed_at is not None
    assert "PARTIAL_DUPLICATE_BATCH" in (b.last_error or "") and b.failed_at is not None


def test_a_slow_handler_keeps_its_claim_through_renewals(store: Store) -> None:
    """A handler running several TTLs long keeps its claim, and its completion stands."""
    store.append("s", [NewEvent("slow")])
    seen: list[str] = []

    def handler(attempt: Attempt) -> None:
        deadline = time.monotonic() + 2.4  # four leases of 600 ms
        while time.monotonic() < deadline:
            seen.append(store.claim_available("s", holder="thief", ttl_ms=600).outcome)
            time.sleep(0.1)

    worker = quick(store, handler, ttl_ms=600)
    assert worker.run_session("s") == "settled"
    [slow] = store.read("s")
    assert (slow.processed_by_attempt, slow.attempt_count) == (1, 1)
    assert seen and set(seen) == {"busy"}
    assert worker.outcomes == {"completed": 1}


def test_a_claim_lost_while_the_handler_runs_is_not_submitted(url: str) -> None:
    """When a renewal finds the claim taken over, the late result is dropped, not completed."""
    clock = FakeClock()
    with a2sql.create_store(url, clock=clock, migrate=True) as store:
        store.append("s", [NewEvent("t")])

        def handler(attempt: Attempt) -> list[NewEvent]:
            clock.advance(ms=1000)  # the lease ends...
            store.claim_available("s", holder="other", ttl_ms=60_000)  # ...and it is taken
            time.sleep(0.5)  # a renewal (every 100 ms) learns of it
            return [NewEvent("late")]

        worker = quick(store, handler, ttl_ms=300)
        worker.run_session("s")
        [event] = store.read("s")
        assert (event.attempt_count, event.claim_holder, event.processed_at) == (2, "other", None)
        assert worker.outcomes == {"superseded": 1}


@contextmanager
def lost_replies(store: Store, method: str, times: int = 1) -> Iterator[list[Any]]:
    """``store.<method>`` commits, then raises STORE_UNAVAILABLE, ``times`` times: a reply
    lost after the commit, as a dropped connection would lose it."""
    real = getattr(store, method)
    results: list[Any] = []

    def after_commit(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        results.append(result)
        if len(results) <= times:
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "connection lost (injected after commit)")
        return result

    setattr(store, method, after_commit)
    try:
        yield results
    finally:
        delattr(store, method)


def test_a_completion_whose_reply_was_lost_replays_without_duplicates(store: Store) -> None:
    """The retried completion names the same ids: it replays, nothing is appended twice."""
    store.append("s", [NewEvent("t")])
    with lost_replies(store, "complete_attempt", times=2) as results:
        worker = quick(
            store,
            lambda attempt: [
                NewEvent("child", {"n": 1}, settled=True),
                NewEvent("two", settled=True),
            ],
        )
        assert worker.run_session("s") == "settled"
    assert len(results) == 3
    assert [r.outcome for r in results] == ["completed"] * 3
    assert [e.id for e in results[0].events] == [e.id for e in results[2].events]
    parent, child, two = store.read("s")
    assert parent.returned_event_ids == [child.id, two.id]
    assert worker.outcomes == {"completed": 1}


def test_a_claim_whose_reply_was_lost_is_taken_back_not_waited_out(store: Store) -> None:
    """run_session: a claim that committed but whose reply was lost leaves the session
    busy with this worker's own claims; the worker takes them back and serves them now,
    with the attempt it holds, instead of giving the session up until the lease ends."""
    store.append("s", [NewEvent("t"), NewEvent("t")])
    with lost_replies(store, "claim_available") as results:
        worker = quick(store, lambda attempt: None, ttl_ms=60_000)
        started = time.monotonic()
        assert worker.run_session("s") == "settled"
    assert time.monotonic() - started < 10
    assert [r.outcome for r in results[:2]] == ["claimed", "busy"]
    assert [e.processed_by_attempt for e in store.read("s")] == [1, 1]
    assert worker.outcomes == {"completed": 2}


def test_a_claim_next_whose_reply_was_lost_is_taken_again_when_its_lease_ends(
    store: Store,
) -> None:
    """run: the session of a lost claim_next reply is unknown, so its claims are waited
    out, polling no more than once per poll interval, and then taken by a new attempt."""
    store.append("s", [NewEvent("t")])
    with lost_replies(store, "claim_next") as results:
        worker = quick(store, lambda attempt: None, ttl_ms=500, poll_interval=0.1)
        started = time.monotonic()
        worker.run(until_idle=True)
    assert 0.4 < time.monotonic() - started < 10
    assert len(results) <= 12  # 0.5 s at one poll per 0.1 s, and the claims themselves
    [event] = store.read("s")
    assert (event.attempt_count, event.processed_by_attempt) == (2, 2)


# --- transactional=True: the handler's writes commit with the completion -----------


def rows(store: Store) -> list[tuple[str, int]]:
    with store.engine.connect() as connection:
        query = select(handled.c.session_id, handled.c.idx)
        return [(row.session_id, row.idx) for row in connection.execute(query)]


def record(attempt: Attempt) -> None:
    assert attempt.connection is not None
    attempt.connection.execute(
        insert(handled).values(session_id=attempt.session_id, idx=attempt.event.index)
    )


def test_transactional_handler_writes_commit_with_the_completion(store: Store) -> None:
    """The handler's own row and the completion commit together."""
    store.append("s", [NewEvent("t"), NewEvent("t")])

    def handler(attempt: Attempt) -> list[NewEvent]:
        record(attempt)
        state = attempt.read_state("r")  # reads inside the same transaction
        assert [e.index for e in state.events][:2] == [1, 2]
        return [NewEvent("done", settled=True)]

    worker = quick(store, handler, transactional=True)
    assert worker.run_session("s") == "settled"
    assert sorted(rows(store)) == [("s", 1), ("s", 2)]
    assert [e.type for e in store.read("s")] == ["t", "t", "done", "done"]


def test_transactional_handler_failure_rolls_its_writes_back(store: Store) -> None:
    """A handler that raises after writing leaves no row; the attempt is failed."""
    store.append("s", [NewEvent("t")])

    def handler(attempt: Attempt) -> None:
        record(attempt)
        raise RuntimeError("after the write")

    quick(store, handler, transactional=True, max_failures=1).run_session("s")
    assert rows(store) == []
    assert store.read("s")[0].failed_at is not None


def test_transactional_handler_that_breaks_its_transaction_fails_the_attempt(
    store: Store,
) -> None:
    """A handler that swallows its own failed statement: on PostgreSQL its transaction
    is aborted, and the completion in it is INVALID_ARGUMENT, which fails the attempt
    (dead-lettered here) where an outage would be retried forever. On SQLite the
    failed statement undoes only itself, and the attempt completes."""
    store.append("s", [NewEvent("t")])

    def handler(attempt: Attempt) -> None:
        assert attempt.connection is not None
        with suppress(DBAPIError):
            attempt.connection.execute(text("select * from no_such_table"))

    worker = quick(store, handler, transactional=True, max_failures=1)
    served = ThreadPoolExecutor(1)
    outcome = served.submit(worker.run_session, "s")
    try:
        outcome.result(timeout=30)
    finally:
        worker.stop()
        served.shutdown()
    [event] = store.read("s")
    if store.engine.dialect.name == "postgresql":
        assert event.failed_at is not None  # dead-lettered
        assert "INVALID_ARGUMENT" in (event.last_error or "")
        assert "aborted" in (event.last_error or "")
    else:
        assert event.processed_by_attempt == 1


def test_transactional_superseded_completion_leaves_no_row(url: str) -> None:
    """A completion that comes back superseded rolls the handler's row back; the next
    attempt's row is the only one."""
    clock = FakeClock()
    with a2sql.create_store(url, clock=clock, migrate=True) as store:
        app.create_all(store.engine)
        store.append("s", [NewEvent("t")])

        def handler(attempt: Attempt) -> None:
            record(attempt)
            if attempt.number == 1:
                # Another worker takes the event over meanwhile. On the handler's own
                # connection: on SQLite its transaction holds the write lock. The
                # rollback undoes that claim too, and the lease has run out.
                assert attempt.connection is not None
                clock.advance(ms=1000)
                taken = store.using(attempt.connection).claim_available(
                    "s", holder="other", ttl_ms=60_000
                )
                assert taken.outcome == "claimed"

        worker = quick(store, handler, transactional=True, ttl_ms=500)
        assert worker.run_session("s") == "settled"
        assert rows(store) == [("s", 1)]
        assert store.read("s")[0].processed_by_attempt == 2
        assert worker.outcomes == {"superseded": 1, "completed": 1}


def test_transactional_lost_reply_after_commit_leaves_one_row(store: Store) -> None:
    """A commit whose reply is lost is found committed: the handler does not run again."""
    store.append("s", [NewEvent("t")])
    calls = []

    def handler(attempt: Attempt) -> list[NewEvent]:
        calls.append(attempt.number)
        record(attempt)
        return [NewEvent("done", settled=True)]

    real_begin = store.begin
    lost: list[bool] = []

    @contextmanager
    def begin() -> Iterator[Any]:
        with real_begin() as connection:
            yield connection
        if not lost:  # committed; the reply is lost once
            lost.append(True)
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "connection lost (injected after commit)")

    store.begin = begin  # type: ignore[method-assign]
    worker = quick(store, handler, transactional=True)
    assert worker.run_session("s") == "settled"
    assert calls == [1] and lost == [True]
    assert rows(store) == [("s", 1)]
    assert len(store.read("s")) == 2
    assert worker.outcomes == {"completed": 1}


def test_transactional_lost_connection_before_commit_runs_the_handler_again(
    store: Store,
) -> None:
    """A transaction that failed before its commit left nothing: the handler runs again."""
    store.append("s", [NewEvent("t")])
    calls = []

    def handler(attempt: Attempt) -> None:
        calls.append(attempt.number)
        record(attempt)
        if len(calls) == 1:
            raise_in_store.append(True)

    raise_in_store: list[bool] = []
    real_using = store.using

    def using(connection: Any) -> Any:
        view = real_using(connection)
        if raise_in_store and len(raise_in_store) == 1:
            raise_in_store.append(True)
            raise A2Error(ErrorCode.STORE_UNAVAILABLE, "connection lost (injected before commit)")
        return view

    store.using = using  # type: ignore[method-assign]
    worker = quick(store, handler, transactional=True)
    assert worker.run_session("s") == "settled"
    assert calls == [1, 1]
    assert rows(store) == [("s", 1)]


# --- shutdown and idling -----------------------------------------------------------


def test_stop_releases_the_claims_not_yet_handled(store: Store) -> None:
    """stop() while a batch runs: the running handler finishes, the rest is released."""
    store.append("s", [NewEvent("t") for _ in range(4)])
    started = threading.Event()

    def handler(attempt: Attempt) -> None:
        started.set()
        time.sleep(0.3)

    worker = quick(store, handler, ttl_ms=60_000)
    runner = threading.Thread(target=worker.run)
    runner.start()
    assert started.wait(10)
    worker.stop()
    runner.join(10)
    assert not runner.is_alive()
    events = store.read("s")
    assert events[0].processed_by_attempt == 1
    assert all(e.claim_holder is None and e.processed_at is None for e in events[1:])
    assert worker.outcomes == {"completed": 1, "released": 3}
    # Another worker takes them at once, not after the 60 s lease.
    other = quick(store, lambda attempt: None)
    assert other.run_session("s") == "settled"
    assert [e.processed_by_attempt for e in store.read("s")] == [1, 2, 2, 2]


def test_idle_workers_over_dead_letters_do_not_spin(url: str) -> None:
    """Three idle workers over sessions blocked behind dead letters run at most one
    transaction per poll interval each."""
    with a2sql.create_store(url, migrate=True) as setup:
        for n in range(20):
            setup.append(f"s{n}", [NewEvent("bad", lane="L"), NewEvent("next", lane="L")])
            [bad] = setup.claim_available(f"s{n}", holder="w", ttl_ms=1000).events
            setup.fail_attempt(
                f"s{n}", index=1, attempt=bad.attempt_count, error="x", max_failures=1
            )
    stores = [a2sql.create_store(url) for _ in range(3)]
    begins = [0, 0, 0]
    for n, each in enumerate(stores):
        event.listen(each.engine, "begin", lambda _c, n=n: begins.__setitem__(n, begins[n] + 1))
    workers = [Worker(each, lambda attempt: None, poll_interval=0.25) for each in stores]
    threads = [threading.Thread(target=w.run) for w in workers]
    try:
        for thread in threads:
            thread.start()
        # Past the start: each store's listener, once connected, wakes every idle
        # worker of the process once (notifications sent before LISTEN are lost).
        time.sleep(1.0)
        before = list(begins)
        time.sleep(2.0)
        during = [after - start for after, start in zip(begins, before, strict=True)]
    finally:
        for w in workers:
            w.stop()
        for thread in threads:
            thread.join(10)
        for each in stores:
            each.close()
    # 2 s at one poll per 0.25 s: 8, and one for a poll cut by the window's ends.
    assert all(1 <= count <= 9 for count in during), during
    assert all(w.outcomes == {} for w in workers)


def test_an_idle_worker_wakes_on_new_work_in_this_process(store: Store) -> None:
    """A commit through any store of the process wakes an idle run() before its poll."""
    done = threading.Event()

    def handler(attempt: Attempt) -> None:
        done.set()

    worker = Worker(store, handler, poll_interval=30)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        time.sleep(0.3)  # idle now, for 30 s unless woken
        started = time.monotonic()
        store.append("s", [NewEvent("t")])
        assert done.wait(10)
        assert time.monotonic() - started < 10
    finally:
        worker.stop()
        runner.join(10)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("ttl_ms", 0),
        ("max_failures", 0),
        ("batch", 0),
        ("batch", 1001),
        ("holder", ""),
        ("prefix", None),
        ("poll_interval", 0),
        ("grace_s", -1),
    ],
)
def test_worker_refuses_bad_settings(store: Store, setting: str, value: object) -> None:
    """A worker's settings are checked when it is made, naming the one that is wrong."""
    with pytest.raises(A2Error) as raised:
        Worker(store, lambda attempt: None, **{setting: value})  # type: ignore[arg-type]
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert setting in str(raised.value)


def test_default_holder_names_host_process_and_a_suffix(store: Store) -> None:
    """Two workers of one process get different holders that name the process."""
    import os
    import socket

    one, two = (Worker(store, lambda attempt: None).holder for _ in range(2))
    assert one != two
    host, pid, suffix = one.rsplit(":", 2)
    assert host == socket.gethostname()[:200] and pid == str(os.getpid()) and suffix


def test_returned_events_get_ids_derived_from_the_attempt(store: Store) -> None:
    """Ids are the same for a retry of one attempt and differ for the next attempt."""
    from a2sql.worker.policy import returned_outcome

    store.append("s", [NewEvent("t", id="e")])
    [event] = store.read("s")
    first = returned_outcome([NewEvent("a"), NewEvent("b", id="mine")], event, 1).events
    again = returned_outcome([NewEvent("a"), NewEvent("b", id="mine")], event, 1).events
    other = returned_outcome([NewEvent("a")], event, 2).events
    assert [e.id for e in first] == [e.id for e in again]
    assert first[1].id == "mine" and first[0].id != other[0].id


def test_backoff_is_exponential_capped_and_jittered() -> None:
    """Backoff: base * factor^(n-1), capped at max_ms, spread by ±jitter; none() is no delay."""
    exact = Backoff(base_ms=100, factor=3, max_ms=1000, jitter=0)
    assert [exact.delay_ms(n) for n in (1, 2, 3, 4, 5)] == [100, 300, 900, 1000, 1000]
    spread = Backoff(base_ms=1000, factor=2, max_ms=60_000, jitter=0.5)
    delays = {spread.delay_ms(1) for _ in range(200)}
    assert all(500 <= d <= 1500 for d in delays if d is not None) and len(delays) > 10
    assert Backoff.none().delay_ms(3) is None
    with pytest.raises(ValueError):
        Backoff(factor=0.5)


def test_a_handler_error_with_a_nul_or_a_lone_surrogate_is_recorded_escaped(
    store: Store,
) -> None:
    """Texts the store refuses (NUL, lone surrogate) are escaped; the worker goes on."""
    undecodable = b"\xff".decode("utf-8", "surrogateescape")

    def handler(attempt: Attempt) -> None:
        if attempt.event.type == "nul":
            raise ValueError("a\x00b")
        if attempt.event.type == "surrogate":
            raise OSError(2, "No such file", undecodable)

    store.append("s", [NewEvent("nul", lane="a"), NewEvent("surrogate", lane="b")])
    store.append("t", [NewEvent("ok")])
    worker = quick(store, handler, max_failures=1)
    worker.run(until_idle=True)
    nul, surrogate = store.read("s")
    assert "ValueError: a\\x00b" in (nul.last_error or "")
    assert "\\udcff" in (surrogate.last_error or "")
    assert nul.failed_at is not None and surrogate.failed_at is not None
    assert store.read("t")[0].processed_by_attempt == 1
    assert worker.outcomes == {"dead_lettered": 2, "completed": 1}


def test_a_session_deleted_while_its_event_is_handled_does_not_stop_the_worker(
    store: Store,
) -> None:
    """The completion finds no event: that attempt ends, the other session is served."""

    def handler(attempt: Attempt) -> None:
        if attempt.session_id == "doomed":
            attempt.store.delete_session("doomed")

    store.append("doomed", [NewEvent("t")])
    store.append("other", [NewEvent("t")])
    worker = quick(store, handler)
    worker.run(until_idle=True)
    assert store.read("doomed") == []
    assert store.read("other")[0].processed_by_attempt == 1
    assert worker.outcomes == {"vanished": 1, "completed": 1}
