"""What a worker reports, and to what: ``WorkerMetrics``, which records nothing unless a
subclass does (``PrometheusMetrics``, ``OpenTelemetryMetrics``), and the worker
instruments' names, units and help texts, shared by both exporters.

This module imports neither prometheus_client nor opentelemetry: every worker imports
it, and a worker without metrics pays one empty method call per event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from a2sql.core.records import StoredEvent


@dataclass(frozen=True, slots=True)
class Instrument:
    """One metric as both exporters name it: ``prometheus`` (``a2sql_…``; a counter's
    samples get ``_total``), ``otel`` (``a2sql.…``), its ``unit`` (UCUM, as OpenTelemetry
    writes it) and ``help``."""

    prometheus: str
    otel: str
    unit: str
    help: str


HANDLED = Instrument(
    "a2sql_worker_events_handled",
    "a2sql.worker.events.handled",
    "{event}",
    "Attempts a worker ended, by event type and outcome (completed, failed, dead_lettered,"
    " superseded, released, vanished).",
)
HANDLER_DURATION = Instrument(
    "a2sql_worker_handler_duration_seconds",
    "a2sql.worker.handler.duration",
    "s",
    "Seconds from an attempt's start to its outcome (the handler, then the transaction"
    " that completes or fails it), by event type.",
)
CLAIM_LATENCY = Instrument(
    "a2sql_worker_claim_latency_seconds",
    "a2sql.worker.claim.latency",
    "s",
    "Seconds from an event's creation to its first claim, by event type (store times).",
)
RENEWALS_LOST = Instrument(
    "a2sql_worker_renewals_lost",
    "a2sql.worker.renewals.lost",
    "{claim}",
    "Claims a renewal found gone while their handler ran (taken over after a stall, the"
    " session cancelled or the event skipped), by event type.",
)
TIMEOUTS = Instrument(
    "a2sql_worker_handler_timeouts",
    "a2sql.worker.handler.timeouts",
    "{attempt}",
    "Attempts failed because their handler ran past timeout_s, by event type.",
)

#: Histogram buckets, in seconds: from a few milliseconds (a handler that only
#: decides) to ten minutes (a chain of model and tool calls).
SECONDS_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


class WorkerMetrics:
    """What a worker reports, one call each where the worker decides it; this base
    records nothing. Give a subclass to ``Worker(..., metrics=...)`` or
    ``AsyncWorker(..., metrics=...)``.

    A ``Worker`` with ``concurrency`` above 1 calls from several threads at once, and
    every call is on the path of the events being handled: a recorder is quick,
    thread-safe and never raises.
    """

    def claimed(self, event: StoredEvent) -> None:
        """The worker starts serving ``event``, just claimed (``claim_latency_s`` says
        how long it waited, when it can tell)."""

    def handled(self, event: StoredEvent, outcome: str, duration_s: float | None) -> None:
        """An attempt at ``event`` ended with ``outcome`` (the worker's log line's:
        ``completed``, ``failed``, ``dead_lettered``, ``superseded``, ``vanished``) after
        ``duration_s`` seconds; ``released`` (handed back unhandled at a stop) has
        ``None``."""

    def renewal_lost(self, event: StoredEvent) -> None:
        """A renewal found the claim on ``event`` gone while its handler ran."""

    def timed_out(self, event: StoredEvent) -> None:
        """The handler of ``event`` ran past ``timeout_s``; its attempt fails."""


#: The recorder of a worker given none.
NO_METRICS = WorkerMetrics()


def claim_latency_s(event: StoredEvent) -> float | None:
    """Seconds from ``event``'s creation to its claim, for an event claimed for the first
    time; ``None`` for a later claim.

    Both times are the store's (the claim's own ``last_claimed_at``), so clocks of other
    hosts do not enter. A later claim waited for a retry delay or for a lease to end,
    which the claimed event no longer records, so it is not measured. Nor does it record
    an ``available_at`` or a wait: an event held that way counts its hold too."""
    claimed_at = event.last_claimed_at
    if claimed_at is None or event.first_claimed_at != claimed_at or event.failure_count:
        return None
    return max(0.0, (claimed_at - event.created_at).total_seconds())
