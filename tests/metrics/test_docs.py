"""docs/metrics.md names every metric a2sql exports, under both names, and only those;
its dashboard is JSON whose queries name them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from a2sql.metrics import PrometheusMetrics, prometheus_exposition
from a2sql.metrics.gauges import STORE_GAUGES
from a2sql.metrics.recorder import (
    CLAIM_LATENCY,
    HANDLED,
    HANDLER_DURATION,
    RENEWALS_LOST,
    TIMEOUTS,
)

DOC = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
WORKER = (HANDLED, HANDLER_DURATION, CLAIM_LATENCY, RENEWALS_LOST, TIMEOUTS)


def _exported() -> set[str]:
    """Every sample name a2sql's Prometheus metrics can have, and each histogram's own."""
    metrics = PrometheusMetrics()
    names = set()
    body, _ = prometheus_exposition(metrics.registry)
    for family in text_string_to_metric_families(body.decode()):
        suffixes = {"counter": ["_total"], "histogram": ["", "_bucket", "_sum", "_count"]}
        names |= {family.name + suffix for suffix in suffixes.get(family.type, [""])}
    return names | {gauge.instrument.prometheus for gauge in STORE_GAUGES}


def test_every_metric_is_documented_under_both_names() -> None:
    for instrument in (*WORKER, *(gauge.instrument for gauge in STORE_GAUGES)):
        assert f"`{instrument.otel}`" in DOC, instrument.otel
        named = instrument.prometheus
        assert f"`{named}`" in DOC or f"`{named}_total`" in DOC, named


def test_the_doc_names_no_metric_that_does_not_exist() -> None:
    exported = _exported()
    named = set(re.findall(r"\ba2sql_\w+", DOC))
    assert named - exported == set()
    assert {HANDLED.prometheus + "_total", "a2sql_store_ready_events"} <= named


def test_the_dashboard_is_json_and_queries_metrics_that_exist() -> None:
    [block] = re.findall(r"```json\n(.*?)```", DOC, flags=re.DOTALL)
    dashboard = json.loads(block)
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(queries) == 5
    for query in queries:
        assert set(re.findall(r"\ba2sql_\w+", query)) <= _exported(), query
