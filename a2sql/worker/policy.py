"""What both workers decide alike: retry delays, failure texts, returned ids, holders,
how long to wait idle, what an unknown commit turned out to be, which claims to hand back."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import secrets
import socket
import time
import traceback
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeAlias

from sqlalchemy.exc import DBAPIError

from a2sql.core import arguments as validate
from a2sql.core.errors import A2Error, ErrorCode, invalid
from a2sql.core.records import JSON, ClaimRef, NewEvent, StoredEvent
from a2sql.worker.outcome import Outcome

log = logging.getLogger("a2sql.worker")

#: How one attempt ended, as a worker counts it (``worker.outcomes``) and logs it.
Ending: TypeAlias = Literal[
    "completed", "failed", "dead_lettered", "superseded", "released", "vanished"
]
SessionOutcome: TypeAlias = Literal["settled", "idle", "stopped"]

# Ids of returned events, derived from the event and the attempt: the same on
# every retry of one attempt's completion, so a retry after a lost reply
# replays the committed batch instead of appending it twice.
RETURNED_IDS = uuid.UUID("4c1b8b1e-6a2c-4e55-9a39-a2501d0c0de5")
# Error texts are kept in last_error; a traceback's last frame is enough.
MAX_ERROR_CHARS = 4000
# Waiting out a database that does not answer: from 50 ms, doubling, up to 5 s.
TRANSIENT_FIRST_S = 0.05
TRANSIENT_MAX_S = 5.0
# The shortest idle wait: claimable work exists but other transactions hold it.
MIN_IDLE_WAIT_S = 0.01
HOSTNAME_CHARS = 200


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long a failed event waits before its next attempt: exponential, capped, jittered.

    The n-th failure waits ``base_ms * factor ** (n - 1)``, at most ``max_ms``,
    spread by ``±jitter`` (a fraction) so that events failing together do not
    come back together. ``Backoff.none()`` retries at once.
    """

    base_ms: int = 1_000
    factor: float = 2.0
    max_ms: int = 300_000
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.base_ms < 0 or self.max_ms < 0:
            raise ValueError("Backoff base_ms and max_ms must not be negative")
        if self.factor < 1:
            raise ValueError("Backoff factor must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("Backoff jitter must be between 0 and 1")

    @classmethod
    def none(cls) -> Backoff:
        """No delay: a failed event is claimable again at once."""
        return cls(base_ms=0, jitter=0.0)

    def delay_ms(self, failure: int) -> int | None:
        """The delay after the ``failure``-th failure (1 for the first); ``None`` for none."""
        if self.base_ms == 0 or self.max_ms == 0:
            return None
        raw = min(float(self.max_ms), self.base_ms * self.factor ** max(0, failure - 1))
        spread = raw * self.jitter
        return max(0, min(self.max_ms, round(raw + random.uniform(-spread, spread))))


def default_holder() -> str:
    """This host, this process and a random suffix: unique per worker, readable in claims."""
    host = socket.gethostname()[:HOSTNAME_CHARS] or "host"
    return f"{host}:{os.getpid()}:{secrets.token_hex(3)}"


def failure_text(error: BaseException) -> str:
    """``Type: message`` and the frame that raised it, for ``last_error``."""
    text = f"{type(error).__qualname__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        text += f"\n  at {last.filename}:{last.lineno} in {last.name}"
    return storable_text(text)[:MAX_ERROR_CHARS]


def storable_text(text: str) -> str:
    """``text`` as the store accepts it: a NUL becomes the four characters ``\\x00`` and
    a lone surrogate (from a ``surrogateescape``-decoded file name, say) its
    ``\\udcff``-style escape, so that any exception's text can be recorded."""
    text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def vanished(error: A2Error, event: StoredEvent) -> bool:
    """Whether ``error`` says the event is gone (its session deleted while handled):
    the attempt ends there, and the worker goes on with its other claims."""
    if error.code != ErrorCode.EVENT_NOT_FOUND:
        return False
    log.warning(
        "session=%s index=%d is gone (session deleted?); attempt dropped",
        event.session_id,
        event.index,
    )
    return True


def returned_outcome(returned: object, event: StoredEvent, attempt: int) -> Outcome:
    """What a handler returned (events, an ``Outcome`` or ``None``), as an ``Outcome``
    whose events each have an id: one without gets the id derived from (event,
    attempt, position)."""
    if returned is None:
        return Outcome()
    write = None
    if isinstance(returned, Outcome):
        write, returned = returned.write, returned.events
        if write is not None and not callable(write):
            raise TypeError(f"Outcome.write must be callable, not {type(write).__name__}")
    if isinstance(returned, NewEvent) or not isinstance(returned, Sequence):
        raise TypeError(
            "a handler returns a sequence of NewEvent, an Outcome or None, "
            f"not {type(returned).__name__}"
        )
    events = []
    for position, new in enumerate(returned):
        if not isinstance(new, NewEvent):
            raise TypeError(f"a handler returned {type(new).__name__} at {position}, not NewEvent")
        if new.id is None:
            derived = uuid.uuid5(RETURNED_IDS, f"{event.id}\x00{attempt}\x00{position}")
            new = dataclasses.replace(new, id=str(derived))  # every other field as returned
        events.append(new)
    return Outcome(events, write)


def is_transient(error: BaseException) -> bool:
    """The database failed (or a commit's reply was lost): worth trying again."""
    if isinstance(error, A2Error):
        return error.code is ErrorCode.STORE_UNAVAILABLE
    return isinstance(error, DBAPIError)


class Pacing:
    """Waits between tries while the database does not answer: doubling, capped."""

    def __init__(self) -> None:
        self._next = TRANSIENT_FIRST_S

    def next(self) -> float:
        wait, self._next = self._next, min(TRANSIENT_MAX_S, self._next * 2)
        return wait

    def reset(self) -> None:
        self._next = TRANSIENT_FIRST_S


class Held(Protocol):
    """An attempt a worker holds (``Attempt`` or ``AsyncAttempt``)."""

    event: StoredEvent
    number: int


class IdlePacing:
    """How long an idle worker waits: the poll interval, or less when a claim or a retry
    delay ends sooner. While claimable work stays locked by other transactions
    (``retry_at`` already here), the wait starts at ``MIN_IDLE_WAIT_S`` and doubles
    up to the poll interval: a worker does not poll a lock every 10 ms."""

    def __init__(self, poll_interval: float) -> None:
        self._poll_interval = poll_interval
        self._short = MIN_IDLE_WAIT_S

    def next(self, retry_at: datetime | None, now: datetime) -> float:
        if retry_at is None:
            self.reset()
            return self._poll_interval
        until = (retry_at - now).total_seconds()
        if until > MIN_IDLE_WAIT_S:
            self.reset()
            return min(self._poll_interval, until)
        wait, self._short = self._short, min(self._poll_interval, self._short * 2)
        return min(self._poll_interval, wait)

    def reset(self) -> None:
        self._short = MIN_IDLE_WAIT_S


def stopping_too_long(stopped_at: float | None, grace_s: float) -> float | None:
    """Seconds left of the grace period since ``stopped_at`` (``time.monotonic()``), or
    ``None`` once it is over: a worker stopped that long stops retrying the store."""
    if stopped_at is None:
        return grace_s
    left = stopped_at + grace_s - time.monotonic()
    return left if left > 0 else None


def retry_delay_ms(backoff: Backoff, event: StoredEvent, max_failures: int) -> int | None:
    """The delay to ask ``fail_attempt`` for: none when this failure dead-letters."""
    failures = event.failure_count + 1
    return backoff.delay_ms(failures) if failures < max_failures else None


def settled(now: StoredEvent, attempt: int, holder: str) -> Ending | None:
    """After a completion whose commit's outcome is unknown, the event as read now says:
    ``completed`` (it committed), ``superseded`` (it cannot have, and cannot now), or
    ``None`` (it did not commit and the attempt still holds the event: try again)."""
    if now.processed_by_attempt == attempt:
        return "completed"
    if (
        now.processed_at is not None
        or now.attempt_count != attempt
        or now.claim_holder != holder
        or now.failed_at is not None
    ):
        return "superseded"
    return None


def waiting_event(type: str, signal: str, until: datetime | None, payload: JSON) -> NewEvent:
    """``Attempt.wait_for``'s event, its arguments checked where the handler calls it
    (rather than when the completion refuses the event, naming its fields)."""
    validate.name(type, "type")
    validate.name(signal, "signal")
    if until is not None:
        validate.aware_datetime(until, "until")
    return NewEvent(type, payload, wake_on=signal, available_at=until)


def signal_after(events: Iterable[StoredEvent], signal: str) -> StoredEvent | None:
    """The first of ``events`` that is a signal named ``signal``."""
    for event in events:
        if event.is_signal and event.type == signal:
            return event
    return None


def stopped_without_an_attempt(event: StoredEvent) -> bool:
    """Whether an event was marked processed by no attempt: its session cancelled
    (``cancel_session``), or the event skipped (``skip_event``). A renewal that finds
    this tells the handler it is cancelled."""
    return event.processed_at is not None and event.processed_by_attempt is None


def own_lost_claims(
    events: Iterable[StoredEvent], holder: str, now: datetime, held: Iterable[int]
) -> list[StoredEvent]:
    """After a claim whose reply was lost, the session's events as read now: those this
    worker claimed (its holder, a live claim, still open) that it does not hold, which
    only the lost claim can have taken. Serving them with their attempt count continues
    that claim instead of leaving the session busy until its lease ends.

    Sound because a worker's holder is its own: two workers sharing one holder would
    take each other's claims here (and on every renewal and release)."""
    known = set(held)
    return [
        event
        for event in events
        if event.claim_holder == holder
        and event.claim_expires_at is not None
        and event.claim_expires_at > now
        and event.processed_at is None
        and event.failed_at is None
        and event.index not in known
    ]


def claims_by_session(attempts: Iterable[Held]) -> dict[str, list[ClaimRef]]:
    """Attempts as ``ClaimRef``s, grouped by session: one release call per session."""
    grouped: dict[str, list[ClaimRef]] = {}
    for attempt in attempts:
        grouped.setdefault(attempt.event.session_id, []).append(
            ClaimRef(attempt.event.index, attempt.number)
        )
    return grouped


def log_outcome(
    event: StoredEvent, attempt: int, outcome: str, duration_s: float, error: str | None
) -> None:
    """The one line per handled event: a failure says its error, a dead letter is a
    WARNING."""
    level = logging.WARNING if outcome == "dead_lettered" else logging.INFO
    line = "session=%s index=%d attempt=%d outcome=%s duration_ms=%.1f"
    args: list[object] = [event.session_id, event.index, attempt, outcome, duration_s * 1000]
    if outcome == "dead_lettered":
        line += " failures=%d"
        args.append(event.failure_count + 1)
    if error is not None:
        line += " error=%s"
        args.append(error)
    log.log(level, line, *args)


def error_line(error: BaseException) -> str:
    """``Type: message`` on one line (the message's first line), for a log line."""
    message = str(error).strip().splitlines()
    text = type(error).__qualname__ + (f": {message[0]}" if message else "")
    return storable_text(text)[:MAX_ERROR_CHARS]


@dataclass(frozen=True, slots=True)
class Settings:
    """A worker's settings, checked once."""

    prefix: str
    holder: str
    ttl_ms: int
    max_failures: int
    batch: int
    poll_interval: float
    grace_s: float
    concurrency: int = 1
    timeout_s: float | None = None

    @property
    def renew_every_s(self) -> float:
        """Claims are renewed every third of their lease, so two renewals can fail."""
        return max(0.01, self.ttl_ms / 3000)


#: The most handlers one worker runs at once.
MAX_CONCURRENCY = 1024
#: The longest ``poll_interval``, ``grace_s`` or ``timeout_s`` a worker takes: one day, in seconds.
MAX_SECONDS = 24 * 3600


def settings(
    *,
    prefix: object,
    holder: object,
    ttl_ms: object,
    max_failures: object,
    batch: object,
    poll_interval: object,
    grace_s: object,
    concurrency: object = 1,
    timeout_s: object = None,
) -> Settings:
    if not isinstance(prefix, str):
        raise invalid("prefix", f"must be a str, got {type(prefix).__name__}")
    if prefix:
        validate.name(prefix, "prefix")
    timed = () if timeout_s is None else ((timeout_s, "timeout_s"),)
    for value, argument in ((poll_interval, "poll_interval"), (grace_s, "grace_s"), *timed):
        # A day at most: past it, sleeping and deadlines overflow (inf) or never end.
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value <= MAX_SECONDS
        ):
            raise invalid(argument, f"must be a number of seconds above 0, at most {MAX_SECONDS}")
    return Settings(
        prefix=prefix,
        holder=default_holder() if holder is None else validate.name(holder, "holder"),
        ttl_ms=validate.ttl(ttl_ms),
        max_failures=validate.integer(max_failures, "max_failures", minimum=1),
        batch=validate.limit(batch, "batch"),
        poll_interval=float(poll_interval),  # type: ignore[arg-type]
        grace_s=float(grace_s),  # type: ignore[arg-type]
        concurrency=validate.integer(
            concurrency, "concurrency", minimum=1, maximum=MAX_CONCURRENCY
        ),
        timeout_s=None if timeout_s is None else float(timeout_s),  # type: ignore[arg-type]
    )
