"""OpenTelemetry: the worker's instruments (``OpenTelemetryMetrics``) and the store's
observable gauges (``observe_store``), created from a ``Meter`` the application
configured. Uses opentelemetry-api only (the ``metrics`` extra); the SDK, the readers
and the exporters are the application's choice."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Histogram, Meter, ObservableGauge, Observation

from a2sql.metrics.gauges import STORE_GAUGES, Reading, StoreGauge
from a2sql.metrics.recorder import (
    CLAIM_LATENCY,
    HANDLED,
    HANDLER_DURATION,
    RENEWALS_LOST,
    SECONDS_BUCKETS,
    TIMEOUTS,
    Instrument,
    WorkerMetrics,
    claim_latency_s,
)

if TYPE_CHECKING:
    from a2sql.core.records import StoredEvent


class OpenTelemetryMetrics(WorkerMetrics):
    """A worker's metrics as instruments of ``meter`` (``a2sql.worker.…``), with the
    attributes ``type`` (and ``outcome``), as ``PrometheusMetrics`` labels them."""

    def __init__(self, meter: Meter) -> None:
        self._handled = meter.create_counter(
            HANDLED.otel, unit=HANDLED.unit, description=HANDLED.help
        )
        self._duration = _seconds_histogram(meter, HANDLER_DURATION)
        self._latency = _seconds_histogram(meter, CLAIM_LATENCY)
        self._lost = meter.create_counter(
            RENEWALS_LOST.otel, unit=RENEWALS_LOST.unit, description=RENEWALS_LOST.help
        )
        self._timeouts = meter.create_counter(
            TIMEOUTS.otel, unit=TIMEOUTS.unit, description=TIMEOUTS.help
        )

    def claimed(self, event: StoredEvent) -> None:
        latency = claim_latency_s(event)
        if latency is not None:
            self._latency.record(latency, {"type": event.type})

    def handled(self, event: StoredEvent, outcome: str, duration_s: float | None) -> None:
        self._handled.add(1, {"type": event.type, "outcome": outcome})
        if duration_s is not None:
            self._duration.record(duration_s, {"type": event.type})

    def renewal_lost(self, event: StoredEvent) -> None:
        self._lost.add(1, {"type": event.type})

    def timed_out(self, event: StoredEvent) -> None:
        self._timeouts.add(1, {"type": event.type})


def _seconds_histogram(meter: Meter, instrument: Instrument) -> Histogram:
    try:
        return meter.create_histogram(
            instrument.otel,
            unit=instrument.unit,
            description=instrument.help,
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
    except TypeError:
        # An API or SDK before 1.30 takes no advice: its default buckets (made for
        # milliseconds) apply unless the application sets a View.
        return meter.create_histogram(
            instrument.otel, unit=instrument.unit, description=instrument.help
        )


def observe_store(meter: Meter, reader: Reading) -> list[ObservableGauge]:
    """The store's gauges (``a2sql.store.…``, attribute ``prefix``) as observable gauges
    of ``meter``, observed from ``reader``: however often the application's metric
    readers collect, the store is read at most once per ``reader.interval``."""
    return [
        meter.create_observable_gauge(
            gauge.instrument.otel,
            callbacks=[_observing(gauge, reader)],
            unit=gauge.instrument.unit,
            description=gauge.instrument.help,
        )
        for gauge in STORE_GAUGES
    ]


def _observing(
    gauge: StoreGauge, reader: Reading
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(gauge.value(overview), {"prefix": prefix})
            for prefix, overview in reader.read().items()
        ]

    return observe
