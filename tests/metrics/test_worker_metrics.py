"""What workers report (a2sql.metrics): outcomes by event type, handler durations, claim
latency, lost renewals and timeouts, as Prometheus and OpenTelemetry record them.

Every test runs real workers on real events, on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from prometheus_client import CollectorRegistry

import a2sql
from a2sql import NewEvent, Store
from a2sql.metrics import OpenTelemetryMetrics, PrometheusMetrics
from a2sql.metrics.recorder import SECONDS_BUCKETS
from a2sql.testing import FakeClock
from a2sql.worker import AsyncAttempt, AsyncWorker, Attempt, Backoff
from tests.worker.quick import quick

HANDLED = "a2sql_worker_events_handled_total"
DURATION = "a2sql_worker_handler_duration_seconds"
LATENCY = "a2sql_worker_claim_latency_seconds"


@pytest.fixture
def store(url: str, clock: FakeClock) -> Iterator[Store]:
    with a2sql.create_store(url, clock=clock, migrate=True) as opened:
        yield opened


def _fail_boom(attempt: Attempt) -> None:
    if attempt.event.type == "boom":
        raise ValueError("boom")


def _work(store: Store, clock: FakeClock) -> None:
    """Three ``ok`` events and a ``boom`` that fails twice (a dead letter at
    max_failures=2), all appended 5 s before the worker starts."""
    store.append("s1", [NewEvent("ok"), NewEvent("ok")])
    store.append("s2", [NewEvent("boom"), NewEvent("ok")])
    clock.advance(seconds=5)


def test_prometheus_sees_outcomes_durations_and_claim_latency(
    store: Store, clock: FakeClock
) -> None:
    _work(store, clock)
    registry = CollectorRegistry()
    worker = quick(store, _fail_boom, metrics=PrometheusMetrics(registry), max_failures=2)
    worker.run(until_idle=True)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample(HANDLED, type="ok", outcome="completed") == 3
    assert sample(HANDLED, type="boom", outcome="failed") == 1
    assert sample(HANDLED, type="boom", outcome="dead_lettered") == 1
    assert sample(HANDLED, type="ok", outcome="failed") is None
    assert sample(f"{DURATION}_count", type="ok") == 3
    assert sample(f"{DURATION}_count", type="boom") == 2
    assert sample(f"{DURATION}_bucket", type="ok", le="+Inf") == 3
    # Claim latency, by the store's clock: each first claim came 5 s after the append;
    # the retry of ``boom`` waited for its failure, which is not measured.
    assert sample(f"{LATENCY}_count", type="ok") == 3
    assert sample(f"{LATENCY}_sum", type="ok") == pytest.approx(15.0)
    assert sample(f"{LATENCY}_count", type="boom") == 1
    assert sample(f"{LATENCY}_bucket", type="ok", le="2.5") == 0
    assert sample(f"{LATENCY}_bucket", type="ok", le="5.0") == 3
    assert dict(worker.outcomes) == {"completed": 3, "failed": 1, "dead_lettered": 1}


def test_timeouts_are_counted_by_event_type(store: Store) -> None:
    store.append("t", [NewEvent("slow"), NewEvent("quick")])
    registry = CollectorRegistry()

    def handler(attempt: Attempt) -> None:
        if attempt.event.type == "slow":
            time.sleep(0.5)  # past timeout_s: failed, then dead-lettered

    worker = quick(
        store, handler, metrics=PrometheusMetrics(registry), timeout_s=0.05, max_failures=2
    )
    worker.run(until_idle=True)
    timeouts = "a2sql_worker_handler_timeouts_total"
    assert registry.get_sample_value(timeouts, {"type": "slow"}) == 2
    assert registry.get_sample_value(timeouts, {"type": "quick"}) is None
    assert registry.get_sample_value(HANDLED, {"type": "slow", "outcome": "dead_lettered"}) == 1


def test_a_cancelled_session_is_a_lost_renewal_for_each_claim_held(store: Store) -> None:
    """Cancelled while its handler runs: the renewal finds both claims of the batch gone
    (the running one and the one waiting behind it); both end superseded."""
    store.append("c", [NewEvent("long"), NewEvent("after")])
    registry = CollectorRegistry()
    started = threading.Event()

    def handler(attempt: Attempt) -> None:
        started.set()
        deadline = time.monotonic() + 10
        while not attempt.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)

    worker = quick(store, handler, metrics=PrometheusMetrics(registry), ttl_ms=300)
    serving = threading.Thread(target=worker.run_session, args=("c",))
    serving.start()
    try:
        assert started.wait(10)
        store.cancel_session("c", reason="hung up")
    finally:
        serving.join(15)
    lost = "a2sql_worker_renewals_lost_total"
    assert registry.get_sample_value(lost, {"type": "long"}) == 1
    assert registry.get_sample_value(lost, {"type": "after"}) == 1
    assert registry.get_sample_value(HANDLED, {"type": "long", "outcome": "superseded"}) == 1
    assert registry.get_sample_value(HANDLED, {"type": "after", "outcome": "superseded"}) == 1


def test_claims_released_at_a_stop_are_counted_without_a_duration(store: Store) -> None:
    store.append("r", [NewEvent("first"), NewEvent("second")])
    registry = CollectorRegistry()
    worker = quick(store, lambda attempt: None, metrics=PrometheusMetrics(registry))

    def handler(attempt: Attempt) -> None:
        worker.stop()  # the second event of the batch is released, not handled

    worker.handler = handler
    assert worker.run_session("r") == "stopped"
    assert registry.get_sample_value(HANDLED, {"type": "first", "outcome": "completed"}) == 1
    assert registry.get_sample_value(HANDLED, {"type": "second", "outcome": "released"}) == 1
    assert registry.get_sample_value(f"{DURATION}_count", {"type": "second"}) is None
    assert registry.get_sample_value(f"{LATENCY}_count", {"type": "second"}) == 1


def test_an_async_worker_reports_the_same(url: str, clock: FakeClock) -> None:
    registry = CollectorRegistry()

    async def handler(attempt: AsyncAttempt) -> None:
        if attempt.event.type == "boom":
            raise ValueError("boom")
        if attempt.event.type == "slow":
            await asyncio.sleep(5)  # cancelled at timeout_s

    async def main() -> AsyncWorker:
        async with a2sql.create_async_store(url, clock=clock, migrate=True) as store:
            await store.append("s1", [NewEvent("ok"), NewEvent("ok")])
            await store.append("s2", [NewEvent("boom"), NewEvent("slow")])
            clock.advance(seconds=2)
            worker = AsyncWorker(
                store,
                handler,
                metrics=PrometheusMetrics(registry),
                poll_interval=0.05,
                backoff=Backoff.none(),
                max_failures=1,
                timeout_s=0.1,
            )
            await worker.run(until_idle=True)
            return worker

    worker = asyncio.run(main())
    assert dict(worker.outcomes) == {"completed": 2, "dead_lettered": 2}
    assert registry.get_sample_value(HANDLED, {"type": "ok", "outcome": "completed"}) == 2
    assert registry.get_sample_value(HANDLED, {"type": "boom", "outcome": "dead_lettered"}) == 1
    timeouts = "a2sql_worker_handler_timeouts_total"
    assert registry.get_sample_value(timeouts, {"type": "slow"}) == 1
    assert registry.get_sample_value(f"{DURATION}_count", {"type": "slow"}) == 1
    assert registry.get_sample_value(f"{LATENCY}_sum", {"type": "ok"}) == pytest.approx(4.0)


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point the reader collects now, by metric name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def by(found: list[Any], **attributes: str) -> Any:
    [point] = [p for p in found if dict(p.attributes) == attributes]
    return point


def test_opentelemetry_sees_the_same_worker_metrics(store: Store, clock: FakeClock) -> None:
    _work(store, clock)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        metrics = OpenTelemetryMetrics(provider.get_meter("a2sql-tests"))
        quick(store, _fail_boom, metrics=metrics, max_failures=2).run(until_idle=True)
        found = points(reader)
    finally:
        provider.shutdown()
    handled = found["a2sql.worker.events.handled"]
    assert by(handled, type="ok", outcome="completed").value == 3
    assert by(handled, type="boom", outcome="failed").value == 1
    assert by(handled, type="boom", outcome="dead_lettered").value == 1
    duration: HistogramDataPoint = by(found["a2sql.worker.handler.duration"], type="ok")
    assert duration.count == 3
    assert tuple(duration.explicit_bounds) == SECONDS_BUCKETS  # the advice was taken
    latency: HistogramDataPoint = by(found["a2sql.worker.claim.latency"], type="ok")
    assert (latency.count, latency.sum) == (3, pytest.approx(15.0))
    assert by(found["a2sql.worker.claim.latency"], type="boom").count == 1
