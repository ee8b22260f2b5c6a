"""Signals and cancellation (SPEC §7): wake a session's waiting events, or stop its work.

A waiting event (``NewEvent(wake_on=name)``) is stored unclaimed with a claim
expiry ahead: its timeout, or NO_TIMEOUT without one, so that every claim
query, the seed's included, passes it over. A signal appends its own event,
settled, with its name in ``wake_on`` (so that a wait appended later finds it:
a2sql.sql.queries.events.SIGNALLED), and clears the expiry and ``wake_on`` of
the session's events waiting for that name: they are claimable at once.
Cancelling marks every unprocessed event of a session processed without an
attempt, as ``skip_event`` does one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import bindparam, null, update

from a2sql.core.records import CancelResult, SignalResult
from a2sql.sql.executor import Transaction
from a2sql.sql.queries import append as append_ops
from a2sql.sql.queries.events import SESSION, ValidEvent
from a2sql.sql.queries.repair import PROCESSED_WITHOUT_AN_ATTEMPT
from a2sql.sql.schema import events as E

# The session's events waiting for the signal: never claimed (a claim ends a
# wait whose timeout passed), unprocessed. Found in a2_events_waiting.
WAKE = (
    update(E)
    .where(
        E.c.session_id == SESSION,
        E.c.wake_on == bindparam("name"),
        E.c.processed_at.is_(None),
        E.c.first_claimed_at.is_(None),
    )
    .values(claim_expires_at=null(), wake_on=null())
    .returning(E.c.idx)
)

CANCEL = (
    update(E)
    .where(E.c.session_id == SESSION, E.c.processed_at.is_(None))
    .values(PROCESSED_WITHOUT_AN_ATTEMPT)
)


def signal(
    tx: Transaction,
    session_id: str,
    event: ValidEvent,
    *,
    now: datetime,
    new_id: Callable[[], str],
) -> SignalResult:
    """Append the signal's event (``event``: settled, its name in ``wake_on``) and wake the
    events waiting for it; a replay of the same id wakes nothing."""
    appended = append_ops.append(tx, session_id, [event], now=now, new_id=new_id)
    [stored] = appended.events
    if appended.replayed:
        return SignalResult(stored, [], replayed=True)
    woken = tx.rows(WAKE, {"sid": session_id, "name": event.wake_on})
    return SignalResult(stored, sorted(index for (index,) in woken))


def cancel_session(tx: Transaction, session_id: str, *, reason: str, now: datetime) -> CancelResult:
    """Mark every unprocessed event of the session processed without an attempt, with
    ``reason`` in ``last_error``: claims released, waits and schedules ended."""
    cancelled = tx.count(CANCEL, {"sid": session_id, "reason": reason, "now": now})
    return CancelResult(cancelled)
