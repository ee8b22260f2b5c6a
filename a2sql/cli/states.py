"""An event's state as an operator reads it, from what the store keeps about it."""

from __future__ import annotations

from datetime import datetime

from a2sql.cli.output import iso
from a2sql.core.records import EventPage, StoredEvent


def first_line(text: str | None) -> str:
    """An error's first line (a worker's failure text goes on with where it was raised)."""
    return "" if text is None else text.split("\n", 1)[0]


def event_state(event: StoredEvent, page: EventPage, now: datetime) -> tuple[str, str]:
    """What an event is waiting for or went through, as (state, detail)."""
    if event.processed_at is not None:
        if event.processed_by_attempt is not None:
            return "processed", f"by attempt {event.processed_by_attempt}"
        # Processed by no attempt: appended settled, or skipped with a reason.
        if event.last_error is None:
            return "settled", "appended processed"
        return "skipped", first_line(event.last_error)
    if event.failed_at is not None:
        return (
            "dead-lettered",
            f"after {event.failure_count} failures: {first_line(event.last_error)}",
        )
    if event.index in page.blocked:
        return "blocked", f"behind a dead letter in lane {event.lane}"
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
    "claimed": "cyan",
    "retrying": "yellow",
    "ready": "yellow",
}
