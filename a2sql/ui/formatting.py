"""How the UI shows times, ages, sizes and payloads (Jinja filters)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from a2sql.core.records import NO_TIMEOUT


def duration(delta: timedelta | float | None) -> str:
    """A length of time as a person reads it: ``850 ms``, ``42 s``, ``3 min 5 s``,
    ``2 h 10 min``, ``3 d 4 h``; negative lengths get a minus sign."""
    if delta is None:
        return "—"
    seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{sign}{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes} min {secs} s" if secs else f"{sign}{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours} h {minutes} min" if minutes else f"{sign}{hours} h"
    days, hours = divmod(hours, 24)
    return f"{sign}{days} d {hours} h" if hours else f"{sign}{days} d"


def when(value: datetime | None) -> str:
    """A stored time in UTC to the millisecond; ``never`` for the no-timeout time."""
    if value is None:
        return "—"
    if value >= NO_TIMEOUT:
        return "never"
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def size(value: int | None) -> str:
    """A number of bytes in binary units."""
    if value is None:
        return "—"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def pretty(value: Any) -> str:
    """A JSON value indented, its keys as stored."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def count(value: int, capped: bool = False) -> str:
    """A count with thousands separators, ``10,000+`` when it stopped at its bound."""
    return f"{value:,}+" if capped else f"{value:,}"


FILTERS = {
    "duration": duration,
    "when": when,
    "size": size,
    "pretty": pretty,
    "count": count,
}
