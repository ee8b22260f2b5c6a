"""Events appended per minute over the last hour, for the overview's chart.

No index serves "events appended since a time" (none is kept on times: each
would cost every write), so the UI samples the engine's running count of rows
inserted (``Overview.appended_total``) as it reads overviews, at most every
``SAMPLE_EVERY`` seconds, and charts the differences. The chart covers the time
this UI has been sampling, up to an hour.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

WINDOW = timedelta(hours=1)
SAMPLE_EVERY = timedelta(seconds=10)
MINUTES = 60


@dataclass(frozen=True, slots=True)
class Bar:
    """One minute of the chart: its start, how many events were appended in it, and
    whether the UI was sampling then (before it began, the count is unknown, not 0)."""

    start: datetime
    appended: int
    sampled: bool = True


@dataclass(frozen=True, slots=True)
class Chart:
    """The last hour by minute, and since when the UI has been sampling."""

    bars: list[Bar]
    since: datetime | None
    peak: int

    @property
    def total(self) -> int:
        """Events appended over the chart."""
        return sum(bar.appended for bar in self.bars)


class Throughput:
    """The samples of one UI, shared by its requests (thread-safe)."""

    def __init__(self) -> None:
        self._samples: deque[tuple[datetime, int]] = deque()
        self._lock = threading.Lock()

    def due(self, now: datetime) -> bool:
        """Whether a new sample is due at ``now``."""
        with self._lock:
            return not self._samples or now - self._samples[-1][0] >= SAMPLE_EVERY

    def record(self, at: datetime, appended_total: int | None) -> None:
        """A reading of the running count at ``at`` (ignored when the engine keeps none)."""
        if appended_total is None:
            return
        with self._lock:
            if self._samples and at <= self._samples[-1][0]:
                return
            self._samples.append((at, appended_total))
            while self._samples and at - self._samples[0][0] > WINDOW + SAMPLE_EVERY:
                self._samples.popleft()

    def chart(self, now: datetime) -> Chart:
        """The appended counts by minute over the hour before ``now``: each difference
        between two samples counted in the minute of the later one (a count that went
        down, when the engine's statistics were reset or rows deleted, counts 0)."""
        start = now.replace(second=0, microsecond=0) - timedelta(minutes=MINUTES - 1)
        counts = [0] * MINUTES
        with self._lock:
            samples = list(self._samples)
        for (_, before), (at, after) in pairwise(samples):
            minute = int((at - start).total_seconds() // 60)
            if 0 <= minute < MINUTES:
                counts[minute] += max(0, after - before)
        # A minute counts from the one after the first sample: the first sample's
        # minute has no difference before it.
        began = samples[0][0] if samples else now
        bars = [
            Bar(at, n, sampled=at + timedelta(minutes=1) > began and len(samples) > 1)
            for at, n in ((start + timedelta(minutes=m), n) for m, n in enumerate(counts))
        ]
        return Chart(
            bars=bars,
            since=samples[0][0] if samples else None,
            peak=max(counts),
        )
