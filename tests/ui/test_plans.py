"""No page of the UI reads the whole events table: every statement a page issues is
explained by the engine, and every read of ``a2_events`` in its plan either seeks a
key (an index condition) or walks one of the partial indexes of events still to do
(bench.ui.plan_reads, which bench/ui.py also prints on a million events).

PostgreSQL plans with sequential scans switched off, so that a scan it could avoid
with some index is not mistaken for one it needs: whatever is left scanning the
table has no index to go by, whatever the table's size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import a2sql
from bench.ui import pages, plan_reads, statements_by_page
from tests.ui.scenery import populate


@pytest.fixture
def store(url: str) -> Iterator[a2sql.Store]:
    with a2sql.create_store(url, migrate=True) as opened:
        populate(opened)
        yield opened


def test_no_page_reads_the_whole_events_table(store: a2sql.Store) -> None:
    screens = pages(store)
    assert len(screens) == 12
    by_page = statements_by_page(store, screens)
    assert all(by_page.values()), "a page issued no SELECT that a listener saw"
    found = {
        page: unbounded
        for page, statements in by_page.items()
        for statement, parameters in statements
        if (
            unbounded := [
                described
                for described, bounded in plan_reads(store, statement, parameters, seqscan=False)
                if not bounded
            ]
        )
    }
    assert not found, json.dumps(found, indent=2)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM a2_events",
        "SELECT session_id FROM a2_events ORDER BY session_id LIMIT 5",
    ],
)
def test_the_check_sees_a_read_of_every_event(store: a2sql.Store, statement: str) -> None:
    parameters = {} if store.engine.dialect.name == "postgresql" else ()
    reads = plan_reads(store, statement, parameters, seqscan=False)
    assert reads and not all(bounded for _, bounded in reads), reads
