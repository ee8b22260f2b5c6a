"""Metrics: what workers report and what the store holds, for Prometheus and OpenTelemetry.

- ``WorkerMetrics``: what a worker reports (``Worker(..., metrics=...)``); the base
  records nothing. ``PrometheusMetrics`` (a ``CollectorRegistry``) and
  ``OpenTelemetryMetrics`` (a ``Meter``) record it.
- ``OverviewReader``: the store's counts (``store.inspect.overview``), read at most once
  per interval for every scraper; ``StoreCollector`` (Prometheus) and
  ``observe_store`` (OpenTelemetry) turn them into gauges.
- ``prometheus_exposition``: a registry as Prometheus text, for an application's
  ``/metrics``; ``serve_prometheus``: an HTTP server of it (``a2sql worker
  --metrics-port``).

Importing this package imports neither prometheus_client nor opentelemetry: the names
that need them are loaded on first use, and need the ``metrics`` extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from a2sql.metrics.gauges import OverviewReader
from a2sql.metrics.recorder import WorkerMetrics

if TYPE_CHECKING:
    from a2sql.metrics.otel import OpenTelemetryMetrics, observe_store
    from a2sql.metrics.prometheus import (
        PrometheusMetrics,
        PrometheusServer,
        StoreCollector,
        prometheus_exposition,
        serve_prometheus,
    )

# Each name that needs a third-party package: the module it is in.
_LAZY = {
    "PrometheusMetrics": "a2sql.metrics.prometheus",
    "PrometheusServer": "a2sql.metrics.prometheus",
    "StoreCollector": "a2sql.metrics.prometheus",
    "prometheus_exposition": "a2sql.metrics.prometheus",
    "serve_prometheus": "a2sql.metrics.prometheus",
    "OpenTelemetryMetrics": "a2sql.metrics.otel",
    "observe_store": "a2sql.metrics.otel",
}
HINT = (
    "a2sql.metrics.{name} needs a2sql's metrics extra ({package}):"
    " pip install '.[metrics]' in a clone"
)

__all__ = [
    "OpenTelemetryMetrics",
    "OverviewReader",
    "PrometheusMetrics",
    "PrometheusServer",
    "StoreCollector",
    "WorkerMetrics",
    "observe_store",
    "prometheus_exposition",
    "serve_prometheus",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'a2sql.metrics' has no attribute {name!r}")
    try:
        loaded = importlib.import_module(module)
    except ImportError as error:
        package = "prometheus-client" if module.endswith("prometheus") else "opentelemetry-api"
        raise ImportError(HINT.format(name=name, package=package)) from error
    return getattr(loaded, name)
