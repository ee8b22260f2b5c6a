"""An event's state as an operator reads it, from what the store keeps about it."""

from __future__ import annotations

from datetime import datetime

from a2sql.cli.output import iso
from a2sql.core.records import EventPage, StoredEvent


def first_line(text: str | None) -> str:
    """An error's first line (a worker's failure text goes on with where it was raised)."""
    return "" if text is None else text.split("\n", 1)[0]


def held_state(event: StoredEvent, now: datetime) -> tuple[str, str] | None:
    """A waiting event's state (for which signal, until when) or a scheduled one's (at
    when), as ``SessionSummary.waiting_count`` and ``scheduled_count`` count them;
    ``None`` for any other event."""
    if event.waiting:
        until = event.wait_until
        if until is None:
            return "waiting", f"for signal {event.wake_on}, no timeout"
        if until > now:
            return "waiting", f"for signal {event.wake_on} until {iso(until)}"
        return "waiting", f"for signal {event.wake_on}, timed out at {iso(until)}"
    expires = event.claim_expires_at
    if (
        event.processed_at is None
        and event.failed_at is None
        and event.first_claimed_at is None
        and event.claim_holder is None
        and expires is not None
        and expires > now
    ):
        return "scheduled", f"at {iso(expires)}"
    return None


def scheduled_at(event: StoredEvent, now: datetime) -> datetime | None:
    """When a scheduled event becomes claimable; ``None`` for any other event."""
    held = held_state(event, now)
    return event.claim_expires_at if held is not None and held[0] == "scheduled" else None


def event_state(event: StoredEvent, page: EventPage, now: datetime) -> tuple[str, str]:
    """What an event is waiting for or went through, as (state, detail)."""
    if event.processed_at is not None:
        if event.processed_by_attempt is not None:
            return "processed", f"by attempt {event.processed_by_attempt}"
        # Processed by no attempt: appended settled (a signal among them), or skipped
        # (or cancelled) with a reason.
        if event.last_error is None:
            return "settled", "a signal" if event.is_signal else "appended processed"
        return "skipped", first_line(event.last_error)
    if event.failed_at is not None:
        return (
            "dead-lettered",
            f"after {event.failure_count} failures: {first_line(event.last_error)}",
        )
    if event.index in page.blocked:
        return "blocked", f"behind a dead letter in lane {event.lane}"
    held = held_state(event, now)
    if held is not None:
        state, detail = held
        if event.index in page.waiting:
            detail += f"; also behind the earlier events of lane {event.lane}"
        return state, detail
    if event.index in page.waiting:
        return "pending", f"waits for the earlier events of lane {event.lane}"
    expires = event.claim_expires_at
    if event.claim_holder is not None and expires is not None and expires > now:
        return "claimed", f"by {event.claim_holder} until {iso(expires)}"
    times = "once" if event.failure_count == 1 else f"{event.failure_count} times"
    failed = f"failed {times}: {first_line(event.last_error)}"
    if event.claim_holder is None and expires is not None and expires > now:
        return "retrying", f"{failed}; claimable at {iso(expires)}"
    return "ready", failed if event.failure_count else ""


STATE_STYLES = {
    "processed": "green",
    "skipped": "dim",
    "settled": "green",
    "dead-lettered": "bold red",
    "blocked": "red",
    "pending": None,
    "waiting": "magenta",
    "scheduled": "blue",
    "claimed": "cyan",
    "retrying": "yellow",
    "ready": "yellow",
}
