"""create_store / create_async_store: from a URL (or an engine) to a ready store."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import URL, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from a2sql import migrate as migrations
from a2sql.api.async_store import AsyncStore
from a2sql.api.store import Store
from a2sql.backends import backend_of
from a2sql.backends.base import Backend
from a2sql.backends.sqlite_begin import DEFAULT_LOCK_TIMEOUT_MS
from a2sql.backends.sqlite_file import DatabaseFile, make_ready
from a2sql.core import arguments as validate
from a2sql.core.arguments import DEFAULT_MAX_JSON_CHARS, Limits
from a2sql.core.clock import Clock, SystemClock, uuid7_id
from a2sql.core.errors import DRIVER_FAILURES, A2Error, from_driver_error, invalid
from a2sql.core.urls import shown_url
from a2sql.execution.engines import build_async_engine, build_engine, resolve_url
from a2sql.execution.threads import ThreadRunner
from a2sql.plans.kinds import Context

log = logging.getLogger("a2sql")


def _context(
    backend: Backend,
    clock: Clock | None,
    ids: Callable[[], str] | None,
    max_json_chars: object,
    lock_timeout_ms: object,
) -> Context:
    if (
        isinstance(max_json_chars, bool)
        or not isinstance(max_json_chars, int)
        or (max_json_chars < 1)
    ):
        raise invalid("max_json_chars", "must be a positive int")
    context = Context(
        backend=backend,
        clock=SystemClock() if clock is None else _usable_clock(clock),
        ids=uuid7_id if ids is None else _usable_ids(ids),
        limits=Limits(max_json_chars=max_json_chars),
        lock_timeout_ms=_lock_timeout(lock_timeout_ms),
    )
    context.now()  # a clock that gives no aware datetime fails here, not mid-operation
    return context


def _usable_clock(clock: object) -> Clock:
    if not callable(getattr(clock, "now", None)):
        raise invalid(
            "clock",
            "must have a now() method returning a timezone-aware datetime (a2sql.Clock), "
            f"got {type(clock).__name__}",
        )
    return clock  # type: ignore[return-value]


def _usable_ids(ids: object) -> Callable[[], str]:
    if not callable(ids):
        raise invalid("ids", f"must be a callable returning an event id, got {type(ids).__name__}")
    return validate.checked_ids(ids)


# PostgreSQL's lock_timeout is a 32-bit count of milliseconds.
MAX_LOCK_TIMEOUT_MS = 2**31 - 1


def _lock_timeout(value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_LOCK_TIMEOUT_MS
    ):
        raise invalid("lock_timeout_ms", f"must be an int from 1 to {MAX_LOCK_TIMEOUT_MS:,}")
    return value


def _opening_failed(url: URL, error: BaseException) -> A2Error:
    """The first connection failed: a SQLite file that cannot be opened is the URL's fault."""
    return backend_of(url).unopenable(url, error) or from_driver_error(error)


def _database_file(url: URL, *, create: bool) -> DatabaseFile | None:
    """The SQLite file the store opens, made first if it may be (``create``), and refused
    if it is missing and may not; ``None`` off SQLite files."""
    path = backend_of(url).database_file(url)
    if path is None:
        return None
    make_ready(path, create=create)
    return DatabaseFile(path)


def _upgrade_allowed(migrate: object, backend: Backend) -> bool:
    if migrate is not None and not isinstance(migrate, bool):
        raise invalid("migrate", "must be True, False or None")
    return backend.upgrades_on_open if migrate is None else migrate


def _listen_url(listen: object, url: URL) -> URL | None:
    """Where the store's PostgreSQL listener connects: ``None`` for nowhere."""
    listens = backend_of(url).capabilities.listen_notify
    if listen is True:
        return url if listens else None
    if listen is False:
        return None
    if not isinstance(listen, (str, URL)):
        raise invalid("listen", f"must be True, False or a database URL, got {listen!r}")
    try:
        resolved = resolve_url(listen)
    except A2Error as error:  # it names the url argument: this is listen
        raise invalid("listen", error.message.removeprefix("url: ")) from None
    if not listens:
        raise invalid(
            "listen",
            f"a URL to LISTEN through is for a PostgreSQL store; this store's database "
            f"is {shown_url(url)}",
        )
    if backend_of(resolved) is not backend_of(url):
        raise invalid(
            "listen",
            "a URL to LISTEN through is for a PostgreSQL store, and names the same "
            f"PostgreSQL database (got {shown_url(resolved)})",
        )
    return resolved


def create_store(
    url: str | URL | Engine | None = None,
    *,
    clock: Clock | None = None,
    ids: Callable[[], str] | None = None,
    migrate: bool | None = None,
    max_json_chars: int = DEFAULT_MAX_JSON_CHARS,
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
    listen: bool | str | URL = True,
) -> Store:
    """Open a store.

    ``url``: a SQLAlchemy URL or an ``Engine``; ``None`` means
    ``A2SQL_DATABASE_URL``, else ``sqlite:///.a2/dev.db``. ``clock`` gives every
    stored time; ``ids`` makes ids for events appended without one.
    ``migrate``: ``True`` upgrades the schema, ``False`` only checks it,
    ``None`` upgrades SQLite and checks other engines. ``max_json_chars``
    bounds the encoded size of a payload, state or presence value.
    ``lock_timeout_ms``: how long a write waits for a session another
    transaction holds before failing with ``STORE_UNAVAILABLE`` (SQLite: for
    the database's write lock); on PostgreSQL a transaction of the store's
    own that sits idle that long (a frozen process) is ended by the server,
    freeing the session. The caller's transactions (``using``) keep their own
    settings.

    ``listen`` (PostgreSQL): how streams and idle workers learn of other
    processes' commits. ``True`` LISTENs on a connection of the store's own
    to ``url``; a URL LISTENs there instead: a direct connection to the same
    database, for a store whose ``url`` goes through a transaction pooler
    such as PgBouncer (LISTEN does not survive transaction pooling);
    ``False`` does not listen: they see such commits at their next poll.
    Commits through stores of the same process wake them either way.
    """
    resolved = resolve_url(url.url if isinstance(url, Engine) else url)
    backend = backend_of(resolved)
    context = _context(backend, clock, ids, max_json_chars, lock_timeout_ms)
    listen_url = _listen_url(listen, resolved)
    upgrade = _upgrade_allowed(migrate, backend)
    database_file = _database_file(resolved, create=upgrade)
    if isinstance(url, Engine):
        engine, owns_engine = url, False
    else:
        engine, owns_engine = build_engine(resolved), True
    try:
        try:
            migrations.ensure_schema(
                engine, upgrade_allowed=upgrade, lock_timeout_ms=context.lock_timeout_ms
            )
        except DRIVER_FAILURES as error:
            raise _opening_failed(engine.url, error) from error
        if database_file is not None:
            database_file.check()
    except BaseException:
        if owns_engine:
            engine.dispose()
        raise
    store = Store(
        engine,
        context,
        owns_engine=owns_engine,
        serialize=backend.is_memory(engine.url),
        database_file=database_file,
        listen_url=listen_url,
    )
    _log_path("Store", engine.url, store.execution_path)
    return store


def create_async_store(
    url: str | URL | AsyncEngine | None = None,
    *,
    clock: Clock | None = None,
    ids: Callable[[], str] | None = None,
    migrate: bool | None = None,
    max_json_chars: int = DEFAULT_MAX_JSON_CHARS,
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
    listen: bool | str | URL = True,
) -> AsyncStore:
    """Open an ``AsyncStore``: the arguments of ``create_store``, an ``AsyncEngine`` for an engine.

    SQLite runs on aiosqlite, PostgreSQL on psycopg 3's async mode. The
    schema is checked (or upgraded) before the first operation; use
    ``async with create_async_store(...) as store`` to have it checked at once.
    """
    resolved = resolve_url(url.url if isinstance(url, AsyncEngine) else url)
    backend = backend_of(resolved)
    context = _context(backend, clock, ids, max_json_chars, lock_timeout_ms)
    listen_url = _listen_url(listen, resolved)
    upgrade = _upgrade_allowed(migrate, backend)
    database_file = _database_file(resolved, create=upgrade)
    sync_path = None
    if isinstance(url, AsyncEngine):
        engine, owns_engine = url, False
    else:
        engine, owns_engine = build_async_engine(resolved), True
        if not backend.is_memory(resolved):
            sync_path = ThreadRunner(build_engine(resolved), context, database_file)
    async_store = AsyncStore(
        engine,
        context,
        owns_engine=owns_engine,
        upgrade_schema=upgrade,
        serialize=backend.is_memory(engine.url),
        database_file=database_file,
        listen_url=listen_url,
        sync_path=sync_path,
    )
    _log_path("AsyncStore", engine.url, async_store.execution_path)
    return async_store


def _log_path(kind: str, url: URL, path: str) -> None:
    """Say at DEBUG which way the store's calls go (its ``execution_path``)."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s on %s: execution path %r", kind, shown_url(url), path)
