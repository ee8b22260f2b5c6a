"""A pure-Python reference model of SPEC §3, with §6's operations and §7's time and
control (later runs, waits, signals, cancellation), for the stateful conformance test.

No database and no a2sql logic: only the record types, ``NO_TIMEOUT`` and
``ErrorCode`` are imported, so that results of the model and of a real store
compare directly.
Every mutating operation runs on a copy of the state that is kept only when
the operation returns, so an operation that raises has written nothing.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from a2sql import (
    JSON,
    AppendResult,
    CancelResult,
    ClaimRef,
    ClaimResult,
    CompleteResult,
    Completion,
    DeleteResult,
    Dispatch,
    ErrorCode,
    Event,
    EventCause,
    FailResult,
    NewEvent,
    PresenceEntry,
    PruneResult,
    ReleaseResult,
    RenewResult,
    RetryResult,
    SessionSummary,
    SignalResult,
    SkipResult,
    Snapshot,
    StateRead,
    StoredEvent,
)
from a2sql.core.records import NO_TIMEOUT


class ModelError(Exception):
    """An error the model raises where the store must raise ``A2Error(code)``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass(frozen=True)
class ReplayOrConflict:
    """A replay whose payloads are equal by value but not by JSON identity (1 vs 1.0).

    SPEC §3 does not say which equality "differs" means, so the store may
    answer either the replay (``result``) or ``IDEMPOTENCY_CONFLICT``.
    """

    result: AppendResult | CompleteResult | SignalResult


def truncate_ms(value: datetime) -> datetime:
    """A time as the store keeps it: in UTC, truncated to the whole millisecond."""
    utc = value.astimezone(UTC)
    return utc.replace(microsecond=utc.microsecond // 1000 * 1000)


def json_identical(a: object, b: object) -> bool:
    """True when two JSON values are the same value, type, key order and float sign."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(json_identical(a[k], b[k]) for k in a)
    return a == b


@dataclass
class ModelEvent:
    """Everything the store keeps about one event, plus its lane readiness."""

    id: str
    type: str
    payload: JSON
    index: int
    session_id: str
    created_at: datetime
    cause: EventCause | None
    lane: str | None
    ready: bool
    processed_at: datetime | None = None
    processed_by_attempt: int | None = None
    returned_event_ids: list[str] | None = None
    first_claimed_at: datetime | None = None
    last_claimed_at: datetime | None = None
    attempt_count: int = 0
    failure_count: int = 0
    last_failed_at: datetime | None = None
    last_failed_attempt: int | None = None
    last_error: str | None = None
    failed_at: datetime | None = None
    claim_holder: str | None = None
    claim_expires_at: datetime | None = None
    # §7: the signal a waiting event waits for, or a signal's own name.
    wake_on: str | None = None

    def stored(self) -> StoredEvent:
        """The record ``store.read`` returns for this event."""
        return StoredEvent(
            id=self.id,
            type=self.type,
            payload=copy.deepcopy(self.payload),
            index=self.index,
            session_id=self.session_id,
            created_at=self.created_at,
            cause=self.cause,
            lane=self.lane,
            processed_at=self.processed_at,
            processed_by_attempt=self.processed_by_attempt,
            returned_event_ids=(
                None if self.returned_event_ids is None else list(self.returned_event_ids)
            ),
            first_claimed_at=self.first_claimed_at,
            last_claimed_at=self.last_claimed_at,
            attempt_count=self.attempt_count,
            failure_count=self.failure_count,
            last_failed_at=self.last_failed_at,
            last_failed_attempt=self.last_failed_attempt,
            last_error=self.last_error,
            failed_at=self.failed_at,
            claim_holder=self.claim_holder,
            claim_expires_at=self.claim_expires_at,
            wake_on=self.wake_on,
        )

    def event(self) -> Event:
        """The record ``read_state`` returns for this event."""
        return Event(
            id=self.id,
            type=self.type,
            payload=copy.deepcopy(self.payload),
            index=self.index,
            session_id=self.session_id,
            created_at=self.created_at,
        )

    @property
    def claimable_kind(self) -> bool:
        """Unprocessed, not dead-lettered and ready: the events claims consider."""
        return self.processed_at is None and self.failed_at is None and self.ready

    @property
    def waiting(self) -> bool:
        """§7: waits for the signal ``wake_on``: unprocessed, never claimed, not woken."""
        return (
            self.wake_on is not None and self.processed_at is None and self.first_claimed_at is None
        )

    @property
    def is_signal(self) -> bool:
        """§7: a signal's own event (settled when appended, never claimed)."""
        return (
            self.wake_on is not None
            and self.processed_at is not None
            and self.first_claimed_at is None
            and self.processed_by_attempt is None
        )


@dataclass
class PresenceRow:
    value: JSON
    seen: int
    at: datetime
    expires_at: datetime


@dataclass
class ModelState:
    sessions: dict[str, list[ModelEvent]] = field(default_factory=dict)
    snapshots: dict[tuple[str, str], tuple[int, JSON]] = field(default_factory=dict)
    presence: dict[str, dict[tuple[str, str], PresenceRow]] = field(default_factory=dict)
    # §6 delete_session: per deleted session id, the highest attempt number it issued.
    retired_attempts: dict[str, int] = field(default_factory=dict)


class Model:
    """The store's semantics (SPEC §3) over plain Python data."""

    def __init__(self, now: Callable[[], datetime], new_id: Callable[[], str]) -> None:
        self._now = now
        self._new_id = new_id
        self.state = ModelState()

    # --- helpers ----------------------------------------------------------

    def now(self) -> datetime:
        return truncate_ms(self._now())

    @contextmanager
    def _transaction(self) -> Iterator[ModelState]:
        """Work on a copy; keep it only if the block returns."""
        working = copy.deepcopy(self.state)
        yield working
        self.state = working

    @staticmethod
    def _events(state: ModelState, session_id: str) -> list[ModelEvent]:
        return state.sessions.setdefault(session_id, [])

    @staticmethod
    def _by_id(state: ModelState, event_id: str) -> ModelEvent | None:
        for events in state.sessions.values():
            for event in events:
                if event.id == event_id:
                    return event
        return None

    @staticmethod
    def _at(events: list[ModelEvent], index: int) -> ModelEvent | None:
        return events[index - 1] if 1 <= index <= len(events) else None

    @staticmethod
    def _has_pending(events: list[ModelEvent]) -> bool:
        return any(event.processed_at is None for event in events)

    def events_of(self, session_id: str) -> list[ModelEvent]:
        """The session's events (read-only use)."""
        return self.state.sessions.get(session_id, [])

    def _insert(
        self,
        state: ModelState,
        events: list[ModelEvent],
        session_id: str,
        new: NewEvent,
        cause: EventCause | None,
        now: datetime,
    ) -> ModelEvent:
        """SPEC §3 append step 4 for one event, earlier events of the batch included; its
        attempt count starts where a deleted session of the same id stopped (§6); its
        claim expiry and ``wake_on`` as §7 holds it (``_held_until``)."""
        lane_free = not any(e.lane == new.lane and e.processed_at is None for e in events)
        expires, wake_on = self._held_until(events, new, cause, now)
        inserted = ModelEvent(
            id=new.id if new.id is not None else self._new_id(),
            type=new.type,
            payload=copy.deepcopy(new.payload),
            index=len(events) + 1,
            session_id=session_id,
            created_at=now,
            cause=cause,
            lane=new.lane,
            ready=new.lane is None or lane_free,
            processed_at=now if new.settled else None,
            attempt_count=state.retired_attempts.get(session_id, 0),
            claim_expires_at=expires,
            wake_on=wake_on,
        )
        events.append(inserted)
        return inserted

    @staticmethod
    def _held_until(
        events: list[ModelEvent], new: NewEvent, cause: EventCause | None, now: datetime
    ) -> tuple[datetime | None, str | None]:
        """§7: an appended event's claim expiry and ``wake_on``, ``now`` the time the
        append records. A later run is held until ``available_at``; a wait until its
        timeout, or NO_TIMEOUT without one, unless the session already holds a signal of
        its name newer than its cause (any, without a cause: no wake-up is lost) or its
        timeout is not ahead. A settled event ignores both."""
        if new.settled:
            return None, None
        at = None if new.available_at is None else truncate_ms(new.available_at)
        if new.wake_on is not None:
            after = 0 if cause is None else cause.index
            signalled = any(
                e.is_signal and e.wake_on == new.wake_on and e.index > after for e in events
            )
            if signalled or (at is not None and at <= now):
                return None, None
            return (NO_TIMEOUT if at is None else at), new.wake_on
        return (at if at is not None and at > now else None), None

    @staticmethod
    def _check_timing(batch: Sequence[NewEvent]) -> None:
        """§7: a settled event never waits (its ``available_at`` is ignored)."""
        if any(new.settled and new.wake_on is not None for new in batch):
            raise ModelError(ErrorCode.INVALID_ARGUMENT, "wake_on on a settled event")

    @staticmethod
    def _replay(
        request: Sequence[NewEvent],
        stored: Sequence[ModelEvent],
        causes: Sequence[EventCause | None],
    ) -> tuple[list[StoredEvent], bool]:
        """The stored events in request order; raise on a conflict.

        Returns whether some payload was equal by value only (see ``ReplayOrConflict``).
        """
        loose = False
        for new, old, cause in zip(request, stored, causes, strict=True):
            if new.type != old.type or new.lane != old.lane or cause != old.cause:
                raise ModelError(ErrorCode.IDEMPOTENCY_CONFLICT, f"event {old.id} differs")
            if not json_identical(new.payload, old.payload):
                if new.payload != old.payload:
                    raise ModelError(ErrorCode.IDEMPOTENCY_CONFLICT, f"payload of {old.id}")
                loose = True
        return [old.stored() for old in stored], loose

    # --- events -----------------------------------------------------------

    def append(self, session_id: str, batch: Sequence[NewEvent]) -> AppendResult | ReplayOrConflict:
        """SPEC §3 append, idempotent replay included."""
        self._check_timing(batch)
        if not batch:
            return AppendResult(
                events=[], has_pending=self._has_pending(self.events_of(session_id))
            )
        with self._transaction() as state:
            events = self._events(state, session_id)
            supplied = [e.id for e in batch if e.id is not None]
            if len(set(supplied)) != len(supplied):
                raise ModelError(ErrorCode.PARTIAL_DUPLICATE_BATCH, "id twice in the batch")
            existing = [found for i in supplied if (found := self._by_id(state, i)) is not None]
            if existing:
                if any(e.session_id != session_id for e in existing):
                    raise ModelError(ErrorCode.PARTIAL_DUPLICATE_BATCH, "id in another session")
                if len(existing) != len(batch):
                    raise ModelError(ErrorCode.PARTIAL_DUPLICATE_BATCH, "stored and fresh mixed")
                replayed, loose = self._replay(batch, existing, [e.cause for e in batch])
                result = AppendResult(
                    events=replayed, has_pending=self._has_pending(events), replayed=True
                )
                return ReplayOrConflict(result) if loose else result
            for new in batch:
                if new.cause is None:
                    continue
                parent = self._at(events, new.cause.index)
                if parent is None:
                    raise ModelError(ErrorCode.EVENT_NOT_FOUND, f"no event {new.cause.index}")
                if (
                    parent.attempt_count != new.cause.attempt
                    or parent.failed_at is not None
                    or parent.first_claimed_at is None
                ):
                    raise ModelError(ErrorCode.SUPERSEDED_ATTEMPT, "cause is not current")
            had_pending = self._has_pending(events)
            now = self._recorded(events, self.now())
            inserted = [
                self._insert(state, events, session_id, new, new.cause, now) for new in batch
            ]
            return AppendResult(
                events=[e.stored() for e in inserted],
                has_pending=had_pending or any(not new.settled for new in batch),
            )

    def signal(
        self, session_id: str, name: str, payload: JSON = None, *, id: str | None = None
    ) -> SignalResult | ReplayOrConflict:
        """§7 signal: append one settled event of type ``name`` (as ``append``, replay and
        errors included) that keeps ``name`` in ``wake_on``, then wake the session's events
        waiting for ``name``; a replay wakes nothing."""
        appended = self.append(session_id, [NewEvent(name, payload, id=id, settled=True)])
        loose = isinstance(appended, ReplayOrConflict)
        result = appended.result if isinstance(appended, ReplayOrConflict) else appended
        assert isinstance(result, AppendResult)
        [event] = result.events
        if result.replayed:
            answer = SignalResult(event, [], replayed=True)
            return ReplayOrConflict(answer) if loose else answer
        # The append above wrote its event; nothing below can fail, so the two
        # transactions are as one.
        with self._transaction() as state:
            events = self._events(state, session_id)
            own = events[event.index - 1]
            own.wake_on = name
            woken = []
            for e in events:
                if e.wake_on == name and e.processed_at is None and e.first_claimed_at is None:
                    e.claim_expires_at = None
                    e.wake_on = None
                    woken.append(e.index)
            return SignalResult(own.stored(), woken)

    def read(
        self, session_id: str, *, after_index: int | None = None, through_index: int | None = None
    ) -> list[StoredEvent]:
        """SPEC §3 read."""
        low = 0 if after_index is None else after_index
        return [
            e.stored()
            for e in self.events_of(session_id)
            if e.index > low and (through_index is None or e.index <= through_index)
        ]

    # --- claims -----------------------------------------------------------

    def _expiry(self, now: datetime, ttl_ms: int, expires_at: datetime | None) -> datetime:
        if expires_at is not None:
            return truncate_ms(expires_at)
        return now + timedelta(milliseconds=ttl_ms)

    @staticmethod
    def _freed(events: list[ModelEvent], e: ModelEvent) -> datetime | None:
        """For a lane's event never claimed: when the event before it in its lane was
        processed, which made it ready, if among the 32 events before it; otherwise the
        latest time any lane of the session moved on (contract, "Times")."""
        if e.lane is None or e.first_claimed_at is not None:
            return None
        near = [o for o in events if o.lane == e.lane and e.index - 32 <= o.index < e.index]
        if near:
            return near[-1].processed_at
        moved = [o.processed_at for o in events if o.lane is not None and o.processed_at]
        return max(moved) if moved else None

    @staticmethod
    def _recorded(events: list[ModelEvent], now: datetime, *also: datetime | None) -> datetime:
        """The time a write records (contract, "Times"): ``now``, or the creation of the
        session's last event or any time of ``also`` that is later."""
        times = [now, *(t for t in also if t is not None)]
        if events:
            times.append(events[-1].created_at)
        return max(times)

    def claim_available(
        self,
        session_id: str,
        *,
        holder: str,
        ttl_ms: int,
        expires_at: datetime | None = None,
        exclude_indexes: Sequence[int] = (),
        limit: int | None = None,
    ) -> ClaimResult:
        """SPEC §3 claim_available, with §6's limit."""
        with self._transaction() as state:
            now = self.now()
            events = self._events(state, session_id)
            claimed = self._claim(events, now, holder, ttl_ms, expires_at, exclude_indexes, limit)
            if claimed:
                return ClaimResult(outcome="claimed", events=claimed)
            active = self._live_expiries(events, now)
            if not active:
                return ClaimResult(outcome="settled")
            if min(active) >= NO_TIMEOUT:
                # §7: a wait without a timeout never ends by itself: the others' expiry,
                # if any; still busy, for the waiting event is pending.
                others = self._live_expiries(events, now, waits=False)
                return ClaimResult(outcome="busy", retry_at=min(others) if others else None)
            return ClaimResult(outcome="busy", retry_at=min(active))

    @staticmethod
    def _free(e: ModelEvent, now: datetime) -> bool:
        return e.claimable_kind and (e.claim_expires_at is None or e.claim_expires_at <= now)

    @staticmethod
    def _live_expiries(
        events: list[ModelEvent], now: datetime, *, waits: bool = True
    ) -> list[datetime]:
        """The claim expiries after ``now`` of dispatchable events; without those of
        waiting events unless ``waits``."""
        return [
            e.claim_expires_at
            for e in events
            if e.claimable_kind
            and e.claim_expires_at is not None
            and e.claim_expires_at > now
            and (waits or e.wake_on is None)
        ]

    def _claim(
        self,
        events: list[ModelEvent],
        now: datetime,
        holder: str,
        ttl_ms: int,
        expires_at: datetime | None,
        exclude_indexes: Sequence[int] = (),
        limit: int | None = None,
    ) -> list[StoredEvent]:
        claimable = [e for e in events if self._free(e, now) and e.index not in exclude_indexes][
            :limit
        ]
        for e in claimable:
            at = self._recorded(
                events, now, e.last_failed_at, e.last_claimed_at, self._freed(events, e)
            )
            e.attempt_count += 1
            if e.first_claimed_at is None:
                e.first_claimed_at = at
            e.last_claimed_at = at
            e.claim_holder = holder
            e.claim_expires_at = self._expiry(at, ttl_ms, expires_at)
            # §7: a claimed event waits no more (its timeout passed).
            e.wake_on = None
        return [e.stored() for e in claimable]

    def claim_next(
        self,
        *,
        holder: str,
        ttl_ms: int,
        expires_at: datetime | None = None,
        limit: int | None = None,
        prefix: str = "",
    ) -> Dispatch:
        """SPEC §6 claim_next: the session whose oldest claimable event is oldest."""
        with self._transaction() as state:
            now = self.now()
            under = {
                sid: events for sid, events in state.sessions.items() if sid.startswith(prefix)
            }
            ages = [
                (min(e.created_at for e in events if self._free(e, now)), sid)
                for sid, events in under.items()
                if any(self._free(e, now) for e in events)
            ]
            if ages:
                _, sid = min(ages)
                claimed = self._claim(under[sid], now, holder, ttl_ms, expires_at, limit=limit)
                return Dispatch("claimed", sid, claimed)
            # §7: nothing as late as NO_TIMEOUT (a wait without a timeout) ends by itself.
            active = [
                when
                for events in under.values()
                for when in self._live_expiries(events, now)
                if when < NO_TIMEOUT
            ]
            return Dispatch("idle", retry_at=min(active) if active else None)

    def release_claims(
        self, session_id: str, *, holder: str, claims: Sequence[ClaimRef]
    ) -> ReleaseResult:
        """SPEC §6 release_claims."""
        with self._transaction() as state:
            events = self._events(state, session_id)
            released: list[int] = []
            superseded: list[int] = []
            for claim in claims:
                e = self._at(events, claim.index)
                if e is None:
                    continue
                if e.attempt_count > claim.attempt:
                    superseded.append(claim.index)
                elif (
                    e.attempt_count == claim.attempt
                    and e.processed_at is None
                    and e.failed_at is None
                    and e.claim_holder == holder
                ):
                    e.claim_holder = None
                    e.claim_expires_at = None
                    released.append(claim.index)
            return ReleaseResult(released=sorted(released), superseded=sorted(superseded))

    def renew_claims(
        self,
        session_id: str,
        *,
        holder: str,
        claims: Sequence[ClaimRef],
        ttl_ms: int,
        expires_at: datetime | None = None,
    ) -> RenewResult:
        """SPEC §3 renew_claims."""
        with self._transaction() as state:
            now = self.now()
            until = self._expiry(now, ttl_ms, expires_at)
            events = self._events(state, session_id)
            renewed: list[int] = []
            superseded: list[int] = []
            for claim in claims:
                e = self._at(events, claim.index)
                if e is None:
                    continue
                if e.attempt_count > claim.attempt:
                    superseded.append(claim.index)
                elif (
                    e.attempt_count == claim.attempt
                    and e.processed_at is None
                    and e.failed_at is None
                    and e.claim_holder == holder
                    and e.claim_expires_at is not None
                    and e.claim_expires_at > now
                ):
                    e.claim_expires_at = until
                    renewed.append(claim.index)
            return RenewResult(renewed=sorted(renewed), superseded=sorted(superseded))

    # --- attempts ---------------------------------------------------------

    def complete_attempt(
        self, session_id: str, *, index: int, attempt: int, events: Sequence[NewEvent]
    ) -> CompleteResult | ReplayOrConflict:
        """SPEC §3 complete_attempt, the retry of a committed completion included."""
        self._check_timing(events)
        with self._transaction() as state:
            session = self._events(state, session_id)
            parent = self._at(session, index)
            if parent is None:
                raise ModelError(ErrorCode.EVENT_NOT_FOUND, f"no event {index}")
            ids = [str(e.id) for e in events]
            if len(set(ids)) != len(ids):
                raise ModelError(ErrorCode.PARTIAL_DUPLICATE_BATCH, "id twice in the batch")
            cause = EventCause(index=index, attempt=attempt)
            if parent.processed_at is not None:
                if parent.processed_by_attempt != attempt:
                    return CompleteResult(outcome="superseded")
                if parent.returned_event_ids != ids:
                    raise ModelError(ErrorCode.PARTIAL_DUPLICATE_BATCH, "not the committed ids")
                stored = [self._by_id(state, i) for i in ids]
                committed = [e for e in stored if e is not None and e.session_id == session_id]
                if len(committed) != len(ids) or any(e.cause != cause for e in committed):
                    raise ModelError(ErrorCode.PARTIAL_DUPLICATE_BATCH, "not the committed batch")
                replayed, loose = self._replay(events, committed, [cause] * len(events))
                result = CompleteResult(outcome="completed", events=replayed, replayed=True)
                return ReplayOrConflict(result) if loose else result
            if (
                parent.attempt_count != attempt
                or parent.claim_holder is None
                or parent.failed_at is not None
            ):
                return CompleteResult(outcome="superseded")
            if any(self._by_id(state, i) is not None for i in ids):
                raise ModelError(ErrorCode.PARTIAL_DUPLICATE_BATCH, "a returned id exists")
            now = self._recorded(session, self.now(), parent.last_claimed_at)
            parent.processed_at = now
            parent.processed_by_attempt = attempt
            parent.returned_event_ids = ids
            parent.ready = False
            parent.claim_holder = None
            parent.claim_expires_at = None
            if parent.lane is not None:
                head = next(
                    (e for e in session if e.lane == parent.lane and e.processed_at is None),
                    None,
                )
                if head is not None:
                    head.ready = True
            inserted = [self._insert(state, session, session_id, new, cause, now) for new in events]
            return CompleteResult(outcome="completed", events=[e.stored() for e in inserted])

    def complete_attempts(
        self, session_id: str, completions: Sequence[Completion]
    ) -> list[CompleteResult]:
        """complete_attempt for each, in order, all or nothing (a2sql's batched completion)."""
        for completion in completions:
            self._check_timing(completion.events)
        before = copy.deepcopy(self.state)
        results = []
        try:
            for completion in completions:
                result = self.complete_attempt(
                    session_id,
                    index=completion.index,
                    attempt=completion.attempt,
                    events=completion.events,
                )
                # Payloads equal by value only would allow two answers for
                # the whole call; the tests replay identical payloads only.
                assert not isinstance(result, ReplayOrConflict), "a loose replay in a batch"
                results.append(result)
        except ModelError:
            self.state = before
            raise
        return results

    def fail_attempt(
        self,
        session_id: str,
        *,
        index: int,
        attempt: int,
        error: str,
        max_failures: int,
        retry_after_ms: int | None = None,
    ) -> FailResult:
        """SPEC §3 fail_attempt, with §6's retry delay."""
        with self._transaction() as state:
            e = self._at(self._events(state, session_id), index)
            if e is None:
                raise ModelError(ErrorCode.EVENT_NOT_FOUND, f"no event {index}")
            if e.processed_at is not None or e.attempt_count != attempt:
                return FailResult(outcome="superseded", failure_count=e.failure_count)
            if e.failed_at is not None:
                return FailResult(outcome="dead_lettered", failure_count=e.failure_count)
            now = self.now()
            if e.claim_holder is None:
                # After a requeue (failures back to 0) the old failure is history.
                if e.last_failed_attempt != attempt or e.failure_count == 0:
                    return FailResult(outcome="superseded", failure_count=e.failure_count)
                delayed = e.claim_expires_at
                return FailResult(
                    "failed", e.failure_count, delayed if delayed and delayed > now else None
                )
            now = self._recorded(self._events(state, session_id), now, e.last_claimed_at)
            e.failure_count += 1
            e.last_error = error
            e.last_failed_at = now
            e.last_failed_attempt = attempt
            e.claim_holder = None
            e.claim_expires_at = None
            if e.failure_count >= max_failures:
                e.failed_at = now
                return FailResult(outcome="dead_lettered", failure_count=e.failure_count)
            if retry_after_ms:
                e.claim_expires_at = now + timedelta(milliseconds=retry_after_ms)
            return FailResult("failed", e.failure_count, e.claim_expires_at)

    # --- operations (SPEC §6) ----------------------------------------------

    def retry_dead_letter(self, session_id: str, *, index: int) -> RetryResult:
        """§6 retry_dead_letter."""
        with self._transaction() as state:
            e = self._at(self._events(state, session_id), index)
            if e is None:
                raise ModelError(ErrorCode.EVENT_NOT_FOUND, f"no event {index}")
            if e.processed_at is not None or e.failed_at is None:
                return RetryResult("not_dead_lettered")
            e.failed_at = None
            e.failure_count = 0
            e.claim_holder = None
            e.claim_expires_at = None
            return RetryResult("requeued")

    def skip_event(self, session_id: str, *, index: int, reason: str) -> SkipResult:
        """§6 skip_event."""
        with self._transaction() as state:
            session = self._events(state, session_id)
            e = self._at(session, index)
            if e is None:
                raise ModelError(ErrorCode.EVENT_NOT_FOUND, f"no event {index}")
            if e.processed_at is not None:
                return SkipResult("already_processed")
            self._process_without_an_attempt(session, e, self.now(), reason)
            if e.lane is not None:
                head = next(
                    (o for o in session if o.lane == e.lane and o.processed_at is None), None
                )
                if head is not None:
                    head.ready = True
            return SkipResult("skipped")

    def _process_without_an_attempt(
        self, session: list[ModelEvent], e: ModelEvent, now: datetime, reason: str
    ) -> None:
        """What skip_event does to one event and cancel_session to each: processed by no
        attempt, ``reason`` kept, claim released, failure and wait cleared (a skipped wait
        is no signal)."""
        e.processed_at = self._recorded(session, now, e.last_claimed_at)
        e.processed_by_attempt = None
        e.returned_event_ids = None
        e.last_error = reason
        e.failed_at = None
        e.ready = False
        e.claim_holder = None
        e.claim_expires_at = None
        e.wake_on = None

    def cancel_session(self, session_id: str, *, reason: str) -> CancelResult:
        """§7 cancel_session: every unprocessed event processed without an attempt, each at
        the time ``skip_event`` would record on it, ``reason`` kept."""
        if not reason.strip():
            raise ModelError(ErrorCode.INVALID_ARGUMENT, "a cancel must say why")
        with self._transaction() as state:
            session = self._events(state, session_id)
            now = self.now()
            cancelled = 0
            for e in session:
                if e.processed_at is not None:
                    continue
                self._process_without_an_attempt(session, e, now, reason)
                cancelled += 1
            return CancelResult(cancelled)

    def delete_session(self, session_id: str) -> DeleteResult:
        """§6 delete_session."""
        with self._transaction() as state:
            events = state.sessions.pop(session_id, [])
            last_attempt = max((e.attempt_count for e in events), default=0)
            if last_attempt > state.retired_attempts.get(session_id, 0):
                state.retired_attempts[session_id] = last_attempt
            keys = [key for key in state.snapshots if key[0] == session_id]
            for key in keys:
                del state.snapshots[key]
            return DeleteResult(events=len(events), snapshots=len(keys))

    @staticmethod
    def _latest(events: list[ModelEvent]) -> datetime:
        return max(
            t
            for e in events
            for t in (
                e.created_at,
                e.first_claimed_at,
                e.last_claimed_at,
                e.last_failed_at,
                e.processed_at,
                e.failed_at,
            )
            if t is not None
        )

    def prune(
        self,
        *,
        settled_before: datetime,
        prefix: str = "",
        limit: int = 1000,
        dry_run: bool = False,
    ) -> PruneResult:
        """§6 prune, all of it at once (the store's short transactions are not observable
        from one caller); ``dry_run``: inspect.prunable, every call's worth, deleting nothing."""
        cut = truncate_ms(settled_before)
        chosen = [
            sid
            for sid, events in sorted(self.state.sessions.items())
            if events
            and sid.startswith(prefix)
            and all(e.processed_at is not None for e in events)
            and self._latest(events) < cut
        ]
        if dry_run:
            return PruneResult(
                sessions=len(chosen),
                events=sum(len(self.events_of(sid)) for sid in chosen),
                snapshots=sum(key[0] in chosen for key in self.state.snapshots),
            )
        deleted = [self.delete_session(sid) for sid in chosen[:limit]]
        return PruneResult(
            sessions=len(deleted),
            events=sum(d.events for d in deleted),
            snapshots=sum(d.snapshots for d in deleted),
        )

    def session_summary(self, session_id: str) -> SessionSummary | None:
        """§6 inspect.session."""
        events = self.events_of(session_id)
        if not events:
            return None
        now = self.now()
        pending = [e for e in events if e.processed_at is None and e.failed_at is None]
        dead_lanes = {e.lane for e in events if e.processed_at is None and e.failed_at is not None}
        return SessionSummary(
            session_id=session_id,
            event_count=len(events),
            pending_count=len(pending),
            failed_count=sum(e.failed_at is not None for e in events),
            attempt_count=sum(e.attempt_count for e in events)
            - len(events) * self.state.retired_attempts.get(session_id, 0),
            failure_count=sum(e.failure_count for e in events),
            first_event_at=min(e.created_at for e in events),
            updated_at=self._latest(events),
            claimed_count=sum(
                e.claim_holder is not None
                and e.claim_expires_at is not None
                and e.claim_expires_at > now
                for e in pending
            ),
            blocked_count=sum(e.lane is not None and e.lane in dead_lanes for e in pending),
            oldest_pending_at=min((e.created_at for e in pending), default=None),
            waiting_count=sum(e.waiting for e in events),
            scheduled_count=sum(
                e.wake_on is None
                and e.claim_holder is None
                and e.first_claimed_at is None
                and e.claim_expires_at is not None
                and e.claim_expires_at > now
                for e in pending
            ),
        )

    def dead_letters(self, prefix: str = "") -> list[StoredEvent]:
        """§6 inspect.list_dead_letters, every page at once."""
        return [
            e.stored()
            for sid, events in sorted(self.state.sessions.items())
            if sid.startswith(prefix)
            for e in events
            if e.processed_at is None and e.failed_at is not None
        ]

    # --- state ------------------------------------------------------------

    def read_state(self, session_id: str, reducer_name: str) -> StateRead:
        """SPEC §3 read_state."""
        stored = self.state.snapshots.get((session_id, reducer_name))
        snapshot = None if stored is None else Snapshot(stored[0], copy.deepcopy(stored[1]))
        after = 0 if snapshot is None else snapshot.index
        return StateRead(
            snapshot=snapshot,
            events=[e.event() for e in self.events_of(session_id) if e.index > after],
        )

    def put_snapshot(self, session_id: str, reducer_name: str, index: int, state: JSON) -> None:
        """SPEC §3 put_snapshot: an upsert guarded by index, within the session's events."""
        last = len(self.events_of(session_id))
        if not 1 <= index <= last:
            raise ModelError(ErrorCode.INVALID_ARGUMENT, f"index {index} not in 1..{last}")
        with self._transaction() as working:
            key = (session_id, reducer_name)
            stored = working.snapshots.get(key)
            if stored is None or index > stored[0]:
                working.snapshots[key] = (index, copy.deepcopy(state))

    # --- presence ---------------------------------------------------------

    def presence_set(
        self,
        ns: str,
        participant: str,
        values: Mapping[str, JSON],
        *,
        at: datetime,
        seen: int,
        ttl_ms: int,
    ) -> None:
        """SPEC §3 presence.set: field-wise last-writer-wins by ``at``."""
        if not values:
            return
        with self._transaction() as state:
            rows = state.presence.setdefault(ns, {})
            written_at = truncate_ms(at)
            expires_at = self.now() + timedelta(milliseconds=ttl_ms)
            for name, value in values.items():
                key = (participant, name)
                old = rows.get(key)
                # An expired row is gone, swept or not.
                if old is not None and old.at > written_at and old.expires_at > self.now():
                    continue
                if value is None:
                    rows.pop(key, None)
                else:
                    rows[key] = PresenceRow(copy.deepcopy(value), seen, written_at, expires_at)

    def presence_read(self, ns: str) -> list[PresenceEntry]:
        """SPEC §3 presence.read: the live rows in order (expired ones are gone, swept or not)."""
        with self._transaction() as state:
            now = self.now()
            rows = state.presence.setdefault(ns, {})
            for key in [k for k, row in rows.items() if row.expires_at <= now]:
                del rows[key]
            return [
                PresenceEntry(
                    participant=participant,
                    field=name,
                    value=copy.deepcopy(row.value),
                    seen=row.seen,
                    at=row.at,
                    expires_at=row.expires_at,
                )
                for (participant, name), row in sorted(rows.items())
            ]
