"""What every ``a2sql`` command shares: ``--url``, ``--json``, opening the store, errors."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click
from sqlalchemy import URL

from a2sql.api.store import Store
from a2sql.backends import database_file
from a2sql.core.escaping import command_line, printable
from a2sql.core.urls import listen_argument, shown_url
from a2sql.execution.engines import DEFAULT_URL, ENV_URL, resolve_url

F = TypeVar("F", bound=Callable[..., Any])

URL_HELP = f"Database URL (default: ${ENV_URL}, else sqlite:///.a2/dev.db)."
LISTEN_HELP = (
    "PostgreSQL: where to LISTEN for other processes' commits (default: --url). Behind a "
    "pooler such as PgBouncer, a direct URL to the same database, or 'off' to poll."
)


# Exit statuses: 1 when the command ran and found nothing to act on (no such
# session or event, not a dead letter, nothing deleted, behind on migrations);
# 2 when it could not run (usage, the database, a refusal); 3 when
# `migrate --check` finds no database at all.
NOTHING_DONE = 1
CANNOT_RUN = 2
NO_DATABASE = 3


class CommandFailed(Exception):
    """A command's one-line failure: printed to stderr as ``a2sql: …``, then exit ``code``."""

    def __init__(self, message: str, code: int = NOTHING_DONE) -> None:
        super().__init__(message)
        self.code = code


def plural(count: int, noun: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _url_before_or_after(ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """``--url`` after the command, else the one before it (``a2sql --url URL status``)."""
    before = ctx.find_root().params.get("url")
    if value is None:
        return before
    if before is not None and before != value:
        raise click.UsageError(
            "--url is given before and after the command, with different URLs: give it once",
            ctx,
        )
    return value


def url_option(function: F) -> F:
    return click.option(
        "--url",
        metavar="URL",
        default=None,
        help=URL_HELP,
        callback=_url_before_or_after,
    )(function)


def listen_option(function: F) -> F:
    return click.option("--listen", metavar="URL|off", default=None, help=LISTEN_HELP)(function)


def json_option(function: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")(
        function
    )


def shown(url: str | None) -> str:
    """The URL a command works on, as ``create_store`` resolves it, password hidden."""
    return shown_url(resolve_url(url))


def missing_file(url: URL) -> bool:
    """Whether ``url`` is a SQLite file that does not exist (opening it would create it)."""
    path = database_file(url)
    return path is not None and not path.exists()


def no_such_file(url: URL, role: str = "database", code: int = CANNOT_RUN) -> CommandFailed:
    """The one-line refusal of a SQLite file that does not exist."""
    where = shown_url(url)
    return CommandFailed(
        f"{role} {where}: no such database file "
        f"(`{command_line('a2sql', 'migrate', '--url', where)}` creates one)",
        code,
    )


def existing(url: str | None, role: str = "database") -> URL:
    """``url`` resolved, refusing a SQLite file that does not exist: a mistyped path must
    not become a new, empty database. The default ``.a2/dev.db`` is made on first use."""
    resolved = resolve_url(url)
    if missing_file(resolved) and resolved != resolve_url(DEFAULT_URL):
        raise no_such_file(resolved, role)
    return resolved


def refuse_unasked(yes: bool, command: str, *, verb: str = "delete", dry_run: bool = True) -> None:
    """A command that deletes (or cancels: ``verb``) asks first on a terminal; elsewhere it
    needs ``--yes``, so that a script says it means it. Called before anything is opened;
    ``dry_run``: whether the command takes ``--dry-run``."""
    if not yes and not sys.stdin.isatty():
        instead = f" (or --dry-run to see what it would {verb})" if dry_run else ""
        raise CommandFailed(
            f"{command} {verb}s and asks first, but stdin is not a terminal: "
            f"pass --yes to {verb} without asking{instead}",
            CANNOT_RUN,
        )


def confirm(question: str, declined: str = "nothing deleted") -> None:
    """Ask on the terminal (on stderr: stdout stays data); anything but yes: exit 1,
    saying ``declined``."""
    if not click.confirm(printable(question), default=False, err=True):
        raise CommandFailed(declined, NOTHING_DONE)


@contextmanager
def opened(url: str | None, listen: str | None = None) -> Iterator[Store]:
    """The store at ``url`` (resolved like ``create_store``), closed afterwards;
    ``listen``: the ``--listen`` option."""
    from a2sql.api.opening import create_store

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
    """A duration such as ``30d``, ``12h``, ``1d12h`` or ``90s``, that reaches no further
    back than the year 1 (a cut before it cannot be written as a time)."""

    name = "AGE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        text = str(value).strip().lower()
        parts = _AGE_PART.findall(text)
        if not parts or _AGE_PART.sub("", text).strip():
            self.fail(f"{value!r} is not a duration such as 30d, 12h, 1d12h or 90s", param, ctx)
        too_long = f"{value!r} is too long: it reaches back before the year 1"
        try:
            age = sum((int(n) * _UNITS[unit] for n, unit in parts), timedelta())
        except OverflowError:
            self.fail(too_long, param, ctx)
        if age > datetime.now(UTC) - datetime.min.replace(tzinfo=UTC):
            self.fail(too_long, param, ctx)
        return age


class Whole(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on only
    """A whole number from ``minimum`` (to ``maximum``), failing with what is expected."""

    name = "INTEGER"

    def __init__(self, minimum: int, maximum: int | None = None, what: str = "") -> None:
        self.minimum, self.maximum = minimum, maximum
        span = f"from {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        self.expected = f"{what}, a whole number {span}" if what else f"a whole number {span}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            number = value
        else:
            try:
                number = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"{value!r}: expected {self.expected}", param, ctx)
        if number < self.minimum or (self.maximum is not None and number > self.maximum):
            self.fail(f"{number}: expected {self.expected}", param, ctx)
        return number


EVENT_INDEX = Whole(1, what="an event index")
