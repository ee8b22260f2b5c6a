"""Engine configuration: URL resolution and engine creation."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import URL, Engine, create_engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from a2sql.begin import DEFAULT_LOCK_TIMEOUT_MS, POSTGRES_ISOLATION
from a2sql.errors import A2Error, invalid
from a2sql.sqlite_file import file_of, make_ready
from a2sql.urls import shown_url, shown_url_text

ENV_URL = "A2SQL_DATABASE_URL"
DEFAULT_URL = "sqlite:///.a2/dev.db"

# The drivers a2sql runs on, per database: sqlite3 and aiosqlite, psycopg 3
# (sync and async alike).
SUPPORTED_DRIVERS = {"sqlite": ("pysqlite", "aiosqlite"), "postgresql": ("psycopg",)}


def resolve_url(url: str | URL | None) -> URL:
    """The URL a store opens: the argument, else ``A2SQL_DATABASE_URL``, else ``.a2/dev.db``.

    ``postgresql://`` and ``postgres://`` are taken to mean psycopg 3;
    ``sqlite+aiosqlite://`` names the same file as ``sqlite://`` (a ``Store``
    opens it with sqlite3, an ``AsyncStore`` with aiosqlite). Anything a2sql
    cannot open is ``INVALID_ARGUMENT`` naming the URL, password hidden.
    """
    if url is None:
        url = os.environ.get(ENV_URL) or DEFAULT_URL
    parsed = _parsed(url) if isinstance(url, str) else url
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.drivername == "sqlite+aiosqlite":
        parsed = parsed.set(drivername="sqlite")
    _check_driver(parsed)
    if parsed.port is not None and not 1 <= parsed.port <= MAX_PORT:
        raise invalid("url", f"{shown_url(parsed)}: the port must be 1 to {MAX_PORT}")
    return parsed


# TCP ports are 16 bits; port 0 means "any" and no server listens there.
MAX_PORT = 65_535


def _parsed(text: str) -> URL:
    if text.startswith("postgres://"):
        text = "postgresql://" + text[len("postgres://") :]
    try:
        return make_url(text)
    except ArgumentError:
        problem = "it is not a database URL (dialect+driver://user:password@host:port/database)"
    except ValueError:  # SQLAlchemy's int() of what it took for the port
        problem = (
            "its host and port do not parse (a port is a number; an IPv6 host "
            "is written in brackets, as in [::1]:5432)"
        )
    raise invalid("url", f"{shown_url_text(text)}: {problem}")


def _check_driver(url: URL) -> None:
    backend = url.get_backend_name()
    if backend not in SUPPORTED_DRIVERS:
        raise invalid("url", f"a2sql supports sqlite and postgresql, not {url.drivername!r}")
    if url.get_driver_name() not in SUPPORTED_DRIVERS[backend]:
        supported = " or ".join(f"{backend}+{name}" for name in SUPPORTED_DRIVERS[backend])
        raise invalid(
            "url",
            f"a2sql runs {backend} on {supported}, not {url.drivername!r}"
            + (" (psycopg 3: pip install 'a2sql[postgres]')" if backend == "postgresql" else ""),
        )


def is_sqlite_memory(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _engine_arguments(url: URL) -> dict[str, Any]:
    """Keyword arguments for ``create_engine`` / ``create_async_engine`` of ``url``."""
    if url.get_backend_name() != "sqlite":
        return {"isolation_level": POSTGRES_ISOLATION}
    if is_sqlite_memory(url):
        # One connection for the engine's lifetime: every operation sees the
        # same in-memory database.
        return {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
    path = file_of(url)
    assert path is not None
    make_ready(path, create=True)
    return {"connect_args": {"timeout": DEFAULT_LOCK_TIMEOUT_MS / 1000}}


def _driver_missing(url: URL, error: ImportError) -> A2Error:
    extra = " (pip install 'a2sql[postgres]')" if url.get_backend_name() == "postgresql" else ""
    return invalid("url", f"the driver for {url.drivername!r} is not installed: {error}{extra}")


def build_engine(url: URL) -> Engine:
    """A new engine for ``url``, configured for a2sql."""
    try:
        return create_engine(url, **_engine_arguments(url))
    except ImportError as error:
        raise _driver_missing(url, error) from None


def async_url(url: URL) -> URL:
    """The asyncio driver of ``url``: aiosqlite for SQLite; psycopg 3 serves both modes."""
    if url.get_backend_name() == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    return url


def build_async_engine(url: URL) -> AsyncEngine:
    """A new asyncio engine for ``url``, configured for a2sql."""
    url = async_url(url)
    try:
        return create_async_engine(url, **_engine_arguments(url))
    except ImportError as error:
        raise _driver_missing(url, error) from None
