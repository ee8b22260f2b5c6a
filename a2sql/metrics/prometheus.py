"""Prometheus: the worker's counters and histograms (``PrometheusMetrics``), the store's
gauges as a collector (``StoreCollector``), a registry's exposition as text
(``prometheus_exposition``, for an application's own ``/metrics``) and an HTTP server
for it (``serve_prometheus``). Needs the ``metrics`` extra (prometheus-client).

Everything goes to a ``CollectorRegistry`` of its own unless given one: a2sql does not
touch the process's global registry unless asked (``registry=prometheus_client.REGISTRY``).
"""

from __future__ import annotations

from collections.abc import Iterator
from threading import Thread
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from a2sql.metrics.gauges import STORE_GAUGES, Reading
from a2sql.metrics.recorder import (
    CLAIM_LATENCY,
    HANDLED,
    HANDLER_DURATION,
    RENEWALS_LOST,
    SECONDS_BUCKETS,
    TIMEOUTS,
    WorkerMetrics,
    claim_latency_s,
)

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from a2sql.core.records import StoredEvent


class PrometheusMetrics(WorkerMetrics):
    """A worker's metrics as prometheus_client counters and histograms in ``registry``
    (a new ``CollectorRegistry`` if none is given), labelled by event ``type`` (and
    ``outcome``). One per registry: workers of one process may share it."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        by_type = ["type"]
        self._handled = Counter(
            HANDLED.prometheus, HANDLED.help, ["type", "outcome"], registry=self.registry
        )
        self._duration = Histogram(
            HANDLER_DURATION.prometheus,
            HANDLER_DURATION.help,
            by_type,
            registry=self.registry,
            buckets=SECONDS_BUCKETS,
        )
        self._latency = Histogram(
            CLAIM_LATENCY.prometheus,
            CLAIM_LATENCY.help,
            by_type,
            registry=self.registry,
            buckets=SECONDS_BUCKETS,
        )
        self._lost = Counter(
            RENEWALS_LOST.prometheus, RENEWALS_LOST.help, by_type, registry=self.registry
        )
        self._timeouts = Counter(
            TIMEOUTS.prometheus, TIMEOUTS.help, by_type, registry=self.registry
        )

    def claimed(self, event: StoredEvent) -> None:
        latency = claim_latency_s(event)
        if latency is not None:
            self._latency.labels(event.type).observe(latency)

    def handled(self, event: StoredEvent, outcome: str, duration_s: float | None) -> None:
        self._handled.labels(event.type, outcome).inc()
        if duration_s is not None:
            self._duration.labels(event.type).observe(duration_s)

    def renewal_lost(self, event: StoredEvent) -> None:
        self._lost.labels(event.type).inc()

    def timed_out(self, event: StoredEvent) -> None:
        self._timeouts.labels(event.type).inc()


class StoreCollector(Collector):
    """The store's gauges (``a2sql_store_…``, labelled by ``prefix``) from ``reader``: a
    scrape costs the store a reading at most once per ``reader.interval``.

    ``registry.register(StoreCollector(reader))``; describing the gauges (which
    ``register`` does) reads nothing."""

    def __init__(self, reader: Reading) -> None:
        self.reader = reader

    def describe(self) -> Iterator[Metric]:
        """The gauges' names and help, without samples: reads nothing."""
        for gauge in STORE_GAUGES:
            yield _family(gauge.instrument.prometheus, gauge.instrument.help)

    def collect(self) -> Iterator[Metric]:
        """The gauges, one sample per prefix, from the reader's latest reading."""
        reading = self.reader.read()
        for gauge in STORE_GAUGES:
            family = _family(gauge.instrument.prometheus, gauge.instrument.help)
            for prefix, overview in reading.items():
                family.add_metric([prefix], gauge.value(overview))
            yield family


def _family(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=["prefix"])


def prometheus_exposition(
    registry: CollectorRegistry, accept: str | None = None
) -> tuple[bytes, str]:
    """``registry``'s metrics as Prometheus text, and the ``Content-Type`` to serve it
    with: an application's ``/metrics``. ``accept``: the request's ``Accept`` header,
    to answer OpenMetrics to a scraper that asks for it (the text format otherwise)."""
    encode, content_type = choose_encoder(accept or "")
    return encode(registry), content_type


class PrometheusServer:
    """An HTTP server of one registry's metrics (``serve_prometheus``), in a daemon
    thread until ``stop()``."""

    def __init__(self, server: WSGIServer, thread: Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The port it listens on (the one given, or the one chosen for port 0)."""
        return int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def serve_prometheus(
    registry: CollectorRegistry, port: int, host: str = "127.0.0.1"
) -> PrometheusServer:
    """Serve ``registry`` over HTTP on ``host:port`` (any path answers; scrape
    ``/metrics``), in a daemon thread, until the returned server's ``stop()``. Bound to
    127.0.0.1 unless told otherwise: nothing outside the host reads it by default."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    return PrometheusServer(server, thread)
