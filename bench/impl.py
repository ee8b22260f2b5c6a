"""The operations the workloads drive, and a2sql behind them.

Every implementation (a2sql here, the bare drivers in baseline_*.py) offers
the same small surface, so one workload function measures them all. A
statement counter goes with each: statements sent to the database per
operation, ``BEGIN`` and ``COMMIT`` included.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import event
from sqlalchemy.util import await_only

import a2sql
from a2sql import Completion, NewEvent
from a2sql.testing.facades import observe

JSON = Any
# A returned (child) event: id, type, payload, settled.
Child = tuple[str, str, JSON, bool]

HOLDER = "bench-worker"
TTL_MS = 60_000
EVENT_TYPE = "bench.event"


class Impl(Protocol):
    """What a workload needs of an implementation."""

    name: str
    statements: int
    # Round trips to the database, where they are counted (None: not counted).
    round_trips: int | None

    def append(self, session_id: str, payloads: Sequence[JSON]) -> int:
        """Append events (store-made ids, no cause or lane); returns the last index."""
        ...

    def claim(self, session_id: str) -> list[tuple[int, int]]:
        """claim_available as HOLDER for TTL_MS: the (index, attempt) claimed, by index."""
        ...

    def complete(
        self, session_id: str, index: int, attempt: int, children: Sequence[Child]
    ) -> bool:
        """complete_attempt; True when completed (not superseded)."""
        ...

    def complete_many(self, session_id: str, claims: Sequence[tuple[int, int]]) -> int:
        """complete_attempts of (index, attempt) pairs, no children, one transaction;
        returns how many were completed."""
        ...

    def read_state(self, session_id: str, reducer: str) -> int:
        """read_state; returns how many events came back."""
        ...

    def list_sessions(self, prefix: str, limit: int) -> int:
        """One page of inspect.list_sessions; returns how many sessions came back."""
        ...

    def read_events(self, session_id: str, after: int, limit: int) -> int:
        """One page of inspect.read_events; returns how many events came back."""
        ...

    def counting(self, on: bool) -> None:
        """Count statements from now on, or stop (counting is kept out of timed rounds)."""
        ...

    def close(self) -> None: ...


# ``python -m bench --traced``: the timed store's engine is instrumented with
# OpenTelemetry's SQLAlchemy instrumentation (spans made, none exported), so
# the run measures a2sql as production tracing sees it.
TRACED = False


# ``python -m bench --unprepared`` (PostgreSQL): neither a2sql nor the
# baseline prepares statements on the server, as behind a transaction pooler;
# set against a run without it, what preparation is worth on a direct connection.
UNPREPARED = False


# ``python -m bench --without PIECE`` (repeatable): an execution-layer piece
# turned off, to judge what it is worth (at an RTT: ``--rtt``). The pieces:
# ``one-statement``: no backend sends an operation as one statement (the
# session's lock, then the shared statements; a2sql.backends.base);
# ``raw``: a sync store's transactions go through SQLAlchemy's Connection, not
# the driver's cursor (a no-op listener on the engine it runs them on);
# ``on-loop``: an AsyncStore hands its hot writes to its threads instead of
# sending them from the event loop (PostgreSQL); ``kept``: a sync store keeps
# no connection between its transactions, each checked out of the pool and
# back (a2sql.execution.transactions).
PIECES = ("one-statement", "raw", "on-loop", "kept")
WITHOUT: frozenset[str] = frozenset()


_ONE_STATEMENT = (
    "one_statement_append",
    "one_statement_claim",
    "one_statement_complete",
    "one_statement_fail",
)
_OWN: dict[str, Any] = {}


def without_pieces(pieces: frozenset[str]) -> None:
    """Turn ``pieces`` off for every store opened from now on, and the others back on."""
    from a2sql.backends.base import Backend
    from a2sql.backends.postgresql import PostgresBackend

    global WITHOUT
    WITHOUT = pieces
    for name in _ONE_STATEMENT:
        _OWN.setdefault(name, PostgresBackend.__dict__[name])
        off = "one-statement" in pieces
        setattr(PostgresBackend, name, getattr(Backend, name) if off else _OWN[name])


def take_pieces_off(store: Any) -> None:
    """The pieces in ``WITHOUT`` a store decides per store, off on ``store`` (an
    ``AsyncStore``'s private attributes: read and set here only)."""
    if isinstance(store, a2sql.AsyncStore):
        if "on-loop" in WITHOUT:
            store._on_loop = None
        if "raw" in WITHOUT and store._sync_path is not None:
            observe(store._sync_path.engine)
    else:
        if "raw" in WITHOUT:
            observe(store.engine)
        if "kept" in WITHOUT:
            store._pooled._keep_idle = 0


def _never_prepare(engine: Any) -> None:
    """Every connection a2sql takes from ``engine``'s pool from now on prepares nothing.
    (A pool listener: a2sql's engine keeps its direct path, which engine listeners end.)"""

    def checkout(driver: Any, *_: Any) -> None:
        driver.prepare_threshold = None

    event.listen(engine, "checkout", checkout)


def _instrument(engine: Any) -> None:
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.trace import TracerProvider

    SQLAlchemyInstrumentor().instrument(
        engine=engine, tracer_provider=TracerProvider(), skip_dep_check=True
    )


# ``python -m bench --api async``: a2sql's side runs on ``AsyncStore``. The
# workload's code stays as it is and runs in a greenlet inside a running
# event loop (bench/__main__.py), each call awaited there as an asyncio
# program awaits it (SQLAlchemy's ``greenlet_spawn``/``await_only``, about
# 1 us a call).
API = "sync"


class Awaiting:
    """An ``AsyncStore`` (or its ``inspect``) as the workloads call a ``Store``: every
    coroutine it returns is awaited on the running loop."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name in ("inspect", "presence"):
            return Awaiting(value)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            return await_only(result) if inspect.isawaitable(result) else result

        return call


def open_store(url: str, clock: Any = None) -> Any:
    """A store of the API under test (``API``), on an existing schema; ``clock``: the
    store's clock (None: the system clock)."""
    if API == "async":
        async_store = a2sql.create_async_store(url, migrate=False, clock=clock)
        take_pieces_off(async_store)
        return Awaiting(async_store)
    store = a2sql.create_store(url, migrate=False, clock=clock)
    take_pieces_off(store)
    return store


def sync_engine(store: Any) -> Any:
    """The store's engine, the sync one under an ``AsyncEngine``."""
    engine = store.engine
    return getattr(engine, "sync_engine", engine)


class A2sqlImpl:
    """a2sql's public API, with a statement counter on its engine."""

    name = "a2sql"

    def __init__(self, url: str, clock: Any = None) -> None:
        self._timed = open_store(url, clock)
        if TRACED:
            _instrument(sync_engine(self._timed))
        if UNPREPARED and sync_engine(self._timed).dialect.name == "postgresql":
            if API == "async":
                raise SystemExit("--unprepared measures the sync API only")
            _never_prepare(self._timed.engine)
        # Counting is done on a second store of the same database, running the
        # same code: a listener on an engine makes its transactions take the
        # Connection path for good (a2sql.execution.raw.observed), so the timed
        # store's engine never gets one. On PostgreSQL the counting store's
        # connections are traced instead, on the timed store's path, round
        # trips too (bench/round_trips.py).
        self._statements = 0
        self._counter = None
        if API == "sync" and url.startswith("postgresql"):
            from bench.round_trips import Counter

            self._counter = Counter()
            self._counted = a2sql.create_store(
                self._counter.engine(url), migrate=False, clock=clock
            )
            take_pieces_off(self._counted)
        elif url.startswith("postgresql"):
            # An AsyncStore takes no cursor class: its statements are counted from
            # the trace of every connection it opens, on its asyncio engine (calls
            # sent from the loop) and on its sync path's engine (calls in a thread;
            # a private attribute, read here only).
            from bench.round_trips import Counter

            self._counter = Counter()
            async_store = a2sql.create_async_store(url, migrate=False, clock=clock)
            take_pieces_off(async_store)
            self._counter.trace(async_store.engine.sync_engine)
            sync_path = async_store._sync_path
            assert sync_path is not None
            self._counter.trace(sync_path.engine)
            self._counted = Awaiting(async_store)
        else:
            self._counted = open_store(url, clock)
            engine = sync_engine(self._counted)
            hooks = ["before_cursor_execute", "commit", "rollback"]
            if engine.dialect.name == "postgresql":
                # psycopg sends BEGIN before a transaction's first statement; on
                # SQLite a2sql's own BEGIN IMMEDIATE is a cursor execute already.
                hooks.append("begin")
            for hook in hooks:
                event.listen(engine, hook, self._count)
        self.store = self._timed

    def _count(self, *_args: Any, **_kw: Any) -> None:
        self._statements += 1

    @property
    def statements(self) -> int:
        if self._counter is None:
            return self._statements
        return self._counter.statements

    @property
    def round_trips(self) -> int | None:
        return None if self._counter is None else self._counter.round_trips

    def counting(self, on: bool) -> None:
        """Send the calls to the counted store from now on, or back to the timed one."""
        self.store = self._counted if on else self._timed

    def append(self, session_id: str, payloads: Sequence[JSON]) -> int:
        result = self.store.append(session_id, [NewEvent(EVENT_TYPE, p) for p in payloads])
        return result.events[-1].index

    def claim(self, session_id: str) -> list[tuple[int, int]]:
        result = self.store.claim_available(session_id, holder=HOLDER, ttl_ms=TTL_MS)
        return [(e.index, e.attempt_count) for e in result.events]

    def complete(
        self, session_id: str, index: int, attempt: int, children: Sequence[Child]
    ) -> bool:
        result = self.store.complete_attempt(
            session_id,
            index=index,
            attempt=attempt,
            events=[NewEvent(t, p, id=i, settled=s) for i, t, p, s in children],
        )
        return result.outcome == "completed"

    def complete_many(self, session_id: str, claims: Sequence[tuple[int, int]]) -> int:
        results = self.store.complete_attempts(
            session_id, [Completion(index, attempt) for index, attempt in claims]
        )
        return sum(result.outcome == "completed" for result in results)

    def read_state(self, session_id: str, reducer: str) -> int:
        return len(self.store.read_state(session_id, reducer).events)

    def list_sessions(self, prefix: str, limit: int) -> int:
        return len(self.store.inspect.list_sessions(prefix=prefix, limit=limit).sessions)

    def read_events(self, session_id: str, after: int, limit: int) -> int:
        page = self.store.inspect.read_events(session_id, after_index=after, limit=limit)
        return len(page.events)

    def close(self) -> None:
        self._timed.close()
        self._counted.close()
        if self._counter is not None:
            if API == "sync":  # an AsyncStore disposes of the engines it made
                self._counted.engine.dispose()
            self._counter.close()


def open_baseline(engine: str, driver_dsn: str) -> Impl:
    """The bare-driver baseline of ``engine``."""
    if engine == "postgres":
        from bench.baseline_postgres import PostgresBaseline

        return PostgresBaseline(driver_dsn, prepare=not UNPREPARED)
    from bench.baseline_sqlite import SqliteBaseline

    return SqliteBaseline(driver_dsn)


def open_impls(
    engine: str, a2sql_url: str, driver_dsn: str, *, floor: bool = False, clock: Any = None
) -> list[Impl]:
    """a2sql and the bare-driver baseline of ``engine``, on the same database; with
    ``floor`` (PostgreSQL), the one-round-trip-per-transaction floor third. ``clock``:
    a2sql's (the baseline takes none: its times are the server's or the system's)."""
    impls = [A2sqlImpl(a2sql_url, clock), open_baseline(engine, driver_dsn)]
    if floor:
        from bench.floor_postgres import PostgresFloor

        impls.append(PostgresFloor(driver_dsn, prepare=not UNPREPARED))
    return impls
