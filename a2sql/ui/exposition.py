"""``/metrics``: the store's gauges as Prometheus text (a2sql.metrics), read at most once
per interval however many scrape, and sampled for the overview's chart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from a2sql.core.records import Overview
from a2sql.ui.rendering import Settings, settings_of

METRICS_HINT = (
    "/metrics needs the metrics extra (prometheus-client): pip install '.[metrics]' in a clone\n"
)


class UiReading:
    """The overviews the UI's ``/metrics`` last read, refreshed (awaited, on the server's
    loop or its thread pool, whatever the store) at most once per ``interval``; what
    ``StoreCollector`` turns into gauges."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._reading: dict[str, Overview] = {}
        self._read_at: float | None = None
        self._lock = asyncio.Lock()

    async def refresh(self, settings: Settings) -> None:
        """Read the store's overview if the last reading is older than the interval."""
        async with self._lock:
            if self._read_at is not None and time.monotonic() - self._read_at < self.interval:
                return
            store = settings.calls.store
            overview = await settings.calls(store.inspect.overview, bound=settings.bound)
            settings.throughput.record(overview.at, overview.appended_total)
            self._reading = {"": overview}
            self._read_at = time.monotonic()

    def read(self) -> Mapping[str, Overview]:
        """The last reading, by prefix."""
        return self._reading


async def metrics_response(request: Request) -> Response:
    """The store's gauges in the format the scraper asks for."""
    try:
        from prometheus_client import CollectorRegistry

        from a2sql.metrics import StoreCollector, prometheus_exposition
    except ImportError:
        return PlainTextResponse(METRICS_HINT, status_code=501)
    settings = settings_of(request)
    state: Any = request.app.state
    if getattr(state, "a2sql_metrics", None) is None:
        reading = UiReading(settings.metrics_interval)
        registry = CollectorRegistry()
        registry.register(StoreCollector(reading))
        state.a2sql_metrics = (reading, registry)
    reading, registry = state.a2sql_metrics
    await reading.refresh(settings)
    body, content_type = prometheus_exposition(registry, request.headers.get("accept"))
    return Response(body, media_type=content_type)
