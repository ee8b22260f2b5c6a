"""No page of the UI reads the whole events table: every statement a page issues is
explained by the engine, and every read of ``a2_events`` in its plan either seeks a
key (an index condition) or walks one of the partial indexes of events still to do.

PostgreSQL plans with sequential scans switched off, so that a scan it could avoid
with some index is not mistaken for one it needs: whatever is left scanning the
table has no index to go by, whatever the table's size. (bench/ui.py times the
pages on a million events and prints their plans there.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from starlette.testclient import TestClient

import a2sql
import a2sql.ui
from tests.ui.scenery import populate

PAGES = [
    "/",
    "/sessions",
    "/sessions?prefix=chat/",
    *(f"/sessions?state={state}" for state in ("dead_letters", "blocked", "claimed", "waiting")),
    "/session?id=chat/1",
    "/dead-letters",
    "/in-flight",
    "/metrics",
]

# The partial indexes (a2sql.sql.schema): each holds only events still to do (or, for
# a2_events_waiting, waits and signals), so walking one is bounded by that work.
PARTIAL = {
    "a2_events_unprocessed",
    "a2_events_lane_pending",
    "a2_events_dispatch_ready",
    "a2_events_claim_expiry",
    "a2_events_dispatch_free",
    "a2_events_dispatch_due",
    "a2_events_waiting",
}


def _statements(store: a2sql.Store) -> dict[str, list[tuple[str, Any]]]:
    """The SELECTs each page issues, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def record(_c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        client = TestClient(a2sql.ui.app(store))
        by_page = {}
        for page in PAGES:
            start = len(seen)
            assert client.get(page).status_code == 200, page
            by_page[page] = seen[start:]
            assert by_page[page], f"{page} issued no SELECT that a listener saw"
        return by_page
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


@pytest.fixture
def store(url: str) -> Iterator[a2sql.Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        populate(opened)
        yield opened


def _postgres_problems(store: a2sql.Store, statement: str, parameters: Any) -> list[str]:
    with store.engine.connect() as connection:
        connection.exec_driver_sql("SET enable_seqscan = off")
        [[plan]] = connection.exec_driver_sql(
            f"EXPLAIN (FORMAT JSON) {statement}", parameters
        ).fetchall()
    problems: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        if node.get("Relation Name") == "a2_events" or node.get("Index Name", "").startswith(
            "a2_events"
        ):
            kind = node["Node Type"]
            index = node.get("Index Name")
            if kind == "Seq Scan":
                problems.append("a sequential scan of a2_events")
            elif index is not None and index not in PARTIAL and "Index Cond" not in node:
                problems.append(f"{kind} of all of {index}")
        for child in node.get("Plans", []):
            walk(child)

    walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
    return problems


# "SCAN a2_events" (or an alias of it) reads every row, unless it walks a partial index.
_SQLITE_SCAN = re.compile(r"^SCAN (a2_events|behind)\b(?: USING (?:COVERING )?INDEX (\w+))?")


def _sqlite_problems(store: a2sql.Store, statement: str, parameters: Any) -> list[str]:
    with store.engine.connect() as connection:
        rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
        details = [str(row[-1]) for row in rows]
    problems = []
    for detail in details:
        found = _SQLITE_SCAN.match(detail)
        if found and found.group(2) not in PARTIAL:
            problems.append(detail)
    return problems


def test_no_page_reads_the_whole_events_table(store: a2sql.Store) -> None:
    check = _postgres_problems if store.engine.dialect.name == "postgresql" else _sqlite_problems
    found = {
        page: problems
        for page, statements in _statements(store).items()
        for statement, parameters in statements
        if (problems := check(store, statement, parameters))
    }
    assert not found, json.dumps(found, indent=2)
