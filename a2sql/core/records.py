"""The values that go into and come out of a store: frozen dataclasses only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypeAlias

# Where a waiting event without a timeout keeps its claim expiry (so that any claim
# query, the seed's included, leaves it alone): no ``available_at`` may reach it.
NO_TIMEOUT = datetime(9999, 1, 1, tzinfo=UTC)

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None

ClaimOutcome: TypeAlias = Literal["claimed", "busy", "settled"]
CompleteOutcome: TypeAlias = Literal["completed", "superseded"]
FailOutcome: TypeAlias = Literal["failed", "dead_lettered", "superseded"]
DispatchOutcome: TypeAlias = Literal["claimed", "idle"]
RetryOutcome: TypeAlias = Literal["requeued", "not_dead_lettered"]
SkipOutcome: TypeAlias = Literal["skipped", "already_processed"]


@dataclass(frozen=True, slots=True)
class EventCause:
    """The attempt that caused an event: the event at ``index``, claimed as ``attempt``."""

    index: int
    attempt: int
    batch_size: int | None = None


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. ``id`` defaults to a generated one; ``settled`` stores it processed.

    ``available_at``: not claimable before that time (a later run; in a lane it holds
    the lane until then). ``wake_on``: not claimable until a signal of that name
    reaches the session (``Store.signal``), or until ``available_at`` passes (its
    timeout; without one it waits for the signal alone). A settled event takes
    neither.
    """

    type: str
    payload: JSON = None
    id: str | None = None
    cause: EventCause | None = None
    lane: str | None = None
    settled: bool = False
    available_at: datetime | None = None
    wake_on: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """An event as a reducer sees it."""

    id: str
    type: str
    payload: JSON
    index: int
    session_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event with everything the store keeps about its processing.

    ``attempt_count`` is the number of its latest attempt, the fencing token a
    claim hands out: the number of times it was claimed, counted on from the
    highest attempt number of any deleted session of the same id (attempt
    numbers are never reused, see ``Store.delete_session``).
    """

    id: str
    type: str
    payload: JSON
    index: int
    session_id: str
    created_at: datetime
    cause: EventCause | None
    lane: str | None
    processed_at: datetime | None
    processed_by_attempt: int | None
    returned_event_ids: list[str] | None
    first_claimed_at: datetime | None
    last_claimed_at: datetime | None
    attempt_count: int
    failure_count: int
    last_failed_at: datetime | None
    last_failed_attempt: int | None
    last_error: str | None
    failed_at: datetime | None
    claim_holder: str | None
    claim_expires_at: datetime | None
    wake_on: str | None = None

    @property
    def waiting(self) -> bool:
        """Whether the event waits for the signal ``wake_on`` (``Store.signal``): unprocessed,
        never claimed and not woken yet. ``wait_until`` is its timeout."""
        return (
            self.wake_on is not None and self.processed_at is None and self.first_claimed_at is None
        )

    @property
    def is_signal(self) -> bool:
        """Whether the event is a signal's own (``Store.signal``): its type the signal's
        name, settled when appended."""
        return (
            self.wake_on is not None
            and self.processed_at is not None
            and self.first_claimed_at is None
            and self.processed_by_attempt is None
        )

    @property
    def wait_until(self) -> datetime | None:
        """A waiting event's timeout, when it becomes claimable without a signal; ``None``
        when it waits for the signal alone, or does not wait."""
        if not self.waiting or self.claim_expires_at is None:
            return None
        return None if self.claim_expires_at >= NO_TIMEOUT else self.claim_expires_at


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim held by a worker: the event's index and the attempt it was claimed as."""

    index: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Completion:
    """One attempt to complete in ``complete_attempts``: as ``complete_attempt``'s arguments."""

    index: int
    attempt: int
    events: Sequence[NewEvent] = ()


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The appended (or replayed) events, and whether the session has unprocessed events.

    ``replayed``: ``True`` when the call committed nothing because the same batch
    (the same event ids) was already appended, an idempotent replay; ``False``
    when it appended the batch, and for an empty batch.
    """

    events: list[StoredEvent]
    has_pending: bool
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """``claimed`` with the events; ``busy`` with ``retry_at``; or ``settled``."""

    outcome: ClaimOutcome
    events: list[StoredEvent] = field(default_factory=list)
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RenewResult:
    """Indexes whose claims were extended, and indexes taken over by a later attempt."""

    renewed: list[int]
    superseded: list[int]


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """Indexes whose claims were given up, and indexes taken over by a later attempt."""

    released: list[int]
    superseded: list[int]


@dataclass(frozen=True, slots=True)
class Dispatch:
    """``claim_next``: ``claimed`` with the session and its claimed events, or ``idle``.

    ``retry_at`` (only when idle) is the earliest time something under the
    prefix becomes claimable (an expiring claim, a delayed retry), or ``None``.
    """

    outcome: DispatchOutcome
    session_id: str | None = None
    events: list[StoredEvent] = field(default_factory=list)
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CompleteResult:
    """``completed`` with the appended events, or ``superseded`` with none.

    ``replayed``: ``True`` when the call committed nothing because this attempt
    had already completed the event with the same returned events (an
    idempotent replay, as after a lost commit reply; also when both name no
    events); ``False`` when it completed the event now, and when ``superseded``.
    """

    outcome: CompleteOutcome
    events: list[StoredEvent] = field(default_factory=list)
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class FailResult:
    """The outcome of a failure report and the event's failure count after it.

    ``retry_at``: when a ``failed`` event becomes claimable again after a
    ``retry_after_ms`` delay; ``None`` when it is claimable at once.
    """

    outcome: FailOutcome
    failure_count: int
    retry_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A reducer's folded state up to ``index``."""

    index: int
    state: JSON


@dataclass(frozen=True, slots=True)
class StateRead:
    """A reducer's snapshot (or ``None``) and every event after it."""

    snapshot: Snapshot | None
    events: list[Event]


@dataclass(frozen=True, slots=True)
class PresenceEntry:
    """One live presence field of a participant."""

    participant: str
    field: str
    value: JSON
    seen: int
    at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """Counts and times of one session, for operators.

    ``pending_count``: unprocessed events that are not dead letters;
    ``attempt_count``: claims of its events (``StoredEvent.attempt_count`` less
    where it started, for a session deleted before);
    ``failed_count``: dead letters; ``claimed_count``: pending events under a
    live claim; ``blocked_count``: pending events that wait behind a dead
    letter in their lane; ``oldest_pending_at``: when the oldest pending
    event was appended (``None`` when none is); ``waiting_count``: pending
    events waiting for a signal (``StoredEvent.waiting``, whether or not
    their timeout passed); ``scheduled_count``: pending events appended with
    an ``available_at`` still ahead, never claimed and not waiting. Both are
    counted among the pending, never among the claimed.
    """

    session_id: str
    event_count: int
    pending_count: int
    failed_count: int
    attempt_count: int
    failure_count: int
    first_event_at: datetime
    updated_at: datetime
    claimed_count: int
    blocked_count: int
    oldest_pending_at: datetime | None
    waiting_count: int = 0
    scheduled_count: int = 0


@dataclass(frozen=True, slots=True)
class StoreTotals:
    """The whole database at a glance: what ``a2sql status`` prints.

    Counts mean what they mean in ``SessionSummary`` (``waiting`` is its ``waiting_count``,
    ``scheduled`` its ``scheduled_count``), summed over every session.
    """

    sessions: int
    events: int
    pending: int
    claimed: int
    dead_letters: int
    oldest_pending_at: datetime | None
    waiting: int = 0
    scheduled: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """A page of dead-lettered events by session id then index; ``cursor`` (opaque)
    fetches the next page, ``None`` when this is the last. ``blocking``: for each
    event, how many pending events of its lane wait behind it."""

    events: list[StoredEvent]
    cursor: str | None
    blocking: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RetryResult:
    """``retry_dead_letter``: ``requeued``, or ``not_dead_lettered`` (nothing changed)."""

    outcome: RetryOutcome


@dataclass(frozen=True, slots=True)
class SkipResult:
    """``skip_event``: ``skipped``, or ``already_processed`` (nothing changed)."""

    outcome: SkipOutcome


@dataclass(frozen=True, slots=True)
class SignalResult:
    """``signal``: the signal's event (settled, of the signal's type), and the indexes of
    the waiting events it woke, in index order. A replay (the same id) wakes nothing."""

    event: StoredEvent
    woken: list[int]
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class CancelResult:
    """``cancel_session``: how many unprocessed events it marked processed."""

    cancelled: int


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """How many events and snapshots ``delete_session`` deleted."""

    events: int
    snapshots: int


@dataclass(frozen=True, slots=True)
class PruneResult:
    """How many sessions, events and snapshots one ``prune`` call deleted."""

    sessions: int
    events: int
    snapshots: int


@dataclass(frozen=True, slots=True)
class SessionPage:
    """A page of sessions; ``cursor`` is the last id shown when more follow, else ``None``."""

    sessions: list[SessionSummary]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page of events and the ``through_index`` it was capped at.

    ``waiting``: indexes on the page of pending events not yet claimable
    because an earlier event of their lane is unprocessed; ``blocked``: those
    of them whose lane waits on a dead letter.
    """

    events: list[StoredEvent]
    through_index: int
    waiting: list[int] = field(default_factory=list)
    blocked: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Overview:
    """The work under a prefix at ``at``, counted as far as ``bound`` (``inspect.overview``).

    Each count walks only the events still to do and stops at ``bound``: a
    count equal to ``bound`` means at least that many (``capped``). ``ready``:
    claimable now; ``claimed``: under a live claim; ``waiting``: waiting for a
    signal, its timeout ahead; ``scheduled``: never claimed, to run later;
    ``dead_letters``: failed for good; ``blocked_lanes``: lanes whose head is a
    dead letter. ``oldest_ready_at``: when the longest-ready event became
    claimable (appended, or its claim, delay or wait ended), ``None`` when none
    is ready. ``appended_total``: the engine's running count of rows ever
    inserted into the events table, for rates (it restarts when the engine's
    statistics are reset; ``None`` where the engine keeps none).
    ``table_bytes``: the size on disk of each of a2sql's tables (PostgreSQL)
    or of the database file (SQLite, as ``"database"``).
    """

    at: datetime
    bound: int
    ready: int
    claimed: int
    waiting: int
    scheduled: int
    dead_letters: int
    blocked_lanes: int
    oldest_ready_at: datetime | None
    appended_total: int | None = None
    table_bytes: dict[str, int] = field(default_factory=dict)

    def capped(self, count: int) -> bool:
        """Whether ``count`` (one of this overview's counts) stopped at the bound."""
        return count >= self.bound


@dataclass(frozen=True, slots=True)
class InFlight:
    """Claims at ``at`` (``inspect.in_flight``): ``live`` ones by expiry, and those
    ``expired`` but not yet claimed again (their holder stopped renewing), oldest first."""

    at: datetime
    live: list[StoredEvent]
    expired: list[StoredEvent]


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A stored snapshot's reducer, index and time of writing."""

    reducer_name: str
    index: int
    updated_at: datetime
