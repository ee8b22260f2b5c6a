"""Workers with the tests' settings: a short poll and retries at once."""

from __future__ import annotations

from typing import Any

from a2sql import Store
from a2sql.worker import Backoff, Worker


def quick(store: Store, handler: Any, **settings: Any) -> Worker:
    """A ``Worker`` polling every 50 ms whose failed events are retried at once, unless
    ``settings`` say otherwise."""
    settings.setdefault("poll_interval", 0.05)
    settings.setdefault("backoff", Backoff.none())
    return Worker(store, handler, **settings)
