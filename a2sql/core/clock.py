"""Where time and event ids come from by default, and time as epoch milliseconds."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, overload


class Clock(Protocol):
    """Anything with ``now()`` returning a timezone-aware datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC, to the millisecond (the precision a store keeps)."""

    def now(self) -> datetime:
        return from_millis(time.time_ns() // 1_000_000)


def uuid7_id() -> str:
    """A random, time-ordered UUID (version 7) as a string: the default event id."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (
        (millis & 0xFFFF_FFFF_FFFF) << 80  # unix_ts_ms, 48 bits
        | 0x7 << 76  # version
        | ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
        | 0b10 << 62  # variant
        | rand & 0x3FFF_FFFF_FFFF_FFFF  # rand_b, 62 bits
    )
    # Formatted by hand: uuid.UUID(int=...) and str() cost twice as much.
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MS = timedelta(milliseconds=1)


@overload
def to_millis(value: datetime) -> int: ...
@overload
def to_millis(value: None) -> None: ...
def to_millis(value: datetime | None) -> int | None:
    """Epoch milliseconds of an aware datetime, truncated; None stays None."""
    if value is None:
        return None
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@overload
def from_millis(millis: int) -> datetime: ...
@overload
def from_millis(millis: None) -> None: ...
def from_millis(millis: int | None) -> datetime | None:
    """The aware UTC datetime of epoch milliseconds; None stays None."""
    return None if millis is None else EPOCH + millis * ONE_MS
