"""Wake-ups for streams: in-process after a local commit, LISTEN/NOTIFY across processes.

A wake-up is only a hint to re-read: the table is the delivery. A stream
that misses one still finds every event at its next (slower) poll.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy import URL, Engine

from a2sql.backends import backend_of
from a2sql.backends.postgresql import CHANNEL
from a2sql.core.urls import shown_url
from a2sql.execution import forks
from a2sql.execution.pooler import behind_pooler

log = logging.getLogger(__name__)

# A listener that lost its connection, or cannot connect, waits this long
# before trying again, twice as long after each failure in a row up to the
# most (a wrong listen URL must not log a warning every second for ever).
RECONNECT_PAUSE_S = 1.0
MOST_RECONNECT_PAUSE_S = 30.0
# How often the listener thread checks whether it should stop.
LISTEN_TICK_S = 0.5

Callback = Callable[[], None]
ALL_SESSIONS = "\x00all"  # never a session id: names hold no NUL


class Wakeups:
    """Callbacks per (database, session), called when that session may have new events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[tuple[str, str], set[Callback]] = defaultdict(set)

    def subscribe(self, database: str, session_id: str, callback: Callback) -> Callback:
        """Call ``callback`` on each wake-up of the session; returns the unsubscribe."""
        key = (database, session_id)
        with self._lock:
            self._callbacks[key].add(callback)

        def unsubscribe() -> None:
            with self._lock:
                callbacks = self._callbacks.get(key)
                if callbacks is not None:
                    callbacks.discard(callback)
                    if not callbacks:
                        del self._callbacks[key]

        return unsubscribe

    def wake(self, database: str, session_id: str) -> None:
        """Wake the session's subscribers (``ALL_SESSIONS`` wakes every session's)."""
        if not self._callbacks:  # no stream in this process: nothing to wake, no lock
            return
        with self._lock:
            if session_id == ALL_SESSIONS:
                targets = [
                    cb for (db, _), cbs in self._callbacks.items() if db == database for cb in cbs
                ]
            else:
                # Those watching every session (idle workers) are woken too.
                targets = [
                    *self._callbacks.get((database, session_id), ()),
                    *self._callbacks.get((database, ALL_SESSIONS), ()),
                ]
        for callback in targets:
            callback()


# One registry per process: every store on the same database shares it, so a
# stream sees a commit made through any store object of this process.
LOCAL = Wakeups()


def database_key(engine: Engine) -> str:
    """What identifies the database an engine writes to, within this process."""
    return backend_of(engine).database_key(engine.url, id(engine))


class PostgresListener:
    """One LISTEN connection per store, fanning notifications out to ``LOCAL``.

    Runs in a daemon thread with a connection of its own (outside the pool).
    After a lost connection it reconnects and wakes every stream of the
    database, since notifications sent meanwhile are gone.
    """

    def __init__(self, engine: Engine, database: str, url: URL) -> None:
        self._engine = engine
        self._database = database
        self._url = url
        self._stop = threading.Event()
        self._started = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="a2sql-listen", daemon=True)
        self._generation = forks.generation()
        self.listening = threading.Event()

    @property
    def inherited(self) -> bool:
        """Whether this listener is a forked parent's: its thread does not run here, and
        its connection is the parent's to use and close."""
        return self._generation != forks.generation()

    def start(self) -> None:
        with self._lock:
            if not self._started:
                self._started = True
                self._thread.start()

    def stop(self, *, wait: bool = True) -> None:
        """End the thread (it closes its connection): at once if ``wait``, else at its
        next tick."""
        if self.inherited:
            return
        self._stop.set()
        if wait and self._started and self._thread is not threading.current_thread():
            self._thread.join(timeout=LISTEN_TICK_S * 4)

    def _connect(self) -> object:
        import psycopg

        args, kwargs = self._engine.dialect.create_connect_args(self._url)
        kwargs.pop("context", None)
        return psycopg.connect(*args, autocommit=True, **kwargs)

    def _run(self) -> None:
        import psycopg

        pause = RECONNECT_PAUSE_S
        while not self._stop.is_set():
            connected = False
            try:
                connection = self._connect()
                assert isinstance(connection, psycopg.Connection)
                connected = True
                with connection:
                    if self._behind_pooler(connection):
                        return
                    connection.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    pause = RECONNECT_PAUSE_S
                    # Anything committed before LISTEN took effect was not
                    # announced to us: let every stream re-read once.
                    LOCAL.wake(self._database, ALL_SESSIONS)
                    while not self._stop.is_set():
                        for notice in connection.notifies(timeout=LISTEN_TICK_S):
                            LOCAL.wake(self._database, notice.payload)
            except psycopg.Error as error:
                self.listening.clear()
                detail = str(error).strip().splitlines() or [type(error).__name__]
                log.warning(
                    "a2sql listener %s %s (%s); trying again in %g s, streams poll meanwhile",
                    "lost its connection to" if connected else "cannot connect to",
                    shown_url(self._url),
                    detail[0],
                    pause,
                )
                self._stop.wait(pause)
                pause = min(pause * 2, MOST_RECONNECT_PAUSE_S)

    def _behind_pooler(self, connection: Any) -> bool:
        def scalar(sql: str) -> Any:
            return connection.execute(sql).fetchone()[0]

        if not behind_pooler({}, connection, scalar):
            return False
        # A transaction pooler would hand the LISTEN to a server connection
        # that then serves other clients: nothing would ever be heard here.
        log.warning(
            "a2sql: %s goes through a connection pooler, where LISTEN hears nothing: "
            "streams and idle workers see other processes' commits at their next poll. "
            "create_store(url, listen=DIRECT_URL) (a2sql commands: --listen DIRECT_URL) "
            "listens on a direct connection to the database instead; listen=False "
            "(--listen off) polls without this warning",
            shown_url(self._url),
        )
        return True


class StoreWakeups:
    """One store's wake-ups: ``LOCAL`` for its database and, on PostgreSQL, a LISTEN
    connection of its own to ``listen_url``, started by the first stream or watcher;
    with no ``listen_url``, other processes' commits are seen at the next poll.
    ``Store`` and ``AsyncStore`` each hold one."""

    def __init__(self, engine: Engine, listen_url: URL | None) -> None:
        self._engine = engine
        self._listen_url = listen_url
        self.database = database_key(engine)
        self._listener: PostgresListener | None = None
        self._told = False

    def wake(self, session_id: str) -> None:
        """This process's subscribers of ``session_id`` (and watchers) may read again."""
        LOCAL.wake(self.database, session_id)

    def listen(self) -> None:
        """Make sure other processes' commits reach this process too (PostgreSQL)."""
        if not backend_of(self._engine).capabilities.listen_notify:
            return
        if self._listen_url is None:
            if not self._told:
                self._told = True
                log.info(
                    "a2sql: no LISTEN (create_store(listen=False)): streams and idle workers "
                    "see other processes' commits at their next poll"
                )
            return
        listener = self._listener
        # A forked child listens on a connection of its own.
        if listener is None or listener.inherited:
            self._listener = PostgresListener(self._engine, self.database, self._listen_url)
            self._listener.start()

    def subscribe(self, session_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        return LOCAL.subscribe(self.database, session_id, callback)

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback`` on any session's new work, here or (PostgreSQL) anywhere."""
        self.listen()
        return LOCAL.subscribe(self.database, ALL_SESSIONS, callback)

    def stop(self, *, wait: bool = True) -> None:
        """Stop listening; ``wait``: until the listener's connection is closed."""
        if self._listener is not None:
            self._listener.stop(wait=wait)
