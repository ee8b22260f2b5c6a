"""PostgreSQL faults: terminated backends, a server restart (SPEC §4 STORE_UNAVAILABLE, §3).

A call whose backend dies mid-transaction raises ``A2Error(STORE_UNAVAILABLE)``
with the driver's error as ``__cause__``, and has written nothing; the same
store works again afterwards, without restarting the application. Under load,
workers that retry with backoff finish the run with every invariant intact.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import URL, Engine, create_engine, insert, make_url, text
from sqlalchemy.pool import NullPool

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent, Store
from a2sql.execution.engines import resolve_url
from a2sql.sql.schema import events as E
from bench.torture.common import scratch_target
from bench.torture.driver import WorkersConfig, run_workers
from bench.torture.private_postgres import private_postgres, unavailable_reason
from tests.conftest import _unavailable
from tests.torture.conftest import assert_clean, postmaster_start_time

pytestmark = pytest.mark.postgres


def _with_app_name(url: str, name: str) -> str:
    return make_url(url).update_query_dict({"application_name": name}).render_as_string(False)


@pytest.fixture
def victim(postgres_url: str) -> Iterator[tuple[Store, str]]:
    """A store whose connections carry an application_name of their own, and that name."""
    name = f"a2-victim-{uuid.uuid4().hex[:8]}"
    with a2sql.create_store(_with_app_name(postgres_url, name), migrate=True) as store:
        yield store, name


@pytest.fixture
def admin(postgres_url: str) -> Iterator[Engine]:
    engine = create_engine(resolve_url(postgres_url), poolclass=NullPool)
    yield engine
    engine.dispose()


def _backends(admin: Engine, app_name: str, *, waiting: bool = False) -> list[int]:
    query = "select pid from pg_stat_activity where application_name = :name"
    if waiting:
        query += " and wait_event_type = 'Lock'"
    with admin.connect() as connection:
        return [int(pid) for (pid,) in connection.execute(text(query), {"name": app_name})]


def _terminate(admin: Engine, pids: list[int]) -> None:
    with admin.connect() as connection:
        for pid in pids:
            connection.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _wait_for(condition: Callable[[], list[int]], what: str, timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _operations(store: Store) -> dict[str, Callable[[], object]]:
    """Calls that write some rows, then insert an event with id ``held`` (which blocks)."""
    return {
        "complete_attempt": lambda: store.complete_attempt(
            "s", index=1, attempt=1, events=[NewEvent("child", {"n": 1}, id="held")]
        ),
        "append": lambda: store.append(
            "s", [NewEvent("free", id="free-1"), NewEvent("late", id="held")]
        ),
    }


def _prepare(store: Store) -> None:
    store.append("s", [NewEvent("work", {"n": 0}, id="e1", lane="l"), NewEvent("next", lane="l")])
    assert store.claim_available("s", holder="w", ttl_ms=60_000).outcome == "claimed"


def _insert_other_session_event(connection: object, event_id: str) -> None:
    connection.execute(  # type: ignore[attr-defined]
        insert(E).values(
            session_id="other",
            idx=1,
            event_type="t",
            payload="null",
            event_id=event_id,
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            lane_ready=True,
        )
    )


@pytest.mark.parametrize("operation", ["complete_attempt", "append"])
def test_backend_terminated_mid_transaction_raises_store_unavailable_and_writes_nothing(
    victim: tuple[Store, str], admin: Engine, operation: str
) -> None:
    """SPEC §4: a call whose backend dies after some writes raises STORE_UNAVAILABLE
    (the driver's error as ``__cause__``) and leaves nothing half-written.

    Another transaction holds an uncommitted event with the id the call
    inserts last, so the call waits on the unique index after its other
    writes (the completion's UPDATE, the batch's first row); its backend is
    terminated there.
    """
    store, name = victim
    _prepare(store)
    before = store.read("s")
    with admin.connect() as blocker:
        transaction = blocker.begin()
        _insert_other_session_event(blocker, "held")
        thread, errors = _in_thread(_operations(store)[operation])
        pids = _wait_for(lambda: _backends(admin, name, waiting=True), "the call to wait")
        _terminate(admin, pids)
        thread.join(timeout=15)
        transaction.rollback()
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], A2Error), errors
    assert errors[0].code == ErrorCode.STORE_UNAVAILABLE, errors[0]
    assert errors[0].__cause__ is not None
    assert store.read("s") == before
    assert store.read("other") == []
    # The store recovers by itself: the same call now succeeds.
    _operations(store)[operation]()
    assert "held" in [e.id for e in store.read("s")]


@pytest.mark.parametrize("operation", ["complete_attempt", "append"])
def test_event_id_taken_concurrently_by_another_session_is_partial_duplicate_batch(
    victim: tuple[Store, str], admin: Engine, operation: str
) -> None:
    """SPEC §5: a unique-violation race on a supplied event id between two sessions
    surfaces as PARTIAL_DUPLICATE_BATCH, not STORE_UNAVAILABLE, and writes nothing."""
    store, name = victim
    _prepare(store)
    before = store.read("s")
    with admin.connect() as racer:
        transaction = racer.begin()
        _insert_other_session_event(racer, "held")
        thread, errors = _in_thread(_operations(store)[operation])
        _wait_for(lambda: _backends(admin, name, waiting=True), "the call to wait")
        transaction.commit()
        thread.join(timeout=15)
    assert len(errors) == 1 and isinstance(errors[0], A2Error), errors
    assert errors[0].code == ErrorCode.PARTIAL_DUPLICATE_BATCH, errors[0]
    assert store.read("s") == before


def test_store_recovers_by_itself_after_its_connections_are_terminated(
    victim: tuple[Store, str], admin: Engine
) -> None:
    """SPEC §4: a dead pooled connection fails at most the calls that meet it, with
    STORE_UNAVAILABLE; later calls succeed on the same store object."""
    store, name = victim
    store.append("s", [NewEvent("a", id="a1")])
    _terminate(admin, _backends(admin, name))
    outcomes = []
    for attempt in range(5):
        try:
            store.append("s", [NewEvent("b", id="b1")])
            outcomes.append("ok")
            break
        except A2Error as error:
            assert error.code == ErrorCode.STORE_UNAVAILABLE, error
            outcomes.append("unavailable")
            time.sleep(0.05 * (attempt + 1))
    assert outcomes[-1] == "ok", outcomes
    assert [e.id for e in store.read("s")] == ["a1", "b1"]


def test_workers_survive_terminated_backends_and_a_server_restart(
    postgres_server: URL | str, seed: int, tmp_path: Path
) -> None:
    """Under load: backends terminated mid-transaction every ~0.4 s and one restart of the
    server mid-run; calls in flight raise STORE_UNAVAILABLE, workers retry with backoff
    and finish, every invariant of the workers run holds, and each worker that lived
    through the restart reached the database again without being restarted.

    The server restarted is a private one the test starts (and removes): the tests'
    server may serve other programs, which a restart would cut off mid-work."""
    reason = unavailable_reason()
    if reason is not None:
        _unavailable(f"no private PostgreSQL server to restart: {reason}")
    # The tests' server, when there is one: it must run on, untouched.
    shared = postgres_server if isinstance(postgres_server, URL) else None
    shared_started = postmaster_start_time(shared) if shared else None
    with private_postgres() as server, scratch_target("postgres", server.url) as target:
        private_started = postmaster_start_time(server.url)
        report = run_workers(
            WorkersConfig(
                target=target,
                workers=8,
                duration=12,
                seed=seed,
                terminate_every=0.4,
                restart_server=server.restart,
                drain_timeout=30,
                log_dir=str(tmp_path / "logs"),
                min_processed=40,
            )
        )
        assert postmaster_start_time(server.url) != private_started
    assert_clean(report)
    figures = report.figures
    assert figures["restarts_survived"] == 1, figures
    assert figures["backends_terminated"] >= 10, figures
    assert figures["terminated_mid_transaction"] >= 1, figures
    assert figures["unavailable_errors"] >= 1, figures
    assert figures["processed"] >= 40, figures
    if shared is not None:
        assert postmaster_start_time(shared) == shared_started, "the tests' server restarted"
