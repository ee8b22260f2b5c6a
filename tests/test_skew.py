"""Two writers whose clocks are 5 ms apart, appending in turn to one session: bench's
``count_backwards`` counts the adjacent pairs whose ``created_at`` goes backwards, as
the store's own reads show them.

Today a store stamps an event with its own clock, so the lagging writer's events
can come before the previous one in time (issue: a later design may keep a
session's times from going backwards; this test then still holds, with a count of 0).
"""

from __future__ import annotations

from itertools import pairwise

import a2sql
from a2sql import NewEvent
from bench.skew import SkewedClock, count_backwards


def test_count_backwards_counts_what_the_store_reads(url: str) -> None:
    a2sql.create_store(url, migrate=True).close()
    ahead = a2sql.create_store(url, migrate=False, clock=SkewedClock(0))
    behind = a2sql.create_store(url, migrate=False, clock=SkewedClock(-5))
    try:
        for i in range(40):
            (ahead if i % 2 == 0 else behind).append("skewed", [NewEvent("e", {"n": i})])
            ahead.append("other", [NewEvent("e", {"n": i})])  # one clock: never backwards
        events = ahead.read("skewed")
        assert [e.index for e in events] == list(range(1, 41))
        expected = sum(1 for a, b in pairwise(events) if b.created_at < a.created_at)
        with ahead.engine.connect() as conn:
            assert count_backwards(conn, "skewed") == expected
            assert count_backwards(conn, "other") == 0
            assert count_backwards(conn) == expected
        print(f"backwards pairs: {expected} of 39")
    finally:
        ahead.close()
        behind.close()
