"""The store's gauges: what ``store.inspect.overview`` counts, read at most once per
interval however many scrapers ask (``OverviewReader``), and how each gauge is taken
from a reading (``STORE_GAUGES``), shared by the Prometheus collector and the
OpenTelemetry callbacks."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from a2sql.core import arguments as validate
from a2sql.core.errors import invalid
from a2sql.metrics.recorder import Instrument
from a2sql.plans.operations import MAX_OVERVIEW_BOUND

if TYPE_CHECKING:
    from a2sql.api.store import Store
    from a2sql.core.records import Overview

log = logging.getLogger("a2sql.metrics")

#: How often the store is read, at most (seconds): Prometheus's default scrape interval.
DEFAULT_INTERVAL_S = 15.0
#: How far each count goes (``inspect.overview``'s ``bound``).
DEFAULT_BOUND = 10_000


class Reading(Protocol):
    """What the gauges are read from: the store's overview by prefix, as last read
    (``OverviewReader``, or the web UI's own reading, which it awaits)."""

    def read(self) -> Mapping[str, Overview]:
        """The overview of each prefix; empty when there is none to give."""
        ...


class OverviewReader:
    """``store.inspect.overview`` for each of ``prefixes``, read at most once every
    ``interval`` seconds: one reading serves every scrape (and every gauge, and every
    thread) inside the interval, so the store's cost does not grow with scrapers.

    Thread-safe: a scrape that finds the reading stale reads the store while the
    others wait for that reading rather than start one of their own. A reading that
    fails is logged and gives no gauges (an empty mapping) until the next interval,
    so a database that does not answer is not asked again on every scrape.
    ``timer`` is the monotonic clock the interval is measured on.
    """

    def __init__(
        self,
        store: Store,
        *,
        prefixes: Sequence[str] = ("",),
        interval: float = DEFAULT_INTERVAL_S,
        bound: int = DEFAULT_BOUND,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(prefixes, str) or not all(isinstance(p, str) for p in prefixes):
            raise invalid("prefixes", 'must be a list of str ("" for every session)')
        if not prefixes:
            raise invalid("prefixes", "must name at least one prefix")
        for prefix in prefixes:
            if prefix:  # as inspect.overview checks it, once here
                validate.name(prefix, "prefixes")
        self.store = store
        self.prefixes = tuple(dict.fromkeys(prefixes))  # each once, in the order given
        self.interval = validate.seconds(interval, "interval")
        # Checked here rather than at each reading, which would only log it.
        self.bound = validate.integer(bound, "bound", minimum=1, maximum=MAX_OVERVIEW_BOUND)
        self._timer = timer
        self._lock = threading.Lock()
        self._reading: dict[str, Overview] = {}
        self._read_at: float | None = None

    def read(self) -> Mapping[str, Overview]:
        """The overview of each prefix, as read at most ``interval`` seconds ago (read now
        if older); empty when the last reading failed."""
        with self._lock:
            if self._read_at is not None and self._timer() - self._read_at < self.interval:
                return self._reading
            try:
                self._reading = {
                    prefix: self.store.inspect.overview(prefix=prefix, bound=self.bound)
                    for prefix in self.prefixes
                }
            except Exception as error:  # a scrape must not fail the worker or the app
                log.warning("reading the store's overview for metrics failed: %s", error)
                self._reading = {}
            # From the end of the reading: a slow read never runs back to back.
            self._read_at = self._timer()
            return self._reading


@dataclass(frozen=True, slots=True)
class StoreGauge:
    """One gauge of the store: its names and what it is of an ``Overview``."""

    instrument: Instrument
    value: Callable[[Overview], float]


def oldest_ready_age_s(overview: Overview) -> float:
    """Seconds from the time the longest-ready event became claimable to the reading;
    0 when none is ready."""
    if overview.oldest_ready_at is None:
        return 0.0
    return max(0.0, (overview.at - overview.oldest_ready_at).total_seconds())


_COUNTED = (
    "counted up to the bound (a2sql_store_count_bound): a count equal to it means at least"
    " that many"
)

STORE_GAUGES = (
    StoreGauge(
        Instrument(
            "a2sql_store_ready_events",
            "a2sql.store.ready",
            "{event}",
            f"Events claimable now (ready depth), by prefix; {_COUNTED}.",
        ),
        lambda o: o.ready,
    ),
    StoreGauge(
        Instrument(
            "a2sql_store_oldest_ready_age_seconds",
            "a2sql.store.oldest_ready.age",
            "s",
            "Seconds the longest-ready event has been claimable, at the reading; 0 when"
            " none is ready.",
        ),
        oldest_ready_age_s,
    ),
    StoreGauge(
        Instrument(
            "a2sql_store_claimed_events",
            "a2sql.store.claimed",
            "{event}",
            f"Events under a live claim (being handled), by prefix; {_COUNTED}.",
        ),
        lambda o: o.claimed,
    ),
    StoreGauge(
        Instrument(
            "a2sql_store_waiting_events",
            "a2sql.store.waiting",
            "{event}",
            f"Events waiting for a signal, by prefix; {_COUNTED}.",
        ),
        lambda o: o.waiting,
    ),
    StoreGauge(
        Instrument(
            "a2sql_store_scheduled_events",
            "a2sql.store.scheduled",
            "{event}",
            f"Events never claimed that run later (available_at), by prefix; {_COUNTED}.",
        ),
        lambda o: o.scheduled,
    ),
    StoreGauge(
        Instrument(
            "a2sql_store_dead_letters",
            "a2sql.store.dead_letters",
            "{event}",
            f"Events failed for good (dead letters), by prefix; {_COUNTED}.",
        ),
        lambda o: o.dead_letters,
    ),
    StoreGauge(
        Instrument(
            "a2sql_store_blocked_lanes",
            "a2sql.store.blocked_lanes",
            "{lane}",
            "Lanes whose head is a dead letter (the events behind it wait), by prefix;"
            f" {_COUNTED}.",
        ),
        lambda o: o.blocked_lanes,
    ),
    StoreGauge(
        Instrument(
            "a2sql_store_count_bound",
            "a2sql.store.count_bound",
            "{event}",
            "The bound the store's counts stop at: a count equal to it means at least that many.",
        ),
        lambda o: o.bound,
    ),
)
