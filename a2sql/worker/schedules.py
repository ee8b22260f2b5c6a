"""Schedules (SPEC §7): an event appended for each slot of a period or a cron expression,
by every worker that runs the schedule, with no leader.

A slot is a start time: a multiple of ``every`` since the Unix epoch, or a time the
cron expression names (in UTC). Its event carries the id ``"{name}@{slot}"``
(the slot's start, UTC, ISO 8601): every worker appends it, and the store's
idempotent append keeps exactly one, whatever the number of workers. A worker
appends the most recent ``catch_up`` slots that have started, so that slots
missed while no worker ran are appended late, at most ``catch_up`` of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from a2sql.core import arguments as validate
from a2sql.core.errors import A2Error, ErrorCode, invalid
from a2sql.core.records import JSON, NewEvent
from a2sql.worker.policy import log

if TYPE_CHECKING:
    from a2sql.api.async_store import AsyncStore
    from a2sql.api.store import Store

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Slots named to the second: a period is a whole number of seconds.
ONE_SECOND = timedelta(seconds=1)
MAX_CATCH_UP = 1000
CRON_FIELDS = 5
CRON_HINT = "cron schedules need a2sql's cron extra (cronsim): pip install '.[cron]' in a clone"


def _cron_times(expression: str, start: datetime, *, reverse: bool) -> Iterator[datetime]:
    """The times ``expression`` names after ``start`` (before it, ``reverse``), in UTC.
    Parsed by cronsim, a maintained parser of cron expressions."""
    try:
        from cronsim import CronSim, CronSimError
    except ImportError:
        raise A2Error(ErrorCode.INVALID_ARGUMENT, CRON_HINT) from None
    try:
        return iter(CronSim(expression, start.astimezone(UTC), reverse=reverse))
    except CronSimError as error:
        raise invalid("cron", f"is not a cron expression ({error}): {expression!r}") from None


@dataclass(frozen=True)
class Schedule:
    """An event of ``type`` appended to ``session_id`` for each slot of ``every`` (a
    ``timedelta`` of whole seconds, slots counted from the Unix epoch) or of the cron
    expression ``cron`` (five fields, in UTC; needs the ``cron`` extra, cronsim).

    Give it to a ``Worker`` or ``AsyncWorker`` (``schedules=[...]``) or to ``a2sql
    worker --schedule MODULE:NAME``. Any number of workers may run it: each slot's
    event has the id ``"{name}@{slot}"``, appended once. A worker appends the most
    recent ``catch_up`` slots that have started, so at most ``catch_up`` slots missed
    while no worker ran are appended late.
    """

    name: str
    _: KW_ONLY
    every: timedelta | None = None
    cron: str | None = None
    session_id: str
    type: str
    payload: JSON = None
    lane: str | None = None
    catch_up: int = 1

    def __post_init__(self) -> None:
        validate.name(self.name, "name")
        validate.name(self.session_id, "session_id")
        validate.name(self.type, "type")
        validate.optional_name(self.lane, "lane")
        validate.integer(self.catch_up, "catch_up", minimum=1, maximum=MAX_CATCH_UP)
        validate.json_value(self.payload, "payload", validate.Limits())
        if (self.every is None) == (self.cron is None):
            raise invalid("every", "give a schedule either every= or cron=, not both or neither")
        if self.every is not None:
            if not isinstance(self.every, timedelta):
                raise invalid("every", f"must be a timedelta, got {type(self.every).__name__}")
            if self.every < ONE_SECOND:
                raise invalid("every", f"must be at least one second, got {self.every}")
            if self.every % ONE_SECOND:
                raise invalid("every", f"must be a whole number of seconds, got {self.every}")
        else:
            if not isinstance(self.cron, str):
                raise invalid("cron", f"must be a str, got {type(self.cron).__name__}")
            # Five fields, minute first: cronsim also reads six, the first then seconds.
            if len(self.cron.split()) != CRON_FIELDS:
                raise invalid(
                    "cron",
                    "must have five fields (minute hour day-of-month month day-of-week),"
                    f" got {self.cron!r}",
                )
            next(_cron_times(self.cron, EPOCH, reverse=False))  # refused here if invalid
        validate.name(self.event_id(EPOCH), "name")  # the ids fit the column

    def due(self, now: datetime) -> list[datetime]:
        """The most recent ``catch_up`` slots started at or before ``now``, oldest first."""
        if self.every is not None:
            last = EPOCH + (now - EPOCH) // self.every * self.every
            return [last - back * self.every for back in reversed(range(self.catch_up))]
        assert self.cron is not None
        # cronsim walks back from before its start: from the next second, to take ``now``.
        start = now.replace(microsecond=0) + ONE_SECOND
        times = _cron_times(self.cron, start, reverse=True)
        return sorted(time for time, _ in zip(times, range(self.catch_up), strict=False))

    def next_slot(self, now: datetime) -> datetime:
        """The first slot that starts after ``now``."""
        if self.every is not None:
            return EPOCH + ((now - EPOCH) // self.every + 1) * self.every
        assert self.cron is not None
        return next(_cron_times(self.cron, now, reverse=False))

    def event_id(self, slot: datetime) -> str:
        """The id of the slot's event: ``"{name}@{slot}"``, the slot in UTC, ISO 8601."""
        return f"{self.name}@{slot.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"

    def event(self, slot: datetime) -> NewEvent:
        """The event appended for ``slot``."""
        return NewEvent(self.type, self.payload, id=self.event_id(slot), lane=self.lane)


def checked(schedules: Sequence[Any]) -> list[Schedule]:
    """A worker's ``schedules=``, checked: ``Schedule`` objects whose names differ."""
    found: list[Schedule] = []
    for position, schedule in enumerate(validate.sequence(schedules, "schedules")):
        if not isinstance(schedule, Schedule):
            raise invalid(
                f"schedules[{position}]", f"must be a Schedule, got {type(schedule).__name__}"
            )
        if any(other.name == schedule.name for other in found):
            raise invalid(f"schedules[{position}]", f"repeats the name {schedule.name!r}")
        found.append(schedule)
    return found


class Slots:
    """What one worker has appended of its schedules, so that it appends each slot once
    in its life (the store keeps each once among all workers)."""

    def __init__(self, schedules: Sequence[Schedule]) -> None:
        self.schedules = list(schedules)
        self._done: dict[str, datetime] = {}

    def to_append(self, now: datetime) -> list[tuple[Schedule, datetime]]:
        """The slots due at ``now`` that this worker has not appended yet, oldest first."""
        return [
            (schedule, slot)
            for schedule in self.schedules
            for slot in schedule.due(now)
            if schedule.name not in self._done or slot > self._done[schedule.name]
        ]

    def appended(self, schedule: Schedule, slot: datetime) -> None:
        self._done[schedule.name] = max(slot, self._done.get(schedule.name, slot))

    def wait_s(self, now: datetime) -> float:
        """Seconds until the next slot of any schedule starts."""
        first = min(schedule.next_slot(now) for schedule in self.schedules)
        return max(0.0, (first - now).total_seconds())


def append_due(store: Store, slots: Slots, on_error: Any) -> float:
    """Append the due slots' events through ``store``; seconds until the next slot. A
    failure is passed to ``on_error`` and the slot tried again at the next tick."""
    now = store.clock.now()
    for schedule, slot in slots.to_append(now):
        try:
            store.append(schedule.session_id, [schedule.event(slot)])
        except A2Error as error:
            on_error(schedule, slot, error)
            return min(slots.wait_s(now), RETRY_S)
        slots.appended(schedule, slot)
    return slots.wait_s(now)


async def append_due_async(store: AsyncStore, slots: Slots, on_error: Any) -> float:
    """``append_due`` on an ``AsyncStore``."""
    now = store.clock.now()
    for schedule, slot in slots.to_append(now):
        try:
            await store.append(schedule.session_id, [schedule.event(slot)])
        except A2Error as error:
            on_error(schedule, slot, error)
            return min(slots.wait_s(now), RETRY_S)
        slots.appended(schedule, slot)
    return slots.wait_s(now)


# After a failed append (the database away, say), the next try.
RETRY_S = 1.0
# The longest a schedule's thread sleeps at once: the store's clock may be moved
# (a test's), and a stop is noticed at once anyway.
MAX_SLEEP_S = 1.0


def slot_failed(schedule: Schedule, slot: datetime, error: A2Error) -> None:
    """A slot's event could not be appended: logged, and tried again at the next tick."""
    log.warning(
        "schedule=%s slot=%s could not be appended (tried again): %s",
        schedule.name,
        schedule.event_id(slot),
        error,
    )


def run_schedules(store: Store, slots: Slots, stopping: threading.Event, on_error: Any) -> None:
    """A worker's schedule thread: append due slots until ``stopping`` is set."""
    while not stopping.is_set():
        try:
            wait = append_due(store, slots, on_error)
        except Exception:  # never let the schedules die: log and go on
            log.exception("appending scheduled events failed")
            wait = RETRY_S
        stopping.wait(min(wait, MAX_SLEEP_S) + 0.001)
