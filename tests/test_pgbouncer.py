"""a2sql behind PgBouncer in transaction mode, the way most production PostgreSQL is reached.

Each transaction may run on another server connection. psycopg prepares a
statement on the server after a few executions and names it per client
connection, so behind the pooler a prepared name is missing, already taken,
or another client's statement with other parameters: a2sql recognises the
pooler and does not prepare its statements there. LISTEN does not survive
transaction pooling: streams take a direct ``listen`` URL, or poll.

PgBouncer comes from ``A2SQL_TEST_PGBOUNCER_URL`` (``make test`` starts one
with ``tools/test-pgbouncer.sh``); without it these tests skip, or fail under
``CI=true``. Every test runs in a fresh database: PgBouncer passes on no
``options``, so the schema-per-test URLs of the other PostgreSQL tests do not
apply here.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import URL, NullPool, create_engine, make_url, text

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent
from a2sql.execution import wire
from a2sql.execution.engines import resolve_url
from a2sql.execution.pooler import known_behind_pooler
from tests import test_alembic_embedding as embedding
from tests.conftest import _unavailable

PROCESSES = 6
CYCLES = 150


@dataclass(frozen=True)
class Pooled:
    """One fresh database, migrated: through PgBouncer and direct."""

    pooled: str
    direct: str


@pytest.fixture
def database(postgres_server: URL | str) -> Iterator[Pooled]:
    if isinstance(postgres_server, str):
        _unavailable(postgres_server)
        raise AssertionError("unreachable")
    bouncer = os.environ.get("A2SQL_TEST_PGBOUNCER_URL")
    if not bouncer:
        _unavailable("no PgBouncer: A2SQL_TEST_PGBOUNCER_URL is unset (make test starts one)")
        raise AssertionError("unreachable")
    name = f"a2pgb_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_server, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'create database "{name}"'))
    direct = postgres_server.set(database=name).render_as_string(hide_password=False)
    pooled = resolve_url(bouncer).set(database=name).render_as_string(hide_password=False)
    try:
        a2sql.create_store(direct, migrate=True).close()
        yield Pooled(pooled=pooled, direct=direct)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'drop database if exists "{name}" with (force)'))
        admin.dispose()


def in_threads(work: Callable[[int], None], count: int) -> None:
    """``work(0)`` … ``work(count - 1)`` at once, each in a thread; back when all are done."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def cycles(url: str, own_engine: bool, count: int) -> list[str]:
    """``count`` append, claim, complete and read cycles, each on a session of its own;
    the errors met. ``own_engine``: the store's engine, else the application's, created
    with the one setting the docs name for an engine behind a transaction pooler."""
    engine = url if own_engine else create_engine(url, connect_args={"prepare_threshold": None})
    store = a2sql.create_store(engine, migrate=False)
    errors = []
    for n in range(count):
        session = f"s-{os.getpid()}-{n}"
        try:
            store.append(session, [NewEvent("t", {"n": n}, id=f"{session}/1")])
            [event] = store.claim_available(session, holder="w", ttl_ms=60_000).events
            done = store.complete_attempt(
                session,
                index=event.index,
                attempt=event.attempt_count,
                events=[NewEvent("r", id=f"{session}/r", settled=True)],
            )
            assert done.outcome == "completed", done
            assert [e.id for e in store.read(session)] == [f"{session}/1", f"{session}/r"]
        except (A2Error, AssertionError, ValueError) as error:
            errors.append(f"{type(error).__name__}: {error}")
    if not own_engine:
        store.engine.dispose()
    store.close()
    return errors


@pytest.mark.parametrize("own_engine", [True, False], ids=["store_engine", "app_engine"])
def test_processes_through_a_transaction_pooler_never_fail(
    database: Pooled, own_engine: bool
) -> None:
    """Six processes, each its own store, through PgBouncer (transaction mode, two server
    connections): every cycle succeeds. Before a2sql stopped preparing statements behind
    a pooler, about a quarter failed (``prepared statement "_pg3_N" does not exist``,
    ``already exists``, ``bind message supplies 4 parameters, but prepared statement
    "_pg3_2" requires 10``)."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(cycles, [(database.pooled, own_engine, CYCLES)] * PROCESSES)
    errors = [error for result in results for error in result]
    assert errors == [], f"{len(errors)} of {PROCESSES * CYCLES} cycles failed: {errors[:5]}"
    with a2sql.create_store(database.direct, migrate=False) as store:
        assert store.inspect.totals().events == PROCESSES * CYCLES * 2


def test_the_applications_statements_on_a_stores_connections_never_prepare_behind_it(
    database: Pooled,
) -> None:
    """A store opened from the pooled URL: the application's own statements on the store's
    connections (``store.begin()``, as a transactional handler writes its own table) run
    past psycopg's threshold from six threads at once, over PgBouncer's two server
    connections, and none fails; the store's connections prepare nothing, those of a
    store opened direct do. Before a2sql decided it per connection as it opens, such
    statements failed at random (``prepared statement "_pg3_0" does not exist``,
    ``already exists``)."""
    errors: list[str] = []
    thresholds: set[int | None] = set()
    with a2sql.create_store(database.pooled, migrate=False) as store:
        with store.begin() as connection:
            connection.execute(text("create table app_usage (event text primary key)"))

        def write(worker: int) -> None:
            for n in range(40):
                try:
                    with store.begin() as connection:
                        connection.execute(
                            text("insert into app_usage (event) values (:event)"),
                            {"event": f"{worker}/{n}"},
                        )
                        connection.execute(
                            text("select count(*) from app_usage where event >= :worker"),
                            {"worker": f"{worker}/"},
                        ).scalar_one()
                        driver = connection.connection.driver_connection
                        thresholds.add(driver.prepare_threshold)  # type: ignore[union-attr]
                except Exception as error:  # what the application would meet
                    errors.append(f"{type(error).__name__}: {error}")

        in_threads(write, 6)
        with store.begin() as connection:
            written = connection.execute(text("select count(*) from app_usage")).scalar_one()
    assert errors == [], f"{len(errors)} of 240 transactions failed: {errors[:3]}"
    assert written == 240
    assert thresholds == {None}
    with a2sql.create_store(database.direct, migrate=False) as store, store.begin() as connection:
        assert connection.connection.driver_connection.prepare_threshold == 5  # type: ignore[union-attr]


def test_an_application_engine_is_left_as_it_is_and_its_failure_names_the_setting(
    database: Pooled,
) -> None:
    """An engine the application passes in is its own: a2sql changes none of its settings,
    and behind the pooler its prepared statements go missing once psycopg prepares them
    (after five executions). The failure says so and names the one setting that avoids
    it, which the docs give too."""
    engine = create_engine(database.pooled, pool_size=4, max_overflow=0)
    failures: list[A2Error] = []
    try:
        with a2sql.create_store(engine, migrate=False) as store:

            def write(worker: int) -> None:
                for n in range(20):
                    try:
                        store.append(f"s{worker}", [NewEvent("t", n)])
                        store.read(f"s{worker}")
                    except A2Error as error:
                        failures.append(error)

            in_threads(write, 4)
            with engine.connect() as connection:
                driver = connection.connection.driver_connection
                assert driver.prepare_threshold == 5  # type: ignore[union-attr]
    finally:
        engine.dispose()
    assert failures, "nothing failed: was a pooler there?"
    assert all(f.code is ErrorCode.STORE_UNAVAILABLE for f in failures)
    assert all("connect_args={'prepare_threshold': None}" in f.message for f in failures)


def test_behind_the_pooler_a2sql_names_no_statement_of_its_own_whatever_the_engine(
    database: Pooled,
) -> None:
    """On an application's engine without the setting, a2sql's hot writes still prepare
    nothing under names of their own (``a2sql_N``, the same in every process): behind a
    pooler, another client's statement of that name would run with their arguments. The
    connection found behind the pooler at the store's first transaction keeps that."""
    engine = create_engine(database.pooled, pool_size=1, max_overflow=0)
    try:
        with a2sql.create_store(engine, migrate=False) as store:
            for n in range(10):
                store.append("s", [NewEvent("t", n)])
                [event] = store.claim_available("s", holder="w", ttl_ms=60_000).events
                store.complete_attempt(
                    "s", index=event.index, attempt=event.attempt_count, events=[]
                )
        with engine.connect() as connection:
            info = connection.connection.info
            assert known_behind_pooler(info)
            assert not info.get(wire._PREPARED_KEY), info.get(wire._PREPARED_KEY)
    finally:
        engine.dispose()


def test_async_store_through_a_transaction_pooler(database: Pooled) -> None:
    """Eight tasks of one AsyncStore through PgBouncer: every cycle succeeds."""

    async def main() -> list[str]:
        errors: list[str] = []
        async with a2sql.create_async_store(database.pooled, migrate=False) as store:

            async def task(number: int) -> None:
                for n in range(40):
                    session = f"a-{number}-{n}"
                    try:
                        await store.append(session, [NewEvent("t", id=f"{session}/1")])
                        claim = await store.claim_available(session, holder="w", ttl_ms=60_000)
                        [event] = claim.events
                        done = await store.complete_attempt(
                            session, index=event.index, attempt=event.attempt_count, events=[]
                        )
                        assert done.outcome == "completed", done
                    except (A2Error, AssertionError, ValueError) as error:
                        errors.append(f"{type(error).__name__}: {error}")

            await asyncio.gather(*(task(number) for number in range(8)))
            # Its calls were handed to the thread, which does not prepare statements
            # behind a pooler; none were sent from the loop (a2sql.execution.onloop).
            assert store._on_loop is not None and not store._on_loop.usable
        return errors

    assert asyncio.run(main()) == []


def transactional_worker(url: str) -> dict[str, int]:
    """A transactional worker on a store opened from ``url`` alone, until nothing is left
    to claim: each handler writes the application's own table, and reads it, on the
    store's connection (``attempt.connection``), in the transaction its completion
    commits in. How its attempts ended."""
    from a2sql.worker import Backoff, Worker

    def handle(attempt: a2sql.worker.Attempt) -> None:
        connection = attempt.connection
        assert connection is not None
        connection.execute(
            text("insert into app_effects (event_id, worker) values (:id, :worker)"),
            {"id": attempt.event.id, "worker": os.getpid()},
        )
        connection.execute(
            text("select count(*) from app_effects where worker = :worker"),
            {"worker": os.getpid()},
        ).scalar_one()

    with a2sql.create_store(url, migrate=False) as store:
        # A failed attempt is tried again at once: a failure shows in the outcomes.
        worker = Worker(
            store, handle, transactional=True, backoff=Backoff.none(), poll_interval=0.1
        )
        worker.run(until_idle=True)
        return dict(worker.outcomes)


def test_transactional_workers_in_six_processes_through_the_pooler_handle_each_event_once(
    database: Pooled,
) -> None:
    """1,000 events on 200 sessions, six processes each running a transactional worker
    from the pooled URL alone; every handler writes the application's table on the
    store's connection. Every attempt completes (none fails, so no prepared statement
    went missing), and the application's table holds each event once. Before a2sql
    decided preparation as a connection opens, such handlers failed at random: 318
    failed attempts in one 600-event run."""
    with a2sql.create_store(database.direct, migrate=False) as store:
        with store.begin() as connection:
            connection.execute(
                text("create table app_effects (event_id text primary key, worker integer)")
            )
        for session in range(200):
            store.append(f"job-{session}", [NewEvent("work", n) for n in range(5)])
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        outcomes = pool.map(transactional_worker, [database.pooled] * PROCESSES)
    ended = sum((Counter(counts) for counts in outcomes), Counter())
    assert ended == {"completed": 1_000}, ended
    with a2sql.create_store(database.direct, migrate=False) as store:
        with store.begin() as connection:
            rows = connection.execute(
                text("select count(*), count(distinct event_id) from app_effects")
            )
            assert tuple(rows.one()) == (1_000, 1_000)
        assert store.inspect.totals().events == 1_000


APPEND_LATER = """
import sys, time, a2sql
from a2sql import NewEvent
time.sleep(0.5)
with a2sql.create_store(sys.argv[1], migrate=False) as store:
    store.append("live", [NewEvent("t", id="from-another-process")])
"""


def first_streamed(store: a2sql.Store, pooled: str, poll_interval: float) -> tuple[str, float]:
    """Another process appends to "live" through the pooler: the first event the store's
    stream yields, and how long it took."""
    stream = store.stream("live", poll_interval=poll_interval)
    writer = subprocess.Popen([sys.executable, "-c", APPEND_LATER, pooled])
    try:
        started = time.monotonic()
        event = next(iter(stream))
        return event.id, time.monotonic() - started
    finally:
        stream.close()
        writer.wait(timeout=30)


def test_a_stream_wakes_through_a_direct_listen_url(database: Pooled) -> None:
    """Behind the pooler the store LISTENs on the direct URL it is given: another
    process's commit wakes the stream at once, long before its 60 s poll."""
    with a2sql.create_store(database.pooled, migrate=False, listen=database.direct) as store:
        event_id, after = first_streamed(store, database.pooled, poll_interval=60.0)
    assert event_id == "from-another-process"
    assert after < 20, f"woke after {after:.1f} s"


def test_a_stream_listening_through_the_pooler_says_so_and_polls(
    database: Pooled, caplog: pytest.LogCaptureFixture
) -> None:
    """listen=True on a pooled URL would LISTEN on a server connection that then serves
    other clients: the store says so and its stream polls."""
    with (
        caplog.at_level(logging.WARNING, logger="a2sql"),
        a2sql.create_store(database.pooled, migrate=False) as store,
    ):
        event_id, _ = first_streamed(store, database.pooled, poll_interval=0.2)
    assert event_id == "from-another-process"
    [warning] = [r.getMessage() for r in caplog.records if "pooler" in r.getMessage()]
    assert "listen=DIRECT_URL" in warning
    assert f":{make_url(database.pooled).port}/" in warning  # the URL the store was given


def test_a_stream_without_listen_polls(database: Pooled) -> None:
    """listen=False: the stream finds another process's commit at its next poll."""
    with a2sql.create_store(database.pooled, migrate=False, listen=False) as store:
        event_id, _ = first_streamed(store, database.pooled, poll_interval=0.2)
    assert event_id == "from-another-process"


@pytest.mark.parametrize(
    "listen",
    ["sqlite:///other.db", 5, None, "postgresql+psycopg2://postgres@127.0.0.1/db", "x://"],
    ids=["not_postgres", "int", "none", "unsupported_driver", "not_a_url"],
)
def test_listen_takes_a_postgres_url_or_a_bool(database: Pooled, listen: object) -> None:
    with pytest.raises(A2Error) as raised:
        a2sql.create_store(database.pooled, migrate=False, listen=listen)  # type: ignore[arg-type]
    assert raised.value.code is a2sql.ErrorCode.INVALID_ARGUMENT
    assert raised.value.message.startswith("listen: "), raised.value.message


def tail_until_first_event(database: Pooled, *listen: str) -> tuple[str, str]:
    """``a2sql tail live --url POOLED [--listen …]`` while another process appends: the
    first line it prints, and what it logged."""
    tail = subprocess.Popen(
        [sys.executable, "-m", "a2sql.cli", "tail", "live", "--url", database.pooled, *listen],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, tail.kill)
    watchdog.start()
    try:
        subprocess.run([sys.executable, "-c", APPEND_LATER, database.pooled], check=True)
        assert tail.stdout is not None
        line = ""
        while "#1" not in line:
            line = tail.stdout.readline()
            if not line:
                break
    finally:
        watchdog.cancel()
        tail.terminate()
        _, logged = tail.communicate(timeout=30)
    return line, logged


@pytest.mark.parametrize(
    ("listen", "warned"),
    [((), True), (("--listen", "off"), False), (("--listen", "direct"), False)],
    ids=["default", "off", "direct"],
)
def test_a2sql_tail_takes_listen(database: Pooled, listen: tuple[str, ...], warned: bool) -> None:
    """The command-line way to do what the pooler warning says: ``--listen URL|off``."""
    given = tuple(database.direct if arg == "direct" else arg for arg in listen)
    line, logged = tail_until_first_event(database, *given)
    assert "#1" in line and "  t" in line, line
    assert ("goes through a connection pooler" in logged) is warned, logged


def test_the_documented_alembic_env_upgrades_again_and_again_through_the_pooler(
    database: Pooled, tmp_path: Path
) -> None:
    """docs/migrations.md's whole env.py, its URL the pooled one: `alembic upgrade head`,
    `alembic check` (whose reflection runs its statements more than psycopg's five
    times), up again, down and up, each run a new client over PgBouncer's two server
    connections, where a run before left what it prepared. With the engine's
    connections left to prepare (a2sql.execution.pooler.decide_at_connect undone), the
    run after `check` fails with ``DuplicatePreparedStatement``."""
    app = embedding.documented_checkout(tmp_path / "checkout")
    env = {**os.environ, "A2SQL_DATABASE_URL": database.pooled}
    for command in (
        ["upgrade", "head"],
        ["check"],
        ["upgrade", "head"],
        ["downgrade", "base"],
    ) * 2 + (["upgrade", "head"],):
        ran = embedding.run_alembic(app, env, *command)
        assert ran.returncode == 0, f"alembic {' '.join(command)}: {ran.stderr}"
    with a2sql.create_store(database.direct, migrate=False) as store, store.begin() as connection:
        assert connection.execute(text("select version_num from alembic_version")).scalar_one() == (
            "app_0001"
        )
