"""Times (SPEC §3, §5): UTC, to the millisecond, the same value on every engine and path.

A clock in another zone, one whose UTC offset has a sub-millisecond part, and
times before 1970: what a write returns, what a read returns and what the
summaries report agree, on every engine and facade.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta, timezone

from a2sql import NewEvent, Store, StoredEvent
from a2sql.testing import FakeClock

# 12:00:00.123 at UTC+01:00:00.000500 is 11:00:00.122500 UTC: kept as .122.
ODD_ZONE = timezone(timedelta(hours=1, microseconds=500))
ODD_NOW = datetime(2026, 3, 4, 12, 0, 0, 123_000, tzinfo=ODD_ZONE)
ODD_NOW_STORED = datetime(2026, 3, 4, 11, 0, 0, 122_000, tzinfo=UTC)
EAST = timezone(timedelta(hours=5, minutes=30))


def times(event: StoredEvent) -> dict[str, datetime]:
    """The event's set times, by field name."""
    return {
        f.name: getattr(event, f.name)
        for f in fields(event)
        if isinstance(getattr(event, f.name), datetime)
    }


def assert_utc(*events: StoredEvent) -> None:
    for event in events:
        for name, value in times(event).items():
            assert value.tzinfo == UTC and value.microsecond % 1000 == 0, (name, value)


def test_writes_and_reads_return_the_same_utc_times_for_a_clock_in_another_zone(
    store: Store, clock: FakeClock
) -> None:
    """append, claim_available and complete_attempt return times in UTC, equal to the
    stored ones as read back, for a clock that reports another zone."""
    clock.set(datetime(2026, 3, 4, 17, 30, 0, 250_000, tzinfo=EAST))
    [appended] = store.append("s", [NewEvent("t")]).events
    [claimed] = store.claim_available("s", holder="w", ttl_ms=60_000).events
    [child] = store.complete_attempt(
        "s", index=1, attempt=claimed.attempt_count, events=[NewEvent("c", id="c")]
    ).events
    parent, stored_child = store.read("s")
    assert_utc(appended, claimed, child, parent, stored_child)
    assert appended.created_at == datetime(2026, 3, 4, 12, 0, 0, 250_000, tzinfo=UTC)
    assert times(child) == times(stored_child)
    assert times(appended) == {"created_at": parent.created_at}


def test_a_sub_millisecond_utc_offset_is_truncated_to_the_millisecond_in_utc(
    store: Store, clock: FakeClock
) -> None:
    """The clock's time and times given as arguments are cut to the millisecond in UTC
    (not in their own zone), so every engine stores the same instant."""
    clock.set(ODD_NOW)
    [appended] = store.append("s", [NewEvent("t")]).events
    assert appended.created_at == ODD_NOW_STORED
    [claimed] = store.claim_available("s", holder="w", ttl_ms=60_000, expires_at=ODD_NOW).events
    assert claimed.claim_expires_at == ODD_NOW_STORED
    store.presence.set("ns", "p", {"f": 1}, at=ODD_NOW, seen=0, ttl_ms=60_000)
    [entry] = store.presence.read("ns")
    assert entry.at == ODD_NOW_STORED
    [stored] = store.read("s")
    assert_utc(appended, claimed, stored)
    assert (stored.created_at, stored.claim_expires_at) == (ODD_NOW_STORED, ODD_NOW_STORED)


def test_updated_at_of_a_session_before_1970_is_its_latest_time(
    store: Store, clock: FakeClock
) -> None:
    """inspect: updated_at is the latest time of the session's events, before 1970 too."""
    created = datetime(1960, 5, 6, 7, 8, 9, tzinfo=UTC)
    clock.set(created)
    store.append("old", [NewEvent("t", settled=True)])
    summary = store.inspect.session("old")
    assert summary is not None
    assert (summary.first_event_at, summary.updated_at) == (created, created)
    [listed] = store.inspect.list_sessions(prefix="old").sessions
    assert listed.updated_at == created
