"""What a store holds is released when it is: closed, or dropped and collected."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import NullPool, QueuePool, create_engine, event, make_url, text

import a2sql
from a2sql import A2Error, ErrorCode, NewEvent
from tests.internals.test_async_handoff import application_name_url, server_connections


def listeners() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "a2sql-listen")


def test_a_dropped_postgres_store_with_an_open_stream_stops_its_listener(
    postgres_url: str,
) -> None:
    """Stores dropped without close(), their streams open, are collected with their
    listener threads and connections: before, each kept two server connections forever
    and about fifty exhausted max_connections."""
    before = listeners()

    def open_and_drop() -> None:
        store = a2sql.create_store(postgres_url, migrate=True)
        store.append("s", [NewEvent("t")])
        stream = iter(store.stream("s", poll_interval=0.05))
        next(stream)  # started: the listener runs
        deadline = time.monotonic() + 10
        while listeners() == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listeners() > before

    for _ in range(3):
        open_and_drop()
    gc.collect()
    deadline = time.monotonic() + 10
    while listeners() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert listeners() == before, "a dropped store kept its listener"


def test_stores_sharing_an_application_engine_keep_none_of_its_pool(tmp_path: Path) -> None:
    """Four stores on one engine whose pool has a single connection: each call gets it,
    because no store keeps it idle between calls (before, the first store kept it and
    the others failed with STORE_UNAVAILABLE once the pool timed out)."""
    engine = create_engine(
        f"sqlite:///{tmp_path / 'shared.db'}",
        poolclass=QueuePool,
        pool_size=1,
        max_overflow=0,
        pool_timeout=1,
    )
    try:
        a2sql.create_store(f"sqlite:///{tmp_path / 'shared.db'}").close()
        stores = [a2sql.create_store(engine) for _ in range(4)]
        for round_ in range(3):
            for number, store in enumerate(stores):
                store.append(f"s{number}", [NewEvent("t", round_)])
                assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        assert [len(stores[0].read(f"s{n}")) for n in range(4)] == [3, 3, 3, 3]
        for store in stores:
            store.close()
    finally:
        engine.dispose()


def connections_left(postgres_url: str, name: str) -> int:
    """The connections named ``name`` on the server once those closed have had a moment
    to end there (a backend ends a little after its client closes it)."""
    deadline = time.monotonic() + 3
    while (left := server_connections(postgres_url, name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


async def lock_waits(postgres_url: str, name: str, count: int) -> None:
    """Until ``count`` connections named ``name`` wait for a lock."""
    query = text(
        "select count(*) from pg_stat_activity"
        " where application_name = :n and wait_event_type = 'Lock'"
    )
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with engine.connect() as probe:
                if probe.execute(query, {"n": name}).scalar_one() >= count:
                    return
            await asyncio.sleep(0.01)
    finally:
        engine.dispose()
    raise AssertionError(f"{count} calls never waited for the held lock")


def _ignore_statement(*_args: Any) -> None:
    pass


@pytest.mark.parametrize("observed", [False, True], ids=["whole", "observed"])
def test_an_async_store_closed_with_calls_in_flight_leaves_no_connection(
    postgres_url: str, observed: bool
) -> None:
    """Stores closed while a dozen of their calls are in flight, each way they run: appends
    sent from the loop, reads handed to threads, appends sent from the loop waiting for a
    session another transaction holds until after the close (or, with a listener on the
    engine, each on the asyncio engine). The garbage collector is off: once the calls have ended,
    no connection of the stores is left on the server, and none for the collector to find
    (ResourceWarning). Each call either finished or failed with STORE_CLOSED. Before,
    each close left about ten connections open, and they piled up."""
    url, name = application_name_url(postgres_url)
    holder = a2sql.create_store(postgres_url, migrate=True)

    async def close_midway(round_number: int) -> list[str]:
        store = a2sql.create_async_store(url)
        if observed:
            event.listen(store.engine.sync_engine, "before_cursor_execute", _ignore_statement)
        await store.ensure_schema()

        async def call(number: int) -> str:
            try:
                if number % 3 == 0:
                    await store.read(f"s{number}")
                elif number % 3 == 1:
                    await store.append(f"s{number}", [NewEvent("t", number)])
                else:
                    await store.append("held", [NewEvent("t", number)])
            except A2Error as error:
                assert error.code == ErrorCode.STORE_CLOSED, error
                return "closed"
            return "done"

        with holder.begin() as connection:
            holder.using(connection).append("held", [NewEvent("t")])
            calls = [asyncio.ensure_future(call(number)) for number in range(12)]
            if round_number < 2:  # some done, some in flight, some not begun
                await asyncio.sleep(0.005 * round_number)
            else:  # every append to "held" waiting for its lock
                await lock_waits(postgres_url, name, 4)
            await store.close()
        return list(await asyncio.gather(*calls))

    left: list[int] = []
    outcomes: set[str] = set()
    gc.collect()
    gc.disable()
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", ResourceWarning)
            for round_number in range(5):
                outcomes.update(asyncio.run(close_midway(round_number)))
                left.append(connections_left(postgres_url, name))
            gc.collect()
    finally:
        gc.enable()
        holder.close()
    leaked: list[Any] = [w.message for w in warned if issubclass(w.category, ResourceWarning)]
    assert left == [0] * 5
    assert leaked == []
    assert outcomes == {"done", "closed"}


class HoldingProxy:
    """A TCP proxy to PostgreSQL that holds back, once armed, the ReadyForQuery ending
    the next connection's start-up: the server has the session ready, the client still
    waits for it, until ``release``."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self.armed = False
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        server, to_server = await asyncio.open_connection(*self._target)
        hold, self.armed = self.armed, False
        for pipe in (self._pipe(client, to_server, False), self._pipe(server, to_client, hold)):
            task = asyncio.ensure_future(pipe)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold: bool
    ) -> None:
        try:
            while hold:  # the server's messages (a type, a length), up to ReadyForQuery
                head = await reader.readexactly(5)
                body = await reader.readexactly(int.from_bytes(head[1:], "big") - 4)
                if head[:1] == b"Z":
                    self.holding.set()
                    await self.release.wait()
                    hold = False
                writer.write(head + body)
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def test_a_call_cancelled_while_its_connection_opens_leaves_none_open(
    postgres_url: str,
) -> None:
    """A call on a store whose asyncio engine has no connection yet opens one, and is
    cancelled once the server has the session ready but before the client has read so
    (a proxy holds that answer back): it raises CancelledError, and once the store is
    closed no connection of its is left on the server. Before, the driver's connection,
    abandoned midway, stayed open until the garbage collector found it."""
    url, name = application_name_url(postgres_url)
    a2sql.create_store(url, migrate=True).close()
    parsed = make_url(url)

    async def scenario() -> tuple[bool, int]:
        proxy = HoldingProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
        await proxy.start()
        proxied = parsed.set(host="127.0.0.1", port=proxy.port).update_query_dict(
            {"sslmode": "disable", "gssencmode": "disable"}
        )
        store = a2sql.create_async_store(proxied.render_as_string(hide_password=False))
        try:
            await store.ensure_schema()
            await store.engine.dispose()  # the schema check's connection closed
            proxy.armed = True
            call = asyncio.ensure_future(store.append("s", [NewEvent("t")]))
            await asyncio.wait_for(proxy.holding.wait(), 10)
            call.cancel()
            await asyncio.wait([call], timeout=10)
            proxy.release.set()
            await store.close()
            await asyncio.sleep(0.1)  # a connection closed reaches the server
            return call.cancelled(), await asyncio.to_thread(connections_left, postgres_url, name)
        finally:
            await store.close()
            await proxy.close()

    gc.collect()
    gc.disable()
    try:
        cancelled, left = asyncio.run(scenario())
    finally:
        gc.enable()
    assert cancelled
    assert left == 0
