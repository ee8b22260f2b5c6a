"""An operator's repairs of one event: requeue a dead letter, or skip an event."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, false, null, update

from a2sql.core.records import RetryResult, SkipResult
from a2sql.sql.executor import Transaction
from a2sql.sql.queries.attempts import EVENT_NOW, PROMOTE_LANE_HEAD, THIS_EVENT, event_at
from a2sql.sql.schema import events as E

# The attempt count stays: attempt numbers are never reused, so the attempt
# that dead-lettered the event stays fenced off, and the next claim is new.
REQUEUE = (
    update(E)
    .where(*THIS_EVENT, E.c.processed_at.is_(None), E.c.failed_at.is_not(None))
    .values(failed_at=null(), failure_count=0, claim_holder=null(), claim_expires_at=null())
)

# An unprocessed event marked processed by no attempt, ``reason`` kept: what skip_event
# does to one event and cancel_session to each of a session's (a2sql.sql.queries.control).
# Its claim is released, its failure and wait cleared: a skipped wait is no signal
# (SIGNALLED).
PROCESSED_WITHOUT_AN_ATTEMPT = {
    "processed_at": EVENT_NOW,
    "processed_by_attempt": null(),
    "returned_event_ids": null(),
    "last_error": bindparam("reason"),
    "failed_at": null(),
    "lane_ready": false(),
    "claim_holder": null(),
    "claim_expires_at": null(),
    "wake_on": null(),
}

SKIP = update(E).where(*THIS_EVENT, E.c.processed_at.is_(None)).values(PROCESSED_WITHOUT_AN_ATTEMPT)


def retry_dead_letter(tx: Transaction, session_id: str, *, index: int) -> RetryResult:
    """Make a dead letter claimable again at once, with its failure count reset to 0."""
    event = event_at(tx, session_id, index)
    if event.processed_at is not None or event.failed_at is None:
        return RetryResult("not_dead_lettered")
    tx.run(REQUEUE, {"sid": session_id, "index": index})
    return RetryResult("requeued")


def skip_event(
    tx: Transaction, session_id: str, *, index: int, reason: str, now: datetime
) -> SkipResult:
    """Mark an unprocessed event processed by no attempt, keeping ``reason``; its lane
    moves on to the next event."""
    event = event_at(tx, session_id, index)
    if event.processed_at is not None:
        return SkipResult("already_processed")
    tx.run(SKIP, {"sid": session_id, "index": index, "now": now, "reason": reason})
    if event.lane is not None:
        tx.run(PROMOTE_LANE_HEAD, {"sid": session_id, "lane_name": event.lane})
    return SkipResult("skipped")
