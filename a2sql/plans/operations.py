"""Each public method once: check its arguments, then describe the transaction to run.

Each function here returns a ``Plan`` (a2sql.plans.kinds): which session to
lock (if any), whether the transaction only reads, and what to run in it.
``Store`` runs plans in transactions of its own, ``AsyncStore`` the very same
plans, and ``using(connection)`` in a savepoint of the caller's transaction
(a2sql.execution.running). Nothing here knows which facade or engine it is on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple, TypeVar

from a2sql.core import arguments as validate
from a2sql.core.errors import invalid
from a2sql.core.records import (
    JSON,
    NO_TIMEOUT,
    AppendResult,
    CancelResult,
    ClaimRef,
    ClaimResult,
    CompleteResult,
    Completion,
    DeadLetterPage,
    DeleteResult,
    Dispatch,
    EventCause,
    EventPage,
    FailResult,
    InFlight,
    NewEvent,
    Overview,
    PresenceEntry,
    PruneResult,
    ReleaseResult,
    RenewResult,
    RetryResult,
    SessionPage,
    SessionSummary,
    SignalResult,
    SkipResult,
    SnapshotInfo,
    StateRead,
    StoredEvent,
    StoreTotals,
)
from a2sql.plans.kinds import Answered, Context, Plan, has_events
from a2sql.sql.codec import truncate_ms
from a2sql.sql.executor import Transaction
from a2sql.sql.queries import append as append_ops
from a2sql.sql.queries import attempts as attempt_ops
from a2sql.sql.queries import claims as claim_ops
from a2sql.sql.queries import control as control_ops
from a2sql.sql.queries import dispatch as dispatch_ops
from a2sql.sql.queries import operator_reads as inspect_ops
from a2sql.sql.queries import overview as overview_ops
from a2sql.sql.queries import presence as presence_ops
from a2sql.sql.queries import repair as repair_ops
from a2sql.sql.queries import retention as retention_ops
from a2sql.sql.queries import state as state_ops
from a2sql.sql.queries.events import ValidEvent

T = TypeVar("T")


def _valid_cause(cause: object, where: str) -> EventCause:
    if not isinstance(cause, EventCause):
        raise invalid(where, f"must be an EventCause, got {type(cause).__name__}")
    validate.integer(cause.index, f"{where}.index", minimum=1)
    validate.integer(cause.attempt, f"{where}.attempt", minimum=1)
    if cause.batch_size is not None:
        validate.integer(cause.batch_size, f"{where}.batch_size", minimum=1)
    return cause


def _valid_events(
    ctx: Context, events: object, argument: str, *, returned_by: EventCause | None = None
) -> list[ValidEvent]:
    """``events`` checked and encoded; ``returned_by``: the attempt that returned them,
    which becomes their cause (they must carry an id, and no cause of their own)."""
    valid = []
    for position, event in enumerate(validate.sequence(events, argument)):
        where = f"{argument}[{position}]"
        if not isinstance(event, NewEvent):
            raise invalid(where, f"must be a NewEvent, got {type(event).__name__}")
        cause = event.cause
        if returned_by is not None:
            if event.id is None:
                raise invalid(f"{where}.id", "a returned event must carry an id")
            if cause is not None:
                raise invalid(f"{where}.cause", "must be unset: the store sets it")
            cause = returned_by
        elif cause is not None:
            _valid_cause(cause, f"{where}.cause")
        if not isinstance(event.settled, bool):
            raise invalid(f"{where}.settled", "must be a bool")
        available_at = wake_on = None
        if event.available_at is not None or event.wake_on is not None:
            available_at, wake_on = _valid_timing(event, where)
        valid.append(
            ValidEvent(  # positional: a named tuple takes keywords more slowly
                validate.name(event.type, f"{where}.type"),
                validate.json_value(event.payload, f"{where}.payload", ctx.limits),
                validate.optional_name(event.id, f"{where}.id"),
                cause,
                validate.optional_name(event.lane, f"{where}.lane"),
                event.settled,
                available_at,
                wake_on,
            )
        )
    return valid


def _valid_timing(event: NewEvent, where: str) -> tuple[datetime | None, str | None]:
    """An event's ``available_at`` (to the millisecond) and ``wake_on``, checked; a settled
    event ignores ``available_at`` and cannot wait."""
    wake_on = validate.optional_name(event.wake_on, f"{where}.wake_on")
    if event.settled:
        if wake_on is not None:
            raise invalid(f"{where}.wake_on", "must be unset on a settled event: it never waits")
        return None, None
    if event.available_at is None:
        return None, wake_on
    at = truncate_ms(validate.aware_datetime(event.available_at, f"{where}.available_at"))
    if at >= NO_TIMEOUT:
        raise invalid(f"{where}.available_at", f"must be before {NO_TIMEOUT.isoformat()}")
    return at, wake_on


def _lease(ctx: Context, ttl_ms: object, expires_at: object) -> validate.Lease:
    """The lease arguments, checked (an expiry past the year 9999 is refused when the
    claim reads the clock)."""
    ttl = validate.ttl(ttl_ms)
    if expires_at is not None:
        return validate.Lease(None, truncate_ms(validate.aware_datetime(expires_at, "expires_at")))
    return validate.Lease(ttl, None)


def _index_bound(value: object, argument: str) -> int | None:
    return None if value is None else validate.integer(value, argument, minimum=0)


# --- the store's methods ------------------------------------------------------


def append(ctx: Context, session_id: object, events: object) -> Plan[AppendResult]:
    sid = validate.name(session_id, "session_id")
    batch = _valid_events(ctx, events, "events")
    if not batch:
        return Plan(lambda c: append_ops.has_pending(c, sid), read_only=True)
    return Plan(
        lambda c: append_ops.append(c, sid, batch, now=ctx.now(), new_id=ctx.ids),
        lock_session=sid,
        added_events=has_events,
        one_statement=ctx.backend.one_statement_append(ctx, sid, batch),
    )


def read(session_id: object, after_index: object, through_index: object) -> Plan[list[StoredEvent]]:
    sid = validate.name(session_id, "session_id")
    after = _index_bound(after_index, "after_index")
    through = _index_bound(through_index, "through_index")
    return Plan(lambda c: append_ops.read(c, sid, after, through), read_only=True)


def claim_available(
    ctx: Context,
    session_id: object,
    holder: object,
    ttl_ms: object,
    expires_at: object,
    exclude_indexes: object,
    limit: object,
) -> Plan[ClaimResult]:
    sid = validate.name(session_id, "session_id")
    who = validate.name(holder, "holder")
    expiry = _lease(ctx, ttl_ms, expires_at)
    most = _claim_limit(limit)
    excluded = [
        validate.integer(index, f"exclude_indexes[{position}]", minimum=1)
        for position, index in enumerate(
            validate.short_sequence(exclude_indexes, "exclude_indexes", limit=validate.MAX_EXCLUDED)
        )
    ]

    def run(tx: Transaction) -> ClaimResult:
        return claim_ops.claim_available(
            tx,
            sid,
            holder=who,
            now=ctx.now(),
            lease=expiry,
            exclude_indexes=excluded,
            limit=most,
        )

    return Plan(
        run,
        lock_session=sid,
        one_statement=ctx.backend.one_statement_claim(
            ctx, sid, holder=who, lease=expiry, exclude_indexes=excluded, limit=most
        ),
    )


def _claim_limit(limit: object) -> int | None:
    return None if limit is None else validate.limit(limit)


def _prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise invalid("prefix", f"must be a str, got {type(prefix).__name__}")
    if prefix:
        validate.name(prefix, "prefix")
    return prefix


def claim_next(
    ctx: Context,
    holder: object,
    ttl_ms: object,
    expires_at: object,
    limit: object,
    prefix: object,
) -> Plan[Dispatch]:
    who = validate.name(holder, "holder")
    expiry = _lease(ctx, ttl_ms, expires_at)
    most = _claim_limit(limit)
    under = _prefix(prefix)

    def run(tx: Transaction) -> Dispatch:
        return dispatch_ops.claim_next(
            tx, ctx.backend, holder=who, clock=ctx.now, lease=expiry, limit=most, prefix=under
        )

    # Which session it locks is decided inside: claim_next locks it itself.
    return Plan(run)


def _claim_refs(claims: object) -> list[ClaimRef]:
    refs = []
    for position, ref in enumerate(validate.sequence(claims, "claims")):
        if not isinstance(ref, ClaimRef):
            raise invalid(f"claims[{position}]", f"must be a ClaimRef, got {type(ref).__name__}")
        validate.integer(ref.index, f"claims[{position}].index", minimum=1)
        validate.integer(ref.attempt, f"claims[{position}].attempt", minimum=1)
        refs.append(ref)
    return refs


def release_claims(
    ctx: Context, session_id: object, holder: object, claims: object
) -> Plan[ReleaseResult] | Answered[ReleaseResult]:
    sid = validate.name(session_id, "session_id")
    who = validate.name(holder, "holder")
    refs = _claim_refs(claims)
    if not refs:
        return Answered(ReleaseResult(released=[], superseded=[]))
    return Plan(
        lambda c: claim_ops.release_claims(c, sid, holder=who, claims=refs),
        lock_session=sid,
        # Not new events, but free ones: other processes' idle workers wake.
        added_events=lambda result: bool(result.released),
    )


def renew_claims(
    ctx: Context,
    session_id: object,
    holder: object,
    claims: object,
    ttl_ms: object,
    expires_at: object,
) -> Plan[RenewResult] | Answered[RenewResult]:
    sid = validate.name(session_id, "session_id")
    who = validate.name(holder, "holder")
    expiry = _lease(ctx, ttl_ms, expires_at)
    refs = _claim_refs(claims)
    if not refs:
        return Answered(RenewResult(renewed=[], superseded=[]))

    def run(tx: Transaction) -> RenewResult:
        now = ctx.now()
        return claim_ops.renew_claims(
            tx, sid, holder=who, claims=refs, now=now, expires_at=expiry.at(now)
        )

    return Plan(run, lock_session=sid)


def _valid_completion(
    ctx: Context, index: object, attempt: object, events: object, where: str
) -> tuple[int, int, list[ValidEvent]]:
    at = validate.integer(index, f"{where}index", minimum=1)
    att = validate.integer(attempt, f"{where}attempt", minimum=1)
    return at, att, _valid_events(ctx, events, f"{where}events", returned_by=EventCause(at, att))


def complete_attempt(
    ctx: Context, session_id: object, index: object, attempt: object, events: object
) -> Plan[CompleteResult]:
    sid = validate.name(session_id, "session_id")
    at, att, batch = _valid_completion(ctx, index, attempt, events, "")
    return Plan(
        lambda c: attempt_ops.complete_attempt(
            c, sid, index=at, attempt=att, batch=batch, now=ctx.now(), new_id=ctx.ids
        ),
        lock_session=sid,
        added_events=has_events,
        one_statement=ctx.backend.one_statement_complete(ctx, sid, at, att, batch),
    )


def complete_attempts(
    ctx: Context, session_id: object, completions: object
) -> Plan[list[CompleteResult]] | Answered[list[CompleteResult]]:
    sid = validate.name(session_id, "session_id")
    valid = []
    for position, completion in enumerate(validate.sequence(completions, "completions")):
        where = f"completions[{position}]"
        if not isinstance(completion, Completion):
            raise invalid(where, f"must be a Completion, got {type(completion).__name__}")
        valid.append(
            _valid_completion(
                ctx, completion.index, completion.attempt, completion.events, f"{where}."
            )
        )
    if not valid:
        return Answered([])

    def run(tx: Transaction) -> list[CompleteResult]:
        # One clock reading and one lock for the call; each completion then
        # sees the ones before it, exactly as calls one after another would.
        now = ctx.now()
        return [
            attempt_ops.complete_attempt(
                tx, sid, index=at, attempt=att, batch=batch, now=now, new_id=ctx.ids
            )
            for at, att, batch in valid
        ]

    return Plan(
        run,
        lock_session=sid,
        added_events=lambda results: any(result.events for result in results),
    )


def fail_attempt(
    ctx: Context,
    session_id: object,
    index: object,
    attempt: object,
    error: object,
    max_failures: object,
    retry_after_ms: object,
) -> Plan[FailResult]:
    sid = validate.name(session_id, "session_id")
    at = validate.integer(index, "index", minimum=1)
    att = validate.integer(attempt, "attempt", minimum=1)
    message = validate.text(error, "error", ctx.limits)
    limit = validate.integer(max_failures, "max_failures", minimum=1)
    delay = (
        None
        if retry_after_ms is None
        else validate.integer(
            retry_after_ms, "retry_after_ms", minimum=0, maximum=validate.MAX_TTL_MS
        )
    )

    def run(tx: Transaction) -> FailResult:
        now = ctx.now()
        if delay:  # a retry time past the year 9999 is refused
            validate.expiry(now, delay, "retry_after_ms")
        return attempt_ops.fail_attempt(
            tx,
            sid,
            index=at,
            attempt=att,
            error=message,
            max_failures=limit,
            now=now,
            retry_after_ms=delay,
        )

    return Plan(
        run,
        lock_session=sid,
        one_statement=ctx.backend.one_statement_fail(
            ctx, sid, at, att, error=message, max_failures=limit, retry_after_ms=delay
        ),
    )


def read_state(session_id: object, reducer_name: object) -> Plan[StateRead]:
    sid = validate.name(session_id, "session_id")
    reducer = validate.name(reducer_name, "reducer_name")
    return Plan(lambda c: state_ops.read_state(c, sid, reducer), read_only=True)


def put_snapshot(
    ctx: Context, session_id: object, reducer_name: object, index: object, state: object
) -> Plan[None]:
    sid = validate.name(session_id, "session_id")
    reducer = validate.name(reducer_name, "reducer_name")
    at = validate.integer(index, "index", minimum=1)
    state_json = validate.json_value(state, "state", ctx.limits)
    return Plan(
        lambda c: state_ops.put_snapshot(c, ctx.backend, sid, reducer, at, state_json, ctx.now()),
        lock_session=sid,
    )


def stream_page(session_id: str, after_index: int, limit: int) -> Plan[list[StoredEvent]]:
    """The next page of a stream (arguments already checked when the stream opened)."""
    return Plan(
        lambda c: (
            inspect_ops.read_events(
                c,
                session_id,
                after_index=after_index,
                through_index=None,
                limit=limit,
                states=False,
            ).events
        ),
        read_only=True,
    )


def presence_set(
    ctx: Context,
    ns: object,
    participant: object,
    values: object,
    at: object,
    seen: object,
    ttl_ms: object,
) -> Plan[None] | Answered[None]:
    """``at=None`` is the store's clock at the write, ``seen=None`` the write's ``at``
    in ms since the Unix epoch (see a2sql.sql.queries.presence.default_seen)."""
    space = validate.name(ns, "ns")
    who = validate.name(participant, "participant")
    fields: Mapping[object, JSON] = validate.mapping(values, "values")
    given_at = None if at is None else truncate_ms(validate.aware_datetime(at, "at"))
    given_seen = None if seen is None else validate.integer(seen, "seen", minimum=-(2**63))
    ttl = validate.ttl(ttl_ms)
    encoded: list[tuple[str, str | None]] = [
        (
            validate.name(field, "values key"),
            None if value is None else validate.json_value(value, f"values[{field!r}]", ctx.limits),
        )
        for field, value in fields.items()
    ]
    if not encoded:
        return Answered(None)

    def run(tx: Transaction) -> None:
        now = ctx.now()
        written_at = now if given_at is None else given_at
        presence_ops.set_fields(
            tx,
            ctx.backend,
            space,
            who,
            encoded,
            at=written_at,
            seen=presence_ops.default_seen(written_at) if given_seen is None else given_seen,
            now=now,
            expires_at=validate.expiry(now, ttl),
        )

    return Plan(run)


def presence_read(ctx: Context, ns: object) -> Plan[list[PresenceEntry]]:
    space = validate.name(ns, "ns")
    return Plan(lambda c: presence_ops.read(c, space, ctx.now()), read_only=True)


def list_sessions(
    ctx: Context, prefix: object, cursor: object, limit: object, state: object = None
) -> Plan[SessionPage]:
    under = _prefix(prefix)
    after = validate.optional_name(cursor, "cursor")
    count = validate.limit(limit)
    having = overview_ops.session_state(state)
    if having is not None:
        return Plan(
            lambda c: overview_ops.list_sessions_in_state(
                c, ctx.backend, state=having, prefix=under, cursor=after, limit=count, now=ctx.now()
            ),
            read_only=True,
        )
    return Plan(
        lambda c: inspect_ops.list_sessions(
            c, ctx.backend, prefix=under, cursor=after, limit=count, now=ctx.now()
        ),
        read_only=True,
    )


# The bound of inspect.overview's counts: each walks at most this many events.
MAX_OVERVIEW_BOUND = 1_000_000


def overview(ctx: Context, prefix: object, bound: object) -> Plan[Overview]:
    under = _prefix(prefix)
    upto = validate.integer(bound, "bound", minimum=1, maximum=MAX_OVERVIEW_BOUND)
    return Plan(
        lambda c: overview_ops.overview(c, ctx.backend, prefix=under, bound=upto, now=ctx.now()),
        read_only=True,
    )


def in_flight(ctx: Context, limit: object) -> Plan[InFlight]:
    count = validate.limit(limit)
    return Plan(lambda c: overview_ops.in_flight(c, limit=count, now=ctx.now()), read_only=True)


def event_by_id(event_id: object) -> Plan[StoredEvent | None]:
    eid = validate.name(event_id, "event_id")
    return Plan(lambda c: inspect_ops.event_by_id(c, eid), read_only=True)


def session_summary(ctx: Context, session_id: object) -> Plan[SessionSummary | None]:
    sid = validate.name(session_id, "session_id")
    return Plan(lambda c: inspect_ops.session(c, ctx.backend, sid, now=ctx.now()), read_only=True)


def totals(ctx: Context) -> Plan[StoreTotals]:
    return Plan(lambda c: inspect_ops.totals(c, now=ctx.now()), read_only=True)


def list_dead_letters(prefix: object, cursor: object, limit: object) -> Plan[DeadLetterPage]:
    under = _prefix(prefix)
    after = inspect_ops.dead_letter_cursor(cursor)
    count = validate.limit(limit)
    return Plan(
        lambda c: inspect_ops.list_dead_letters(c, prefix=under, cursor=after, limit=count),
        read_only=True,
    )


# --- operators' repairs and retention -------------------------------------------


def retry_dead_letter(session_id: object, index: object) -> Plan[RetryResult]:
    sid = validate.name(session_id, "session_id")
    at = validate.integer(index, "index", minimum=1)
    return Plan(
        lambda c: repair_ops.retry_dead_letter(c, sid, index=at),
        lock_session=sid,
        # Not a new event, but one claimable again: idle workers wake.
        added_events=lambda result: result.outcome == "requeued",
    )


def skip_event(ctx: Context, session_id: object, index: object, reason: object) -> Plan[SkipResult]:
    sid = validate.name(session_id, "session_id")
    at = validate.integer(index, "index", minimum=1)
    why = validate.text(reason, "reason", ctx.limits)
    if not why.strip():
        raise invalid("reason", "must say why the event is skipped (it is kept in last_error)")
    return Plan(
        lambda c: repair_ops.skip_event(c, sid, index=at, reason=why, now=ctx.now()),
        lock_session=sid,
        # The next event of its lane may be claimable now.
        added_events=lambda result: result.outcome == "skipped",
    )


# --- time and control (SPEC §7) ---------------------------------------------------


def signal(
    ctx: Context, session_id: object, name: object, payload: object, event_id: object
) -> Plan[SignalResult]:
    sid = validate.name(session_id, "session_id")
    signal_name = validate.name(name, "name")
    event = ValidEvent(
        signal_name,
        validate.json_value(payload, "payload", ctx.limits),
        validate.optional_name(event_id, "id"),
        None,
        None,
        True,  # settled: a signal is no work
        None,
        signal_name,  # found by waits appended later (a2sql.sql.queries.events.SIGNALLED)
    )
    return Plan(
        lambda c: control_ops.signal(c, sid, event, now=ctx.now(), new_id=ctx.ids),
        lock_session=sid,
        # A new event, and the events it woke claimable.
        added_events=lambda result: not result.replayed,
    )


def cancel_session(ctx: Context, session_id: object, reason: object) -> Plan[CancelResult]:
    sid = validate.name(session_id, "session_id")
    why = validate.text(reason, "reason", ctx.limits)
    if not why.strip():
        raise invalid("reason", "must say why the session is cancelled (kept in last_error)")
    return Plan(
        lambda c: control_ops.cancel_session(c, sid, reason=why, now=ctx.now()),
        lock_session=sid,
    )


def delete_session(ctx: Context, session_id: object) -> Plan[DeleteResult]:
    sid = validate.name(session_id, "session_id")
    return Plan(lambda c: retention_ops.delete_session(c, ctx.backend, sid), lock_session=sid)


def _cut(settled_before: object) -> datetime:
    return truncate_ms(validate.aware_datetime(settled_before, "settled_before"))


def prunable(ctx: Context, settled_before: object, prefix: object) -> Plan[PruneResult]:
    cut = _cut(settled_before)
    under = _prefix(prefix)
    return Plan(
        lambda c: retention_ops.prunable_totals(c, ctx.backend, settled_before=cut, prefix=under),
        read_only=True,
    )


class PruneCalls(NamedTuple):
    """``prune`` as calls: find the candidates, then one short transaction per session."""

    candidates: Plan[list[str]]
    session: Callable[[str], Plan[DeleteResult | None]]


def prune(ctx: Context, settled_before: object, prefix: object, limit: object) -> PruneCalls:
    cut = _cut(settled_before)
    under = _prefix(prefix)
    count = validate.limit(limit)

    def session(sid: str) -> Plan[DeleteResult | None]:
        return Plan(
            lambda c: retention_ops.prune_session(c, ctx.backend, sid, settled_before=cut),
            lock_session=sid,
        )

    return PruneCalls(
        Plan(
            lambda c: retention_ops.prunable(
                c, ctx.backend, settled_before=cut, prefix=under, limit=count
            ),
            read_only=True,
        ),
        session,
    )


def read_events(
    session_id: object, after_index: object, through_index: object, limit: object
) -> Plan[EventPage]:
    sid = validate.name(session_id, "session_id")
    after = validate.integer(after_index, "after_index", minimum=0)
    through = _index_bound(through_index, "through_index")
    count = validate.limit(limit)
    return Plan(
        lambda c: inspect_ops.read_events(
            c, sid, after_index=after, through_index=through, limit=count
        ),
        read_only=True,
    )


def list_snapshots(session_id: object) -> Plan[list[SnapshotInfo]]:
    sid = validate.name(session_id, "session_id")
    return Plan(lambda c: state_ops.list_snapshots(c, sid), read_only=True)


def stream_start(
    ctx: Context, session_id: object, start_after: object, poll_interval: object
) -> tuple[str, int, float]:
    sid = validate.name(session_id, "session_id")
    start = validate.integer(start_after, "start_after", minimum=0)
    if poll_interval is None:
        return sid, start, ctx.backend.stream_poll_interval
    return sid, start, validate.seconds(poll_interval, "poll_interval")


def pruned(results: Sequence[DeleteResult | None]) -> PruneResult:
    """The total of one ``prune`` call: the sessions it deleted, and their rows."""
    deleted = [result for result in results if result is not None]
    return PruneResult(
        sessions=len(deleted),
        events=sum(result.events for result in deleted),
        snapshots=sum(result.snapshots for result in deleted),
    )


def list_waiting_and_scheduled(
    ctx: Context, session_id: object, after_index: object, limit: object
) -> Plan[list[StoredEvent]]:
    sid = validate.name(session_id, "session_id")
    after = validate.integer(after_index, "after_index", minimum=0)
    count = validate.limit(limit)
    return Plan(
        lambda c: inspect_ops.list_waiting_and_scheduled(
            c, sid, after_index=after, limit=count, now=ctx.now()
        ),
        read_only=True,
    )
