"""Helpers for testing code that uses a2sql.

The contract's own tests (a2sql.testing.conformance), the pytest plugin that runs
them (a2sql.testing.plugin) and what they drive (a2sql.testing.facades,
a2sql.testing.model) are submodules that ``import a2sql.testing`` does not import:
they need pytest (``pip install '.[testing]'``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock that moves only when told to; pass it as ``create_store(clock=...)``."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, *, ms: int = 0, seconds: float = 0) -> datetime:
        """Move time forward and return the new now."""
        self._now += timedelta(milliseconds=ms, seconds=seconds)
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (timezone-aware)."""
        if when.tzinfo is None:
            raise ValueError("FakeClock.set needs a timezone-aware datetime")
        self._now = when
