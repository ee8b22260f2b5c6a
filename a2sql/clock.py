"""Where time and event ids come from by default."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Anything with ``now()`` returning a timezone-aware datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def uuid7_id() -> str:
    """A random, time-ordered UUID (version 7) as a string: the default event id."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))
