"""A transaction plan: what one public method does in one transaction, described before
anything runs.

A ``Plan`` says which session to lock (if any), whether the transaction only
reads, and what to run in it; ``Answered`` is a method's answer found without
the database. ``Context`` is what every plan needs besides its arguments.
Plans are made by a2sql.plans.operations and run by a2sql.execution.running,
on whichever facade and engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NamedTuple, TypeVar

from sqlalchemy import Executable

from a2sql.backends.base import Backend
from a2sql.core import arguments as validate
from a2sql.core.clock import Clock, SystemClock
from a2sql.core.errors import A2Error, invalid
from a2sql.core.records import AppendResult, CompleteResult
from a2sql.sql.codec import truncate_ms
from a2sql.sql.executor import AnyRow, Transaction

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Context:
    """What every call needs besides its arguments."""

    backend: Backend
    clock: Clock
    ids: Callable[[], str]
    limits: validate.Limits
    # How long a2sql's own transactions wait for a lock (SQLite: the busy timeout).
    lock_timeout_ms: int

    def now(self) -> datetime:
        """The clock, UTC, to the ms. A write records no time earlier than what already
        happened in its session (a2sql.sql.times), whenever the clock was read."""
        if type(self.clock) is SystemClock:  # aware, UTC and to the ms already
            return self.clock.now()
        value = self.clock.now()
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise invalid("clock", "now() must return a timezone-aware datetime")
        try:
            return truncate_ms(value)
        except OverflowError:
            raise invalid("clock", f"now() is outside years 1-9999 in UTC: {value}") from None


class OneStatement(NamedTuple, Generic[T]):
    """A plan's common case in one statement, where a backend has one (PostgreSQL:
    a2sql.backends.postgresql.one_statement), and what its rows answer (``None``: not
    the common case, nothing was written, the full path decides)."""

    statement: Executable
    params: Mapping[str, Any]
    answer: Callable[[Sequence[AnyRow]], T | None]
    # The error to raise when the statement hits the unique event id index;
    # ``None``: the driver's error, translated as any other.
    collided: Callable[[BaseException], A2Error] | None = None


# Plan and ValidEvent are built on every call: named tuples, as a frozen
# dataclass costs ~0.1 µs a field to build.
class Plan(NamedTuple, Generic[T]):
    """One transaction to run: ``run(tx)`` after locking ``lock_session``."""

    run: Callable[[Transaction], T]
    lock_session: str | None = None
    read_only: bool = False
    # Whether the result means new events in ``lock_session``: streams are woken.
    added_events: Callable[[T], bool] | None = None
    # The common case in one statement after the lock, where the backend has one
    # (``Backend.one_statement_*``), built when it is sent; ``run`` follows when it
    # answers ``None``.
    one_statement: Callable[[], OneStatement[T]] | None = None

    def wakes(self, result: T) -> bool:
        return self.added_events is not None and self.added_events(result)


@dataclass(frozen=True, slots=True)
class Answered(Generic[T]):
    """A method answered without touching the database."""

    result: T


def has_events(result: AppendResult | CompleteResult) -> bool:
    return bool(result.events)
