"""What every ``a2sql`` command shares: ``--url``, ``--json``, opening the store, errors."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import click
from sqlalchemy import URL

from a2sql.config import DEFAULT_URL, ENV_URL, is_sqlite_memory, resolve_url
from a2sql.store import Store
from a2sql.urls import shown_url

F = TypeVar("F", bound=Callable[..., Any])

URL_HELP = f"Database URL (default: ${ENV_URL}, else sqlite:///.a2/dev.db)."
LISTEN_HELP = (
    "PostgreSQL: where to LISTEN for other processes' commits (default: --url). Behind a "
    "pooler such as PgBouncer, a direct URL to the same database, or 'off' to poll."
)


# Exit statuses: 1 when the command ran and found nothing to act on (no such
# session, not a dead letter, nothing deleted, behind on migrations);
# 2 when it could not run (usage, the database, a refusal).
NOTHING_DONE = 1
CANNOT_RUN = 2


class CommandFailed(Exception):
    """A command's one-line failure: printed to stderr as ``a2sql: …``, then exit ``code``."""

    def __init__(self, message: str, code: int = NOTHING_DONE) -> None:
        super().__init__(message)
        self.code = code


def plural(count: int, noun: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def url_option(function: F) -> F:
    return click.option("--url", metavar="URL", default=None, help=URL_HELP)(function)


def listen_option(function: F) -> F:
    return click.option("--listen", metavar="URL|off", default=None, help=LISTEN_HELP)(function)


def listen_argument(listen: str | None) -> bool | str:
    """``--listen`` as ``create_store``'s ``listen``."""
    if listen is None:
        return True
    return False if listen == "off" else listen


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")(
        function
    )


def shown(url: str | None) -> str:
    """The URL a command works on, as ``create_store`` resolves it, password hidden."""
    return shown_url(resolve_url(url))


def existing(url: str | None, role: str = "database") -> URL:
    """``url`` resolved, refusing a SQLite file that does not exist: a mistyped path must
    not become a new, empty database. The default ``.a2/dev.db`` is made on first use."""
    resolved = resolve_url(url)
    database = resolved.database
    if (
        resolved.get_backend_name() == "sqlite"
        and database
        and not is_sqlite_memory(resolved)
        and resolved != resolve_url(DEFAULT_URL)
        and not Path(database).exists()
    ):
        where = shown_url(resolved)
        raise CommandFailed(
            f"{role} {where}: no such database file (`a2sql migrate --url {where}` creates one)",
            CANNOT_RUN,
        )
    return resolved


@contextmanager
def opened(url: str | None, listen: str | None = None) -> Iterator[Store]:
    """The store at ``url`` (resolved like ``create_store``), closed afterwards;
    ``listen``: the ``--listen`` option."""
    from a2sql.create import create_store

    with create_store(existing(url), listen=listen_argument(listen)) as store:
        yield store


_AGE_PART = re.compile(r"(\d+)\s*(w|d|h|m|s|ms)")
_UNITS = {
    "w": timedelta(weeks=1),
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
}


class Age(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on only
    """A duration such as ``30d``, ``12h``, ``1d12h`` or ``90s``."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        parts = _AGE_PART.findall(text)
        if not parts or _AGE_PART.sub("", text).strip():
            self.fail(f"{value!r} is not a duration such as 30d, 12h, 1d12h or 90s", param, ctx)
        return sum((int(n) * _UNITS[unit] for n, unit in parts), timedelta())
