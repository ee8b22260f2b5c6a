"""The store's gauges (a2sql.metrics): what ``inspect.overview`` counts, by prefix, for
Prometheus and OpenTelemetry, read at most once per interval however many scrape.

On a SQLite file and on PostgreSQL; statements are counted as the engine runs them.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event

import a2sql
from a2sql import A2Error, NewEvent, Store
from a2sql.metrics import (
    OverviewReader,
    StoreCollector,
    observe_store,
    prometheus_exposition,
)
from a2sql.testing import FakeClock
from tests.metrics.test_worker_metrics import by, points


@pytest.fixture
def store(url: str, clock: FakeClock) -> Iterator[Store]:
    with a2sql.create_store(url, clock=clock, migrate=True) as opened:
        yield opened


def _mixed(store: Store, clock: FakeClock) -> None:
    """Under ``o/``: ready 2 (since now), claimed 1, waiting 1, scheduled 1, dead letters 1
    blocking one lane; under ``p/``: a dead letter. Then 7 s pass."""
    now = clock.now()
    store.append("o/ready", [NewEvent("a"), NewEvent("b")])
    store.append("o/claimed", [NewEvent("c")])
    assert store.claim_available("o/claimed", holder="w", ttl_ms=60_000).outcome == "claimed"
    store.append("o/waiting", [NewEvent("w", wake_on="go")])
    store.append("o/later", [NewEvent("l", available_at=now + timedelta(hours=1))])
    store.append("o/dead", [NewEvent("d", lane="L"), NewEvent("e", lane="L")])
    store.append("p/dead", [NewEvent("g")])
    for session_id in ("o/dead", "p/dead"):
        [head] = store.claim_available(session_id, holder="w", ttl_ms=60_000).events
        store.fail_attempt(session_id, index=head.index, attempt=1, error="x", max_failures=1)
    clock.advance(seconds=7)


def _scraped(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """The registry's samples as Prometheus text says them: (name, prefix) -> value."""
    body, content_type = prometheus_exposition(registry)
    assert content_type.startswith("text/plain")
    return {
        (sample.name, sample.labels.get("prefix", "")): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


EXPECTED = {
    "": {"ready": 2, "claimed": 1, "waiting": 1, "scheduled": 1, "dead": 2, "blocked": 1},
    "o/": {"ready": 2, "claimed": 1, "waiting": 1, "scheduled": 1, "dead": 1, "blocked": 1},
    "p/": {"ready": 0, "claimed": 0, "waiting": 0, "scheduled": 0, "dead": 1, "blocked": 0},
}


def test_prometheus_store_gauges_by_prefix(store: Store, clock: FakeClock) -> None:
    _mixed(store, clock)
    registry = CollectorRegistry()
    registry.register(StoreCollector(OverviewReader(store, prefixes=["", "o/", "p/"])))
    found = _scraped(registry)
    for prefix, expected in EXPECTED.items():
        assert found["a2sql_store_ready_events", prefix] == expected["ready"]
        assert found["a2sql_store_claimed_events", prefix] == expected["claimed"]
        assert found["a2sql_store_waiting_events", prefix] == expected["waiting"]
        assert found["a2sql_store_scheduled_events", prefix] == expected["scheduled"]
        assert found["a2sql_store_dead_letters", prefix] == expected["dead"]
        assert found["a2sql_store_blocked_lanes", prefix] == expected["blocked"]
        assert found["a2sql_store_count_bound", prefix] == 10_000
    assert found["a2sql_store_oldest_ready_age_seconds", "o/"] == pytest.approx(7.0)
    assert found["a2sql_store_oldest_ready_age_seconds", "p/"] == 0  # none ready


def test_opentelemetry_store_gauges_by_prefix(store: Store, clock: FakeClock) -> None:
    _mixed(store, clock)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        meter = provider.get_meter("a2sql-tests")
        observe_store(meter, OverviewReader(store, prefixes=["", "o/", "p/"]))
        found = points(reader)
    finally:
        provider.shutdown()
    for prefix, expected in EXPECTED.items():
        assert by(found["a2sql.store.ready"], prefix=prefix).value == expected["ready"]
        assert by(found["a2sql.store.claimed"], prefix=prefix).value == expected["claimed"]
        assert by(found["a2sql.store.waiting"], prefix=prefix).value == expected["waiting"]
        assert by(found["a2sql.store.scheduled"], prefix=prefix).value == expected["scheduled"]
        assert by(found["a2sql.store.dead_letters"], prefix=prefix).value == expected["dead"]
        assert by(found["a2sql.store.blocked_lanes"], prefix=prefix).value == expected["blocked"]
    age = by(found["a2sql.store.oldest_ready.age"], prefix="o/").value
    assert age == pytest.approx(7.0)


def test_the_store_is_read_once_per_interval_however_many_scrape(store: Store) -> None:
    """Prometheus scrapes from 8 threads and OpenTelemetry collections share one reading
    per interval: the statements the engine runs say so."""
    store.append("s", [NewEvent("a")])
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(store.engine, "before_cursor_execute", count)
    store.inspect.overview()  # a connection is set up: only readings count below
    statements.clear()
    now = [0.0]
    reader = OverviewReader(store, prefixes=["", "s"], interval=15, timer=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(StoreCollector(reader))  # describing reads nothing
    otel = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[otel])
    try:
        observe_store(provider.get_meter("a2sql-tests"), reader)
        assert statements == []
        assert _scraped(registry)["a2sql_store_ready_events", "s"] == 1
        one_reading = len(statements)
        assert one_reading > 0

        def scrape() -> None:
            for _ in range(5):
                prometheus_exposition(registry)

        threads = [threading.Thread(target=scrape) for _ in range(8)]
        for thread in threads:
            thread.start()
        for _ in range(3):
            assert by(points(otel)["a2sql.store.ready"], prefix="s").value == 1
        for thread in threads:
            thread.join()
        assert len(statements) == one_reading
        now[0] += 14.9
        prometheus_exposition(registry)
        assert len(statements) == one_reading
        store.append("s", [NewEvent("b")])
        appended = len(statements)
        now[0] += 0.1  # the interval is over: the next scrape reads again, once
        assert _scraped(registry)["a2sql_store_ready_events", "s"] == 2
        assert by(points(otel)["a2sql.store.ready"], prefix="s").value == 2
        assert len(statements) == appended + one_reading
    finally:
        provider.shutdown()
        event.remove(store.engine, "before_cursor_execute", count)


def test_a_failed_reading_gives_no_gauges_until_the_next_interval(url: str) -> None:
    store = a2sql.create_store(url, migrate=True)
    now = [0.0]
    reader = OverviewReader(store, interval=15, timer=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(StoreCollector(reader))
    store.close()  # every read fails from here on
    assert ("a2sql_store_ready_events", "") not in _scraped(registry)
    assert reader.read() == {}


def test_the_reader_checks_its_arguments(store: Store) -> None:
    wrong: list[dict[str, Any]] = [
        {"prefixes": "o/"},
        {"prefixes": []},
        {"prefixes": ["", "x" * 300]},
        {"interval": 0},
        {"interval": True},
        {"interval": float("nan")},
        {"bound": 0},
        {"bound": 2_000_000},
    ]
    for bad in wrong:
        with pytest.raises(A2Error) as raised:
            OverviewReader(store, **bad)
        assert raised.value.code == "INVALID_ARGUMENT"


def test_importing_a2sql_loads_neither_prometheus_nor_opentelemetry() -> None:
    """The extra is loaded when a recorder or an exporter is used, not before."""
    code = (
        "import sys, a2sql, a2sql.worker, a2sql.metrics\n"
        "from a2sql.metrics import WorkerMetrics, OverviewReader\n"
        "loaded = sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('prometheus_client', 'opentelemetry'))\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
