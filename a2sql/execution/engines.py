"""Engine configuration: URL resolution and engine creation."""

from __future__ import annotations

import os

from sqlalchemy import URL, Engine, create_engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from a2sql.backends import backend_of
from a2sql.core.errors import A2Error, invalid
from a2sql.core.urls import shown_url, shown_url_text
from a2sql.execution.pooler import decide_at_connect

ENV_URL = "A2SQL_DATABASE_URL"
DEFAULT_URL = "sqlite:///.a2/dev.db"


def resolve_url(url: str | URL | None) -> URL:
    """The URL a store opens: the argument, else ``A2SQL_DATABASE_URL``, else ``.a2/dev.db``.

    ``postgresql://`` and ``postgres://`` are taken to mean psycopg 3;
    ``sqlite+aiosqlite://`` names the same file as ``sqlite://`` (a ``Store``
    opens it with sqlite3, an ``AsyncStore`` with aiosqlite). Anything a2sql
    cannot open is ``INVALID_ARGUMENT`` naming the URL, password hidden; an
    engine a2sql does not run on names the ones it does.
    """
    if url is None:
        url = os.environ.get(ENV_URL) or DEFAULT_URL
    parsed = _parsed(url) if isinstance(url, str) else url
    parsed = backend_of(parsed).resolved(parsed)
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


def _driver_missing(url: URL, error: ImportError) -> A2Error:
    hint = backend_of(url).install_hint
    return invalid("url", f"the driver for {url.drivername!r} is not installed: {error}{hint}")


def build_engine(url: URL) -> Engine:
    """A new engine for ``url``, configured for a2sql."""
    try:
        engine = create_engine(url, **backend_of(url).engine_arguments(url))
    except ImportError as error:
        raise _driver_missing(url, error) from None
    decide_at_connect(engine)
    return engine


def async_url(url: URL) -> URL:
    """The asyncio driver of ``url``: aiosqlite for SQLite; psycopg 3 serves both modes."""
    return backend_of(url).async_url(url)


def build_async_engine(url: URL) -> AsyncEngine:
    """A new asyncio engine for ``url``, configured for a2sql."""
    url = async_url(url)
    try:
        engine = create_async_engine(url, **backend_of(url).engine_arguments(url))
    except ImportError as error:
        raise _driver_missing(url, error) from None
    decide_at_connect(engine.sync_engine)
    return engine
