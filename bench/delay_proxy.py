"""A TCP proxy to PostgreSQL that adds a round-trip time: ``with delayed(url, rtt_ms) as url2:``.

Client and server on one machine talk over loopback (about 0.1 ms a round
trip), which undervalues every round trip a client makes. The kernel here has
no ``netem``, so this proxy stands in for a network: every chunk of bytes read
from one side is written to the other RTT/2 later, in each direction, so that
a request and its answer cost one RTT more than they do directly.

Delays are a pipeline, not a sleep: a chunk that arrives at ``t`` leaves at
``t + RTT/2`` however many others are in flight, in the order they came (one
queue of ``(due, bytes)`` per connection and direction, and one timer for the
queue's head). A client that pipelines ten statements waits about one RTT, not
ten. A close, from either side, travels the same way: it reaches the other
side RTT/2 later, after the bytes that came before it.

The proxy runs in a process of its own (this file, run as a script, standard
library only) so that its CPU time is not spent in the measured process; it
still shares the machine's cores with it. Its event loop waits in ``select()``,
whose timeout has microsecond resolution (``epoll``'s is a millisecond, too
coarse for a 0.5 ms RTT); ``select()`` limits it to about 500 connections.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

READY_PREFIX = "listening on port "


class _Direction:
    """Bytes from one side to the other, each chunk written ``delay`` seconds after it came."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        # (due, chunk); chunk None: close the destination.
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.dest: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.ended = False

    def push(self, chunk: bytes | None) -> None:
        if self.ended:
            return
        if chunk is None:
            self.ended = True
        self.queue.append((self.loop.time() + self.delay, chunk))
        self._arm()

    def attach(self, dest: asyncio.Transport) -> None:
        self.dest = dest
        self._arm()

    def _arm(self) -> None:
        if self.timer is None and self.queue and self.dest is not None:
            self.timer = self.loop.call_at(self.queue[0][0], self._flush)

    def _flush(self) -> None:
        self.timer = None
        dest = self.dest
        assert dest is not None
        now = self.loop.time() + 1e-6
        while self.queue and self.queue[0][0] <= now:
            chunk = self.queue.popleft()[1]
            if chunk is None:
                self.queue.clear()
                dest.close()
                return
            if not dest.is_closing():
                dest.write(chunk)
        self._arm()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()


class _Side(asyncio.Protocol):
    """One socket of a proxied connection: what it reads goes into ``out``."""

    def __init__(
        self,
        out: _Direction,
        connections: set[_Side],
        on_made: Callable[[asyncio.Transport], None] | None = None,
    ) -> None:
        self.out = out
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.connections = connections
        self.on_made = on_made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.connections.add(self)
        if self.on_made is not None:
            self.on_made(transport)

    def data_received(self, data: bytes) -> None:
        self.out.push(data)

    def eof_received(self) -> bool | None:
        self.out.push(None)
        return None  # close this socket; the other side closes RTT/2 later

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.out.push(None)

    # Flow control: a destination that cannot keep up stops its source from reading.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def serve(upstream_host: str, upstream_port: int, rtt_ms: float, port: int = 0) -> None:
    """Listen on 127.0.0.1:``port`` (0: a free one, printed) until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    delay = rtt_ms / 2000.0
    connections: set[_Side] = set()
    directions: list[_Direction] = []
    tasks: set[asyncio.Task[None]] = set()

    def accept() -> _Side:
        to_server = _Direction(loop, delay)
        to_client = _Direction(loop, delay)
        directions.extend((to_server, to_client))
        upstream = _Side(to_client, connections, on_made=to_server.attach)

        async def connect(client_transport: asyncio.Transport) -> None:
            try:
                await loop.create_connection(lambda: upstream, upstream_host, upstream_port)
            except OSError:
                client_transport.close()

        def made(transport: asyncio.Transport) -> None:
            to_client.attach(transport)
            tasks.add(task := loop.create_task(connect(transport)))
            task.add_done_callback(tasks.discard)

        client = _Side(to_server, connections, on_made=made)
        client.peer, upstream.peer = upstream, client
        # Directions of closed connections are dropped now and then.
        if len(directions) > 256:
            directions[:] = [d for d in directions if not (d.ended and not d.queue)]
        return client

    server = await loop.create_server(accept, "127.0.0.1", port)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bound = server.sockets[0].getsockname()[1]
    print(f"{READY_PREFIX}{bound}", flush=True)
    await stop.wait()
    server.close()
    for direction in directions:
        direction.cancel()
    for side in list(connections):
        if side.transport is not None:
            side.transport.abort()
    await server.wait_closed()


def _fine_timers() -> None:
    """Linux: wake this process's timers 1 ns late at most, not the default 50 us."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def _run(upstream_host: str, upstream_port: int, rtt_ms: float, port: int) -> None:
    _fine_timers()
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(serve(upstream_host, upstream_port, rtt_ms, port))
    finally:
        loop.close()


# --- the client's side ------------------------------------------------------------------


@contextmanager
def delayed(url: str, rtt_ms: float) -> Iterator[str]:
    """A proxy process adding ``rtt_ms`` to each round trip to ``url``'s server, and
    ``url`` with host and port rewritten to it (127.0.0.1 and the proxy's port).

    ``url`` is a PostgreSQL URL (libpq's or SQLAlchemy's form); its host and
    port (default 127.0.0.1 and 5432) name the server. The proxy is stopped by
    its PID when the block exits, and waited for.
    """
    from sqlalchemy.engine import make_url

    if rtt_ms < 0:
        raise ValueError(f"rtt_ms must be >= 0, not {rtt_ms}")
    parsed = make_url(url)
    host = parsed.host or "127.0.0.1"
    port = parsed.port or 5432
    process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), host, str(port), str(rtt_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith(READY_PREFIX):
            raise RuntimeError(f"the delay proxy did not start (it said {line!r})")
        proxy_port = int(line[len(READY_PREFIX) :])
        yield parsed.set(host="127.0.0.1", port=proxy_port).render_as_string(hide_password=False)
    finally:
        stop(process)


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the proxy's PID, then wait for it (SIGKILL after 10 s)."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="TCP proxy adding a round-trip time")
    parser.add_argument("upstream_host")
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("rtt_ms", type=float)
    parser.add_argument("--port", type=int, default=0, help="listen port (0: a free one)")
    args = parser.parse_args(argv)
    _run(args.upstream_host, args.upstream_port, args.rtt_ms, args.port)


if __name__ == "__main__":
    main()
