"""The default clock (UTC, to the millisecond) and event ids (UUID version 7 strings,
time-ordered, random within a millisecond)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

from a2sql.core.clock import SystemClock, uuid7_id


def test_ids_are_canonical_version_7_uuids_carrying_the_current_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    ids = [uuid7_id() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lower-case, dashed, 36 characters
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert before <= parsed.int >> 80 <= after
    assert len(set(ids)) == len(ids)


def test_ids_of_later_milliseconds_sort_after_earlier_ones() -> None:
    first = uuid7_id()
    time.sleep(0.002)
    assert uuid7_id() > first


def test_the_system_clock_gives_utc_to_the_millisecond() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    now = SystemClock().now()
    after = datetime.now(UTC)
    assert now.tzinfo is UTC
    assert now.microsecond % 1000 == 0
    assert before <= now <= after
